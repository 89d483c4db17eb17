#!/usr/bin/env bash
set -euo pipefail
cd /app/project
first=$(git rev-list --max-parents=0 main)
git bisect start main "$first" >/dev/null
git bisect run python3 test_textstats.py > /tmp/bisect.log 2>&1
bad=$(git rev-parse refs/bisect/bad)
git bisect reset >/dev/null 2>&1
echo "$bad" > /app/first_bad.txt
