#!/usr/bin/env bash
# Verifier for geode/csv-to-json-org.
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
  "departments": [
    {
      "name": "Engineering",
      "headcount": 5,
      "total_salary": 695000,
      "avg_salary": 139000.0,
      "max_tenure_employee": 1,
      "employees": [
        {
          "id": 1,
          "name": "Ada Park",
          "title": "VP Engineering",
          "salary": 185000,
          "manager": null
        },
        {
          "id": 2,
          "name": "Ben Ortiz",
          "title": "Staff Engineer",
          "salary": 152000,
          "manager": "Ada Park"
        },
        {
          "id": 3,
          "name": "Cho, Min-jun",
          "title": "Engineer",
          "salary": 118500,
          "manager": "Ben Ortiz"
        },
        {
          "id": 8,
          "name": "Hana Sato",
          "title": "Engineer",
          "salary": 121000,
          "manager": "Ben Ortiz"
        },
        {
          "id": 12,
          "name": "Lia Costa",
          "title": "Engineer",
          "salary": 118500,
          "manager": "Ben Ortiz"
        }
      ]
    },
    {
      "name": "Marketing",
      "headcount": 2,
      "total_salary": 186500,
      "avg_salary": 93250.0,
      "max_tenure_employee": 6,
      "employees": [
        {
          "id": 6,
          "name": "Farah \"Fifi\" Nasser",
          "title": "Marketing Lead",
          "salary": 99000,
          "manager": null
        },
        {
          "id": 11,
          "name": "Kemal Aydin",
          "title": "Designer",
          "salary": 87500,
          "manager": "Farah \"Fifi\" Nasser"
        }
      ]
    },
    {
      "name": "Sales",
      "headcount": 3,
      "total_salary": 319000,
      "avg_salary": 106333.33,
      "max_tenure_employee": 4,
      "employees": [
        {
          "id": 4,
          "name": "Dalia Haddad",
          "title": "Head of Sales",
          "salary": 140000,
          "manager": null
        },
        {
          "id": 5,
          "name": "Erik Lund",
          "title": "Account Executive",
          "salary": 91000,
          "manager": "Dalia Haddad"
        },
        {
          "id": 9,
          "name": "Ivan Petrov",
          "title": "Account Executive",
          "salary": 88000,
          "manager": "Dalia Haddad"
        }
      ]
    },
    {
      "name": "Unassigned",
      "headcount": 2,
      "total_salary": 94000,
      "avg_salary": 47000.0,
      "max_tenure_employee": 7,
      "employees": [
        {
          "id": 7,
          "name": "Gus Wright",
          "title": "Contractor",
          "salary": 64000,
          "manager": null
        },
        {
          "id": 10,
          "name": "Jules Martin",
          "title": "Intern",
          "salary": 30000,
          "manager": "Ada Park"
        }
      ]
    }
  ],
  "total_headcount": 12
}
GEODE_EOF
cat > "$WORK/cmp.py" <<'PY'
import json, sys
want = json.load(open(sys.argv[1]))
try:
    got = json.load(open("/app/org.json", encoding="utf-8"))
except Exception as e:
    print("cannot load /app/org.json:", e); sys.exit(1)
what = sys.argv[2]

def same(a, b, path="$"):
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, bool) or isinstance(b, bool) or not isinstance(b, (int, float)) or abs(a - b) > 1e-9:
            raise AssertionError(f"{path}: want {a!r}, got {b!r}")
        return
    if type(a) is not type(b):
        raise AssertionError(f"{path}: want {type(a).__name__} {a!r}, got {type(b).__name__} {b!r}")
    if isinstance(a, dict):
        if set(a) != set(b):
            raise AssertionError(f"{path}: keys want {sorted(a)}, got {sorted(b)}")
        for k in a:
            same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        if len(a) != len(b):
            raise AssertionError(f"{path}: want {len(a)} items, got {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif a != b:
        raise AssertionError(f"{path}: want {a!r}, got {b!r}")

try:
    if what == "names":
        same([d["name"] for d in want["departments"]], [d.get("name") for d in got.get("departments", [])])
    elif what == "stats":
        keys = ["name", "headcount", "total_salary", "avg_salary", "max_tenure_employee"]
        same([{k: d[k] for k in keys} for d in want["departments"]],
             [{k: d.get(k) for k in keys} for d in got.get("departments", [])])
    elif what == "employees":
        same([d["employees"] for d in want["departments"]], [d.get("employees") for d in got.get("departments", [])])
    elif what == "all":
        same(want, got)
except AssertionError as e:
    print(e); sys.exit(1)
PY
check "departments present and sorted (Unassigned included)" python3 "$WORK/cmp.py" "$WORK/expected.json" names
check "headcount, salaries, average, tenure" python3 "$WORK/cmp.py" "$WORK/expected.json" stats
check "employees sorted, trimmed, typed, with manager names" python3 "$WORK/cmp.py" "$WORK/expected.json" employees
check "whole document matches" python3 "$WORK/cmp.py" "$WORK/expected.json" all

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
