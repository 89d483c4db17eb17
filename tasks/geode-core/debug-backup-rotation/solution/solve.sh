#!/usr/bin/env bash
set -euo pipefail
cat > /app/rotate_backups.sh <<'SH'
#!/bin/bash
# rotate_backups.sh DIR KEEP
#
# DIR holds backups named backup-N.tar.gz, where N is a sequence number (1, 2, ..., 10, 11, ...;
# no leading zeros). Keep the KEEP backups with the highest sequence numbers and delete the
# other backups, printing "deleted backup-N.tar.gz" for each, lowest N first. Any other file in
# DIR (backup-notes.txt, backup-7.tar.gz.part, subdirectories, ...) is never touched.
# DIR may contain spaces. KEEP must be a non-negative integer, otherwise print a usage message to
# stderr and exit 2. With nothing to delete print nothing. Exit 0 on success.
set -euo pipefail
if [ $# -ne 2 ] || ! [[ $2 =~ ^[0-9]+$ ]]; then
    echo "usage: rotate_backups.sh DIR KEEP" >&2
    exit 2
fi
DIR=$1
KEEP=$((10#$2))
cd -- "$DIR"
seqs=()
for f in backup-*.tar.gz; do
    [ -f "$f" ] || continue
    if [[ $f =~ ^backup-([1-9][0-9]*)\.tar\.gz$ ]]; then
        seqs+=("${BASH_REMATCH[1]}")
    fi
done
[ ${#seqs[@]} -gt 0 ] || exit 0
mapfile -t sorted < <(printf '%s\n' "${seqs[@]}" | sort -n)
ndel=$(( ${#sorted[@]} - KEEP ))
for ((i = 0; i < ndel; i++)); do
    f="backup-${sorted[i]}.tar.gz"
    rm -f -- "$f"
    echo "deleted $f"
done
exit 0
SH
chmod +x /app/rotate_backups.sh
