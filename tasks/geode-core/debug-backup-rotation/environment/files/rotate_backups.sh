#!/bin/bash
# rotate_backups.sh DIR KEEP
#
# DIR holds backups named backup-N.tar.gz, where N is a sequence number (1, 2, ..., 10, 11, ...;
# no leading zeros). Keep the KEEP backups with the highest sequence numbers and delete the
# other backups, printing "deleted backup-N.tar.gz" for each, lowest N first. Any other file in
# DIR (backup-notes.txt, backup-7.tar.gz.part, subdirectories, ...) is never touched.
# DIR may contain spaces. KEEP must be a non-negative integer, otherwise print a usage message to
# stderr and exit 2. With nothing to delete print nothing. Exit 0 on success.
set -e
DIR=$1
KEEP=$2
cd $DIR
for f in $(ls backup-* | sort | head -n -$KEEP); do
    rm $f
    echo "deleted $f"
done
