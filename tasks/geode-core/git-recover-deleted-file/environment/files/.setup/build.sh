#!/bin/sh
# Builds /app/repo with a fixed, reproducible history.
set -eu
git config --global user.email "dev@example.com"
git config --global user.name "GEODE Dev"
git config --global init.defaultBranch main
n=0
commit() {
  n=$((n + 1))
  GIT_AUTHOR_DATE="2024-03-0${1}T10:00:00Z" GIT_COMMITTER_DATE="2024-03-0${1}T10:00:00Z" git commit -q -m "$2"
}
mkdir -p /app/repo
cd /app/repo
git init -q
mkdir -p config src
printf '# inventory-service\n\nA small service.\n' > README.md
printf 'server:\n  port: 8080\n  timeout: 10\ndatabase:\n  url: sqlite:///dev.db\n' > config/settings.yml
printf 'print("inventory service")\n' > src/app.py
git add -A && commit 1 "Initial commit"
printf 'server:\n  port: 8080\n  timeout: 30\ndatabase:\n  url: sqlite:///dev.db\n  pool: 5\n' > config/settings.yml
git add -A && commit 2 "Tune settings"
printf 'import logging\nlog = logging.getLogger("inventory")\n' > src/log.py
git add -A && commit 3 "Add logging"
printf 'server:\n  port: 443\n  timeout: 45\n  tls: true\ndatabase:\n  url: postgres://db.internal/inventory\n  pool: 20\nfeatures:\n  audit: enabled\n' > config/settings.yml
git add -A && commit 4 "Update settings for prod"
git checkout -q -b experiment
printf 'server:\n  port: 9999\n  timeout: 1\nexperimental: true\n' > config/settings.yml
git add -A && commit 5 "Experiment with settings"
git checkout -q main
git rm -q config/settings.yml
commit 6 "Remove unused config"
printf '# inventory-service\n\nA small service for tracking stock.\n' > README.md
git add -A && commit 7 "Update README"
