#!/usr/bin/env bash
# Verifier for geode/git-bisect-regression.
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

R=/app/project
t_answer() {
  local want got
  want=$(git -C "$R" log main --format='%H %s' | awk '$0 ~ / Micro-optimize hot paths \(#131\)$/ {print $1}')
  [ -n "$want" ] || { echo "reference commit not found (history modified?)"; return 1; }
  [ -f /app/first_bad.txt ] || { echo "missing /app/first_bad.txt"; return 1; }
  got=$(tr -d '[:space:]' < /app/first_bad.txt)
  [ "$got" = "$want" ] || { echo "got '$got'"; return 1; }
}
t_format() { python3 -c 'import re,sys; d=open("/app/first_bad.txt").read(); sys.exit(0 if re.fullmatch(r"[0-9a-f]{40}\n?", d) else 1)'; }
t_history() {
  [ "$(git -C "$R" rev-list --count main)" = 48 ] || return 1
  [ "$(git -C "$R" log -1 --format='%s|%at' main)" = "Add contributor notes (#148)|1704240000" ]
}
t_checkout() { [ "$(git -C "$R" symbolic-ref --short HEAD)" = main ] && [ "$(git -C "$R" rev-parse HEAD)" = "$(git -C "$R" rev-parse main)" ]; }
t_nobisect() { [ ! -e "$R/.git/BISECT_LOG" ] && [ ! -e "$R/.git/BISECT_START" ]; }
t_clean() { [ -z "$(git -C "$R" status --porcelain)" ]; }
check "first_bad.txt names the first failing commit" t_answer
check "first_bad.txt holds only a full hash" t_format
check "main history unchanged" t_history
check "main checked out at its tip" t_checkout
check "no bisect session left" t_nobisect
check "working tree clean" t_clean

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
