#!/usr/bin/env bash
set -euo pipefail
cd /app/logs
{ zcat -f access.log.*.gz 2>/dev/null; cat access.log.1 access.log 2>/dev/null; } |
awk '
  match($0, /\[[0-9][0-9]\/[A-Z][a-z][a-z]\/[0-9][0-9][0-9][0-9]:[0-9][0-9]/) {
    ts = substr($0, RSTART + 1, RLENGTH - 1)
    rest = substr($0, RSTART + RLENGTH)
    if (!match(rest, /" [0-9][0-9][0-9] /)) next
    st = substr(rest, RSTART + 2, 3)
    split("Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec", m, " ")
    for (i = 1; i <= 12; i++) mon[m[i]] = sprintf("%02d", i)
    h = substr(ts, 8, 4) "-" mon[substr(ts, 4, 3)] "-" substr(ts, 1, 2) "T" substr(ts, 13, 2)
    req[h]++
    if (st >= 500 && st <= 599) err[h]++
  }
  END { for (h in req) printf "%s,%d,%d,%.4f\n", h, req[h], err[h], (err[h] + 0) / req[h] }
' | sort > /tmp/rows.csv
{ echo "hour,requests,errors_5xx,error_rate"; cat /tmp/rows.csv; } > /app/errors_by_hour.csv
