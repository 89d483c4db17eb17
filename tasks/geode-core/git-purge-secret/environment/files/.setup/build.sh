#!/bin/sh
set -eu
git config --global user.email "dev@example.com"
git config --global user.name "GEODE Dev"
KEY=sk-live-4f9a8b7c6d5e4f3a2b1c
mkdir -p /app/service
cd /app/service
git init -q -b main
c() { GIT_AUTHOR_DATE="$1" GIT_COMMITTER_DATE="$1" GIT_AUTHOR_NAME="$2" GIT_AUTHOR_EMAIL="$3" git commit -q -m "$4"; }
printf '# service\n' > README.md
printf 'def handle(path):\n    return "hello"\n' > app.py
printf '__pycache__/\n' > .gitignore
git add -A && c 2024-02-01T08:00:00Z "Ana Lima" ana@example.com "Initial commit"
printf 'API_KEY=%s\nDEBUG=false\n' "$KEY" > .env
printf 'import os\n\ndef load():\n    return dict(line.strip().split("=", 1) for line in open(".env") if "=" in line)\n' > settings.py
git add -A && c 2024-02-02T08:00:00Z "Ana Lima" ana@example.com "Add settings loader"
printf 'def handle(path):\n    if path == "/health":\n        return "ok"\n    return "hello"\n' > app.py
git add -A && c 2024-02-03T08:00:00Z "Bo Chen" bo@example.com "Add health endpoint"
printf 'API_URL = "https://api.example.com"\nAPI_KEY = "%s"  # temporary, for the load test\n' "$KEY" > config.py
git add -A && c 2024-02-04T08:00:00Z "Bo Chen" bo@example.com "Hardcode API key for load test"
printf 'import os\n\nAPI_URL = "https://api.example.com"\nAPI_KEY = os.environ.get("API_KEY", "")\n' > config.py
git add -A && c 2024-02-05T08:00:00Z "Ana Lima" ana@example.com "Read API key from environment"
GIT_COMMITTER_DATE=2024-02-05T09:00:00Z git tag -a v1.0 -m "Release 1.0"
git checkout -q -b release
printf '1.0.1\n' > VERSION
git add -A && c 2024-02-06T08:00:00Z "Ana Lima" ana@example.com "Bump version to 1.0.1"
git checkout -q main
printf 'API_KEY=%s\nDEBUG=false\nLOG_LEVEL=info\n' "$KEY" > .env
printf 'COUNTERS = {}\n\ndef incr(name):\n    COUNTERS[name] = COUNTERS.get(name, 0) + 1\n' > metrics.py
git add -A && c 2024-02-07T08:00:00Z "Bo Chen" bo@example.com "Add metrics"
printf '# service\n\nSet API_KEY in the environment before starting.\n' > README.md
git add -A && c 2024-02-08T08:00:00Z "Ana Lima" ana@example.com "Update README"
