#!/usr/bin/env bash
# Verifier for geode/log-5xx-by-hour.
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

cat > "$WORK/expected.csv" <<'GEODE_EOF'
hour,requests,errors_5xx,error_rate
2024-03-09T20,21,2,0.0952
2024-03-09T21,28,3,0.1071
2024-03-09T22,14,2,0.1429
2024-03-09T23,13,2,0.1538
2024-03-10T00,14,0,0.0000
2024-03-10T01,28,4,0.1429
2024-03-10T03,33,4,0.1212
2024-03-10T04,10,0,0.0000
2024-03-10T05,24,3,0.1250
2024-03-10T06,24,6,0.2500
2024-03-10T07,9,0,0.0000
2024-03-10T08,19,2,0.1053
GEODE_EOF
OUT=/app/errors_by_hour.csv
norm() { tr -d '\r' < "$1" | sed -e '$a\'; }
t_exists() { [ -s "$OUT" ]; }
t_header() { [ "$(head -n 1 "$OUT" | tr -d '\r')" = "hour,requests,errors_5xx,error_rate" ]; }
t_hours() { norm "$OUT" | cut -d, -f1 > "$WORK/got_h"; cut -d, -f1 "$WORK/expected.csv" > "$WORK/want_h"; same_output "$WORK/want_h" "$WORK/got_h"; }
t_counts() { norm "$OUT" | cut -d, -f1-3 > "$WORK/got_c"; cut -d, -f1-3 "$WORK/expected.csv" > "$WORK/want_c"; same_output "$WORK/want_c" "$WORK/got_c"; }
t_all() { norm "$OUT" > "$WORK/got"; same_output "$WORK/expected.csv" "$WORK/got"; }
check "output file exists" t_exists
check "header" t_header
check "hours covered (all rotations, sorted, quiet hour absent)" t_hours
check "request and 5xx counts per hour" t_counts
check "error rates with 4 decimals" t_all

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
