#!/usr/bin/env bash
set -euo pipefail
cd /app/repo
del=$(git log main --diff-filter=D --format=%H -n 1 -- config/settings.yml)
git checkout "$del^" -- config/settings.yml
git commit -q -m "Restore config/settings.yml"
