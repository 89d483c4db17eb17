#!/usr/bin/env bash
# Verifier for geode/json-flatten.
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

cat > "$WORK/h1.json" <<'GEODE_EOF'
[
  {"order": {"id": "A-1", "items": [{"sku": "x1", "qty": 2, "opts": ["red", "xl"]}, {"sku": "y2", "qty": 1}], "paid": true},
   "total": 19.5, "big": 1e100, "neg": -0.0, "int_float": 3.0, "text": "line1\nline2", "quote": "say \"hi\"", "unicode": "café ☕"},
  {},
  {"order": {"id": "A-2", "items": [], "paid": false}, "total": 0, "extra": {"deep": {"deeper": {"deepest": null}}}},
  {"matrix": [[1, 2], [3, [4, 5]]], "order": {"items": [{"sku": "z"}]}, "empty_obj": {}, "total": 7}
]
GEODE_EOF
cat > "$WORK/e1.csv" <<'GEODE_EOF'
order.id,order.items.0.sku,order.items.0.qty,order.items.0.opts.0,order.items.0.opts.1,order.items.1.sku,order.items.1.qty,order.paid,total,big,neg,int_float,text,quote,unicode,order.items,extra.deep.deeper.deepest,matrix.0.0,matrix.0.1,matrix.1.0,matrix.1.1.0,matrix.1.1.1,empty_obj
A-1,x1,2,red,xl,y2,1,true,19.5,1e+100,-0.0,3.0,"line1
line2","say ""hi""",café ☕,,,,,,,,
,,,,,,,,,,,,,,,,,,,,,,
A-2,,,,,,,false,0,,,,,,,,,,,,,,
,z,,,,,,,7,,,,,,,,,1,2,3,4,5,
GEODE_EOF
cat > "$WORK/e2.csv" <<'GEODE_EOF'
order/id,order/items/0/sku,order/items/0/qty,order/items/0/opts/0,order/items/0/opts/1,order/items/1/sku,order/items/1/qty,order/paid,total,big,neg,int_float,text,quote,unicode,order/items,extra/deep/deeper/deepest,matrix/0/0,matrix/0/1,matrix/1/0,matrix/1/1/0,matrix/1/1/1,empty_obj
A-1,x1,2,red,xl,y2,1,true,19.5,1e+100,-0.0,3.0,"line1
line2","say ""hi""",café ☕,,,,,,,,
,,,,,,,,,,,,,,,,,,,,,,
A-2,,,,,,,false,0,,,,,,,,,,,,,,
,z,,,,,,,7,,,,,,,,,1,2,3,4,5,
GEODE_EOF
cat > "$WORK/ex.csv" <<'GEODE_EOF'
id,name,address.city,address.geo.lat,address.geo.lon,tags.0,tags.1,active,tags,note,extra
1,Ana,Lisbon,38.72,-9.14,admin,ops,true,,,
2,Bo,Oslo,,,,,false,,,
3,"Chen, Li",,,,dev,,,,,
GEODE_EOF
P=/app/flatten.py
export LC_ALL=C.UTF-8
t_exists() { [ -f "$P" ]; }
t_example() { timeout 10 python3 "$P" /app/users.json > "$WORK/o_ex.csv" && same_output "$WORK/ex.csv" "$WORK/o_ex.csv"; }
t_hidden() { timeout 10 python3 "$P" "$WORK/h1.json" > "$WORK/o1.csv" && same_output "$WORK/e1.csv" "$WORK/o1.csv"; }
t_sep_stdin() { timeout 10 python3 "$P" --sep / < "$WORK/h1.json" > "$WORK/o2.csv" && same_output "$WORK/e2.csv" "$WORK/o2.csv"; }
t_empty() { echo '[]' > "$WORK/empty.json"; timeout 10 python3 "$P" "$WORK/empty.json" > "$WORK/o3.csv" && [ ! -s "$WORK/o3.csv" ]; }
t_errors() {
  [ -f "$P" ] || return 1
  local doc rc
  for doc in '{"a": 1}' '[1, 2]' '[{"a": 1}, "x"]' '[{"a":' 'null'; do
    printf '%s' "$doc" | timeout 10 python3 "$P" > "$WORK/oe.csv" 2> "$WORK/oe.err"
    rc=$?
    [ $rc -eq 1 ] || { echo "input $doc: exit status $rc"; return 1; }
    [ ! -s "$WORK/oe.csv" ] || { echo "input $doc: stdout not empty"; return 1; }
    [ -s "$WORK/oe.err" ] || { echo "input $doc: no error message"; return 1; }
  done
}
check "script exists" t_exists
check "example /app/users.json" t_example
check "hidden records: nesting, empties, numbers, quoting, column order" t_hidden
check "--sep / reading standard input" t_sep_stdin
check "empty array gives empty output" t_empty
check "invalid documents: exit 1, nothing on stdout" t_errors

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
