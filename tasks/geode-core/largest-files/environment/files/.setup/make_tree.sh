#!/bin/sh
set -eu
mkdir -p /app/data/app /app/data/db "/app/data/old logs" /app/data/.cache
head -c 5000 /dev/zero > /app/data/app/server.log
head -c 12000 /dev/zero > /app/data/app/worker.log
head -c 700 /dev/zero > /app/data/db/query.log
head -c 40000 /dev/zero > /app/data/db/dump.sql
head -c 9000 /dev/zero > "/app/data/old logs/jan 2024.log"
head -c 12000 /dev/zero > /app/data/.cache/hidden.log
head -c 90000 /dev/zero > /app/data/app/archive.log.gz
head -c 3000 /dev/zero > /app/data/app/UPPER.LOG
