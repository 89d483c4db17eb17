#!/usr/bin/env bash
# Verifier for geode/log-latency-report.
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
endpoint,completed,incomplete,p50_ms,p95_ms,p99_ms,max_ms,error_rate
GET /api/items,230,9,58,95,5034,5090,0.052
GET /api/users/:id,214,11,134,226,5163,5204,0.084
GET /healthz,230,11,3,5,5,5003,0.074
POST /api/orders,189,6,627,1009,5365,5555,0.063
GEODE_EOF
OUT=/app/latency_report.csv
cat > "$WORK/cmp.py" <<'PY'
import csv, sys
want = list(csv.reader(open(sys.argv[1], newline="")))
try:
    got = list(csv.reader(open("/app/latency_report.csv", newline="")))
except OSError as e:
    print(e); sys.exit(1)
cols = {"header": None, "endpoints": [0], "counts": [0, 1, 2], "percentiles": [0, 3, 4, 5, 6], "errors": [0, 7]}[sys.argv[2]]
if cols is None:
    ok = got[:1] == want[:1]
else:
    ok = [[r[i] if i < len(r) else None for i in cols] for r in got[1:]] == [[r[i] for i in cols] for r in want[1:]]
if not ok:
    print("want:", want if cols is None else [[r[i] for i in cols] for r in want[1:]])
    print("got: ", got[:1] if cols is None else [[r[i] if i < len(r) else None for i in cols] for r in got[1:]])
    sys.exit(1)
PY
t_exists() { [ -s "$OUT" ]; }
check "report exists" t_exists
check "header" python3 "$WORK/cmp.py" "$WORK/expected.csv" header
check "one row per endpoint, sorted" python3 "$WORK/cmp.py" "$WORK/expected.csv" endpoints
check "completed / incomplete counts (id reuse pairing)" python3 "$WORK/cmp.py" "$WORK/expected.csv" counts
check "nearest-rank p50/p95/p99 and max" python3 "$WORK/cmp.py" "$WORK/expected.csv" percentiles
check "error rates" python3 "$WORK/cmp.py" "$WORK/expected.csv" errors

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
