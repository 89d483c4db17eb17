#!/usr/bin/env bash
# Verifier for geode/sqlite-top-customers.
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

OUT=/app/top_customers.csv
cat > "$WORK/check.py" <<'PY'
import csv, sqlite3, sys
EXPECTED = [
    ["customer_id", "name", "country", "orders", "revenue"],
    ["17", "Smith, Jane", "FR", "9", "2733.86"],
    ["5", "Kai Ibrahim", "PT", "4", "2105.90"],
    ["23", 'Dmitri "Dima" Ivanov', "NG", "7", "2078.38"],
    ["37", "Chen Ibrahim", "PT", "6", "2009.86"],
    ["27", "Eli Novak", "BR", "6", "1902.82"],
]
what = sys.argv[1]
if what == "db":
    db = sqlite3.connect("file:/app/shop.db?mode=ro", uri=True)
    got = db.execute("select count(*), sum(quantity*unit_price_cents), (select count(*) from orders), "
                     "(select group_concat(status) from orders where id % 50 = 0), "
                     "(select count(*) from customers) from order_items").fetchall()
    want = [(798, 13198800, 406, "refunded,pending,paid,paid,paid,refunded,refunded,paid", 40)]
    assert got == want, got
    sys.exit(0)
with open("/app/top_customers.csv", newline="") as f:
    rows = [r for r in csv.reader(f)]
if what == "header":
    assert rows and rows[0] == EXPECTED[0], rows[:1]
elif what == "count":
    assert len(rows) == 6, f"{len(rows)} lines (expected header + 5 rows)"
elif what == "ids":
    assert [r[0] for r in rows[1:]] == [r[0] for r in EXPECTED[1:]], [r[:1] for r in rows[1:]]
elif what == "rows":
    for want, got in zip(EXPECTED[1:], rows[1:]):
        assert got == want, (want, got)
    assert len(rows) == 6
PY
t_exists() { [ -s "$OUT" ]; }
check "output file exists" t_exists
check "header line" python3 "$WORK/check.py" header
check "exactly 5 customer rows" python3 "$WORK/check.py" count
check "right customers in the right order" python3 "$WORK/check.py" ids
check "names (CSV quoting), countries, order counts and revenue" python3 "$WORK/check.py" rows
check "database left unchanged" python3 "$WORK/check.py" db

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
