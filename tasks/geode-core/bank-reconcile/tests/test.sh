#!/usr/bin/env bash
# Verifier for geode/bank-reconcile.
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

cat > "$WORK/expected.json" <<'GEODE_EOF'
{
  "matched": [
    {
      "ref": "L001",
      "bank_line": 2,
      "amount": "10000.00",
      "days_apart": 0
    },
    {
      "ref": "L002",
      "bank_line": 3,
      "amount": "-1234.56",
      "days_apart": 2
    },
    {
      "ref": "L003",
      "bank_line": 5,
      "amount": "-45.00",
      "days_apart": 1
    },
    {
      "ref": "L004",
      "bank_line": 4,
      "amount": "-45.00",
      "days_apart": 1
    },
    {
      "ref": "L005",
      "bank_line": 6,
      "amount": "2500.00",
      "days_apart": 3
    },
    {
      "ref": "L006",
      "bank_line": 8,
      "amount": "-1800.00",
      "days_apart": 0
    },
    {
      "ref": "L008",
      "bank_line": 10,
      "amount": "-389.90",
      "days_apart": 0
    },
    {
      "ref": "L009",
      "bank_line": 12,
      "amount": "-3100.00",
      "days_apart": 2
    },
    {
      "ref": "L010",
      "bank_line": 13,
      "amount": "-3100.00",
      "days_apart": 1
    },
    {
      "ref": "L011",
      "bank_line": 14,
      "amount": "2500.00",
      "days_apart": 1
    },
    {
      "ref": "L014",
      "bank_line": 18,
      "amount": "-1800.00",
      "days_apart": 0
    },
    {
      "ref": "L015",
      "bank_line": 21,
      "amount": "1000.00",
      "days_apart": 3
    },
    {
      "ref": "L016",
      "bank_line": 20,
      "amount": "-45.00",
      "days_apart": 3
    }
  ],
  "unmatched_ledger": [
    "L007",
    "L012",
    "L013",
    "L017"
  ],
  "unmatched_bank": [
    {
      "line": 7,
      "date": "2024-01-10",
      "description": "BANK FEE",
      "amount": "-0.99"
    },
    {
      "line": 9,
      "date": "2024-01-16",
      "description": "CLIENT PAYMENT ORCA",
      "amount": "750.50"
    },
    {
      "line": 11,
      "date": "2024-01-22",
      "description": "REFUND OFFICE CHAIRS",
      "amount": "389.90"
    },
    {
      "line": 15,
      "date": "2024-02-05",
      "description": "SOFTWARE LICENSE",
      "amount": "-99.00"
    },
    {
      "line": 16,
      "date": "2024-02-10",
      "description": "BANK FEE",
      "amount": "-0.99"
    },
    {
      "line": 17,
      "date": "2024-02-12",
      "description": "TRAVEL",
      "amount": "-412.35"
    },
    {
      "line": 19,
      "date": "2024-02-20",
      "description": "INTEREST",
      "amount": "0.42"
    },
    {
      "line": 22,
      "date": "2024-02-29",
      "description": "COFFEE SUPPLIES",
      "amount": "-45.00"
    }
  ],
  "bank_total": "5023.03",
  "ledger_total": "4979.51",
  "difference": "43.52"
}
GEODE_EOF
cat > "$WORK/cmp.py" <<'PY'
import json, sys
want = json.load(open(sys.argv[1]))
try:
    got = json.load(open("/app/reconciliation.json"))
except Exception as e:
    print("cannot load /app/reconciliation.json:", e); sys.exit(1)
keys = {"matched": ["matched"], "ledger": ["unmatched_ledger"], "bank": ["unmatched_bank"],
        "totals": ["bank_total", "ledger_total", "difference"]}[sys.argv[2]]
for k in keys:
    if got.get(k) != want[k]:
        w, g = want[k], got.get(k)
        if isinstance(w, list) and isinstance(g, list):
            for a, b in zip(w, g):
                if a != b:
                    print(f"{k}: first difference: want {a}, got {b}"); break
            else:
                print(f"{k}: want {len(w)} items, got {len(g)}")
        else:
            print(f"{k}: want {w!r}, got {g!r}")
        sys.exit(1)
PY
t_exists() { [ -s /app/reconciliation.json ]; }
check "reconciliation.json exists" t_exists
check "matched pairs (greedy by ledger date, tie rules, 3-day window)" python3 "$WORK/cmp.py" "$WORK/expected.json" matched
check "unmatched ledger refs" python3 "$WORK/cmp.py" "$WORK/expected.json" ledger
check "unmatched bank rows" python3 "$WORK/cmp.py" "$WORK/expected.json" bank
check "totals and difference" python3 "$WORK/cmp.py" "$WORK/expected.json" totals

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
