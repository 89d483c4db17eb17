#!/usr/bin/env bash
# Verifier for geode/git-purge-secret.
# The exit code is ignored: only /logs/verifier/reward.txt counts ("1" = every check passed).
set -u
REWARD_DIR=/logs/verifier
mkdir -p "$REWARD_DIR"
# Never trust anything left behind in the verifier folder.
rm -f "$REWARD_DIR/reward.txt" "$REWARD_DIR/reward.json" "$REWARD_DIR/ctrf.json"
echo 0 > "$REWARD_DIR/reward.txt"
PASSED=0
FAILED=0
RESULTS=""
WORK=$(mktemp -d /tmp/geode-verify.XXXXXX)
cd /app 2>/dev/null || true

# check "name" command [args...]: runs the command in a subshell, records PASS/FAIL.
check() {
  local name=$1
  shift
  if ( "$@" ) </dev/null >"$WORK/check.out" 2>&1; then
    echo "PASS: $name"
    PASSED=$((PASSED + 1))
    RESULTS+="passed"$'\t'"$name"$'\n'
  else
    echo "FAIL: $name"
    head -n 20 "$WORK/check.out" | sed 's/^/    /'
    FAILED=$((FAILED + 1))
    RESULTS+="failed"$'\t'"$name"$'\n'
  fi
}

# same_output EXPECTED_FILE ACTUAL_FILE: exact comparison with a diff on failure.
same_output() {
  if cmp -s "$1" "$2"; then return 0; fi
  echo "--- expected vs actual (diff):"
  diff "$1" "$2" | head -n 15
  return 1
}

R=/app/service
KEY=sk-live-4f9a8b7c6d5e4f3a2b1c
C1="Ana Lima|ana@example.com|1706774400|Initial commit"
C2="Ana Lima|ana@example.com|1706860800|Add settings loader"
C3="Bo Chen|bo@example.com|1706947200|Add health endpoint"
C4="Bo Chen|bo@example.com|1707033600|Hardcode API key for load test"
C5="Ana Lima|ana@example.com|1707120000|Read API key from environment"
C6="Ana Lima|ana@example.com|1707206400|Bump version to 1.0.1"
C7="Bo Chen|bo@example.com|1707292800|Add metrics"
C8="Ana Lima|ana@example.com|1707379200|Update README"
hist() { git -C "$R" log --format='%an|%ae|%at|%s' "$1" 2>&1; }
t_main()    { [ "$(hist main)" = "$(printf '%s\n' "$C8" "$C7" "$C5" "$C4" "$C3" "$C2" "$C1")" ] || { hist main; return 1; }; }
t_release() { [ "$(hist release)" = "$(printf '%s\n' "$C6" "$C5" "$C4" "$C3" "$C2" "$C1")" ] || { hist release; return 1; }; }
t_tag() {
  [ "$(git -C "$R" cat-file -t v1.0)" = tag ] || { echo "v1.0 is not an annotated tag"; return 1; }
  [ "$(git -C "$R" tag -l --format='%(contents:subject)' v1.0)" = "Release 1.0" ] || return 1
  [ "$(hist 'v1.0^{commit}')" = "$(printf '%s\n' "$C5" "$C4" "$C3" "$C2" "$C1")" ] || return 1
  # the tag must point into the rewritten history shared with main
  git -C "$R" merge-base --is-ancestor 'v1.0^{commit}' main
}
t_noenv() {
  local refs c bad=0
  for c in $(git -C "$R" rev-list --branches --tags); do
    if git -C "$R" ls-tree -r --name-only "$c" | grep -qE '(^|/)\.env$'; then echo ".env in $c"; bad=1; fi
  done
  [ $bad -eq 0 ]
}
t_nokey_reachable() {
  local c bad=0
  for c in $(git -C "$R" rev-list --all); do
    if git -C "$R" grep -q -F "$KEY" "$c" -- 2>/dev/null; then echo "key in $c"; bad=1; fi
  done
  [ $bad -eq 0 ]
}
t_nokey_objects() {
  local n
  n=$(git -C "$R" cat-file --batch-all-objects --batch 2>/dev/null | grep -a -c -F "$KEY")
  [ "$n" = 0 ] || { echo "$n object lines still contain the key"; return 1; }
  ! grep -r -a -q -F "$KEY" "$R/.git"
}
t_redacted() {
  local c
  c=$(git -C "$R" log main --format='%H %s' | awk '/ Hardcode API key for load test$/ {print $1}')
  [ -n "$c" ] || return 1
  printf 'API_URL = "https://api.example.com"\nAPI_KEY = "***REMOVED***"  # temporary, for the load test\n' > "$WORK/want_config.py"
  git -C "$R" show "$c:config.py" > "$WORK/got_config.py" && same_output "$WORK/want_config.py" "$WORK/got_config.py"
}
t_head_files() {
  [ "$(git -C "$R" ls-tree -r --name-only main | tr '\n' ' ')" = ".gitignore README.md app.py config.py metrics.py settings.py " ] || { git -C "$R" ls-tree -r --name-only main; return 1; }
  printf '# service\n\nSet API_KEY in the environment before starting.\n' > "$WORK/want_readme"
  git -C "$R" show main:README.md > "$WORK/got_readme" && same_output "$WORK/want_readme" "$WORK/got_readme" || return 1
  printf 'import os\n\nAPI_URL = "https://api.example.com"\nAPI_KEY = os.environ.get("API_KEY", "")\n' > "$WORK/want_cfg"
  git -C "$R" show main:config.py > "$WORK/got_cfg" && same_output "$WORK/want_cfg" "$WORK/got_cfg"
}
t_release_file() { [ "$(git -C "$R" show release:VERSION)" = "1.0.1" ]; }
t_status() { [ "$(git -C "$R" symbolic-ref --short HEAD)" = main ] && [ -z "$(git -C "$R" status --porcelain)" ]; }
check "main keeps its commits, messages, authors and dates" t_main
check "release keeps its commits" t_release
check "v1.0 is an annotated tag on the rewritten history" t_tag
check "no commit contains .env" t_noenv
check "key absent from every reachable commit" t_nokey_reachable
check "key absent from every object in .git" t_nokey_objects
check "hard-coded key replaced by ***REMOVED***" t_redacted
check "main's files otherwise unchanged" t_head_files
check "release content unchanged" t_release_file
check "main checked out, status clean" t_status

# ---------------------------------------------------------------- summary and reward
echo "$PASSED passed, $FAILED failed"
printf '%s' "$RESULTS" | python3 -c '
import json, sys
tests = []
for line in sys.stdin.read().splitlines():
    if "\t" in line:
        status, name = line.split("\t", 1)
        tests.append({"name": name, "status": status, "duration": 0})
passed = sum(t["status"] == "passed" for t in tests)
report = {"results": {"tool": {"name": "geode-checks"},
          "summary": {"tests": len(tests), "passed": passed, "failed": len(tests) - passed,
                      "pending": 0, "skipped": 0, "other": 0},
          "tests": tests}}
print(json.dumps(report, indent=2))
' > "$REWARD_DIR/ctrf.json" 2>/dev/null || rm -f "$REWARD_DIR/ctrf.json"
rm -rf "$WORK"
if [ "$FAILED" -eq 0 ] && [ "$PASSED" -gt 0 ]; then
  echo 1 > "$REWARD_DIR/reward.txt"
else
  echo 0 > "$REWARD_DIR/reward.txt"
fi
