#!/usr/bin/env bash
# Verifier for geode/git-merge-conflict.
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

R=/app/shop
t_merge() {
  local parents
  parents=$(git -C "$R" rev-list --parents -n 1 HEAD) || return 1
  set -- $parents
  [ $# -eq 3 ] || { echo "HEAD is not a two-parent merge: $parents"; return 1; }
  [ "$(git -C "$R" log -1 --format=%s "$2")" = "Add dairy products, raise tax to 8%" ] || { echo "first parent wrong"; return 1; }
  [ "$(git -C "$R" log -1 --format=%s "$3")" = "Add volume discount" ] || { echo "second parent wrong"; return 1; }
  [ "$(git -C "$R" rev-parse feature/discounts)" = "$3" ] || { echo "feature/discounts moved"; return 1; }
  [ "$(git -C "$R" rev-list --count HEAD)" = 5 ]
}
t_branch() { [ "$(git -C "$R" symbolic-ref --short HEAD)" = main ]; }
t_clean() { [ -z "$(git -C "$R" status --porcelain --untracked-files=no)" ] && [ ! -e "$R/.git/MERGE_HEAD" ]; }
t_markers() { ! git -C "$R" grep -n -E '^(<<<<<<<|=======|>>>>>>>)' HEAD -- . ; }
t_prices() {
  cd "$WORK" && git -C "$R" show HEAD:prices.py > "$WORK/prices.py" && timeout 20 python3 - <<'PY'
import sys
sys.path.insert(0, ".")
import prices
want = {"apple": 0.50, "bread": 2.25, "cheese": 4.75, "coffee": 6.40, "eggs": 3.10, "milk": 1.20}
assert prices.PRICES == want, prices.PRICES
assert list(prices.PRICES) == sorted(want), "price list not sorted by name"
assert prices.TAX_RATE == 0.08, prices.TAX_RATE
PY
}
t_totals() {
  cd "$WORK" && timeout 20 python3 - <<'PY'
import sys
sys.path.insert(0, ".")
import prices
P = {"apple": 0.50, "bread": 2.25, "cheese": 4.75, "coffee": 6.40, "eggs": 3.10, "milk": 1.20}
def ref(items):
    amount = sum(P[n] * q for n, q in items.items())
    amount -= round(amount * 0.10, 2) if amount >= 20 else 0.0
    return round(amount * 1.08, 2)
baskets = [{"apple": 3, "milk": 1}, {"coffee": 2, "cheese": 2, "eggs": 1},
           {"bread": 4, "coffee": 1, "apple": 2}, {"eggs": 10}, {"coffee": 3, "milk": 2}]
for b in baskets:
    got, want = prices.total(b), ref(b)
    assert abs(got - want) < 0.001, (b, got, want)
PY
}
t_changelog() {
  git -C "$R" show HEAD:CHANGELOG.md > "$WORK/CHANGELOG.md" && python3 - "$WORK/CHANGELOG.md" <<'PY'
import sys
lines = [l.strip() for l in open(sys.argv[1]) if l.strip()]
want = ["# Changelog", "## Unreleased", "- Add cheese and eggs; sales tax is now 8%",
        "- Add coffee and a 10% discount on orders of 20.00 or more", "## 1.0.0", "- First release"]
assert lines == want, lines
PY
}
check "HEAD is a merge of main and feature/discounts" t_merge
check "main is checked out" t_branch
check "merge committed, working tree clean" t_clean
check "no conflict markers in HEAD" t_markers
check "prices.py keeps all products and main's tax" t_prices
check "total() applies discount then tax (hidden baskets)" t_totals
check "CHANGELOG.md keeps both entries in order" t_changelog

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
