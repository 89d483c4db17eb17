#!/usr/bin/env bash
# Verifier for geode/git-recover-deleted-file.
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

R=/app/repo
t_content() {
  printf 'server:\n  port: 443\n  timeout: 45\n  tls: true\ndatabase:\n  url: postgres://db.internal/inventory\n  pool: 20\nfeatures:\n  audit: enabled\n' > "$WORK/expected.yml"
  same_output "$WORK/expected.yml" "$R/config/settings.yml"
}
t_committed() {
  git -C "$R" show HEAD:config/settings.yml > "$WORK/committed.yml" && same_output "$WORK/expected.yml" "$WORK/committed.yml"
}
t_message() { [ "$(git -C "$R" log -1 --format=%s HEAD)" = "Restore config/settings.yml" ] && [ "$(git -C "$R" log -1 --format=%b HEAD | tr -d '[:space:]')" = "" ]; }
t_parent() {
  # the parent must be the original tip of main, unchanged (same subjects and dates underneath)
  local got
  got=$(git -C "$R" log --format='%s|%at' HEAD^ | tr '\n' ';')
  [ "$got" = "Update README|1709805600;Remove unused config|1709719200;Update settings for prod|1709546400;Add logging|1709460000;Tune settings|1709373600;Initial commit|1709287200;" ] || { echo "history below HEAD: $got"; return 1; }
  [ "$(git -C "$R" rev-list --count HEAD)" = 7 ]
}
t_only_file() { [ "$(git -C "$R" diff --name-status HEAD^ HEAD)" = "A	config/settings.yml" ]; }
t_branch() { [ "$(git -C "$R" symbolic-ref --short HEAD)" = main ]; }
t_clean() { [ -z "$(git -C "$R" status --porcelain)" ]; }
check "restored file has the pre-deletion content" t_content
check "restored file is committed at HEAD" t_committed
check "commit message is exact" t_message
check "history below the new commit is the original main" t_parent
check "the commit only adds config/settings.yml" t_only_file
check "main is checked out" t_branch
check "working tree is clean" t_clean

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
