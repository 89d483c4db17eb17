#!/usr/bin/env bash
# Verifier for geode/debug-inventory.
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

cat > "$WORK/w1.txt" <<'GEODE_EOF'
# warehouse one
add bolts 9
add nuts 10
add washers 100
add anchors 10
remove bolts 9
remove nuts 11
add screws 9
  add  rivets  2
remove rivets 1

remove ghost 1
add Zinc 10
GEODE_EOF
cat > "$WORK/w2.txt" <<'GEODE_EOF'
add nuts 3
remove nuts 3
remove nuts 1
add gears 20
add cogs 20
add belts 7
GEODE_EOF
cat > "$WORK/exp.txt" <<'GEODE_EOF'
error: insufficient stock for nuts (line 7)
error: insufficient stock for ghost (line 12)
== w1.txt
washers 100
Zinc 10
anchors 10
nuts 10
screws 9
rivets 1
error: insufficient stock for nuts (line 3)
== w2.txt
cogs 20
gears 20
belts 7
GEODE_EOF
cat > "$WORK/exp1.txt" <<'GEODE_EOF'
error: insufficient stock for nuts (line 7)
error: insufficient stock for ghost (line 12)
== w1.txt
washers 100
Zinc 10
anchors 10
nuts 10
screws 9
rivets 1
GEODE_EOF
P=/app/inventory.py
t_sample() {
  printf '== /app/sample.txt\nnuts 12\nbolts 3\n' > "$WORK/ws"
  timeout 10 python3 "$P" /app/sample.txt > "$WORK/gs" && same_output "$WORK/ws" "$WORK/gs"
}
t_one() { (cd "$WORK" && timeout 10 python3 "$P" w1.txt) > "$WORK/g1" && same_output "$WORK/exp1.txt" "$WORK/g1"; }
t_two() { (cd "$WORK" && timeout 10 python3 "$P" w1.txt w2.txt) > "$WORK/g2" && same_output "$WORK/exp.txt" "$WORK/g2"; }
t_exact() {
  printf 'add a 2\nremove a 2\nadd b 1\nremove b 1\nremove b 1\nadd c 1\n' > "$WORK/w3.txt"
  printf 'error: insufficient stock for b (line 5)\n== w3.txt\nc 1\n' > "$WORK/e3"
  (cd "$WORK" && timeout 10 python3 "$P" w3.txt) > "$WORK/g3" && same_output "$WORK/e3" "$WORK/g3"
}
t_iface() { grep -q '^Usage: python3 inventory.py FILE' "$P"; }
check "sample file" t_sample
check "hidden warehouse: removals and ordering" t_one
check "two warehouses stay independent" t_two
check "removing exactly the stock on hand" t_exact
check "docstring / interface kept" t_iface

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
