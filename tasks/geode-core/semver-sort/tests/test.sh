#!/usr/bin/env bash
# Verifier for geode/semver-sort.
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

cat > "$WORK/in1.txt" <<'GEODE_EOF'
  1.0.0+build.1  
1.0.0-alpha.beta
1.0.0-alpha.1
1.0.0-alpha
1.0.0-beta
1.0.0-beta.2
1.0.0-beta.11
1.0.0-rc.1
1.0.0
v1.0.0
1.0.0+20130313144700
0.0.1
0.0.0-0
10.2.3
2.10.3
2.9.30
1.0.0-alpha.0a
1.0.0-alpha.a0
1.0.0-0.3.7
1.0.0-x.7.z.92
1.0.0-x-y-z.--
1.0.0-rc.1+build.00001

   
01.0.0
1.0
1.0.0-
1.0.0+
1.0.0-01
1.0.0-alpha..1
1.0.0 beta
V1.0.0
vv1.0.0
1.0.0-alpha_1
1.2.3.4
-1.0.0
999999999999999999999.0.0
2.9.30-rc.1
GEODE_EOF
cat > "$WORK/in2.txt" <<'GEODE_EOF'
3.0.0
1.2.3
v1.2.3+b
0.1.0
GEODE_EOF
cat > "$WORK/e_sort.txt" <<'GEODE_EOF'
0.0.0-0
0.0.1
1.0.0-0.3.7
1.0.0-alpha
1.0.0-alpha.1
1.0.0-alpha.0a
1.0.0-alpha.a0
1.0.0-alpha.beta
1.0.0-beta
1.0.0-beta.2
1.0.0-beta.11
1.0.0-rc.1
1.0.0-rc.1+build.00001
1.0.0-x.7.z.92
1.0.0-x-y-z.--
1.0.0+build.1
1.0.0
v1.0.0
1.0.0+20130313144700
2.9.30-rc.1
2.9.30
2.10.3
10.2.3
999999999999999999999.0.0
GEODE_EOF
cat > "$WORK/e_err.txt" <<'GEODE_EOF'
invalid: 01.0.0
invalid: 1.0
invalid: 1.0.0-
invalid: 1.0.0+
invalid: 1.0.0-01
invalid: 1.0.0-alpha..1
invalid: 1.0.0 beta
invalid: V1.0.0
invalid: vv1.0.0
invalid: 1.0.0-alpha_1
invalid: 1.2.3.4
invalid: -1.0.0
GEODE_EOF
cat > "$WORK/e_rev.txt" <<'GEODE_EOF'
999999999999999999999.0.0
10.2.3
2.10.3
2.9.30
2.9.30-rc.1
1.0.0+build.1
1.0.0
v1.0.0
1.0.0+20130313144700
1.0.0-x-y-z.--
1.0.0-x.7.z.92
1.0.0-rc.1
1.0.0-rc.1+build.00001
1.0.0-beta.11
1.0.0-beta.2
1.0.0-beta
1.0.0-alpha.beta
1.0.0-alpha.a0
1.0.0-alpha.0a
1.0.0-alpha.1
1.0.0-alpha
1.0.0-0.3.7
0.0.1
0.0.0-0
GEODE_EOF
cat > "$WORK/e_uniq.txt" <<'GEODE_EOF'
0.0.0-0
0.0.1
1.0.0-0.3.7
1.0.0-alpha
1.0.0-alpha.1
1.0.0-alpha.0a
1.0.0-alpha.a0
1.0.0-alpha.beta
1.0.0-beta
1.0.0-beta.2
1.0.0-beta.11
1.0.0-rc.1
1.0.0-x.7.z.92
1.0.0-x-y-z.--
1.0.0+build.1
2.9.30-rc.1
2.9.30
2.10.3
10.2.3
999999999999999999999.0.0
GEODE_EOF
cat > "$WORK/e_revuniq.txt" <<'GEODE_EOF'
999999999999999999999.0.0
10.2.3
2.10.3
2.9.30
2.9.30-rc.1
1.0.0+build.1
1.0.0-x-y-z.--
1.0.0-x.7.z.92
1.0.0-rc.1
1.0.0-beta.11
1.0.0-beta.2
1.0.0-beta
1.0.0-alpha.beta
1.0.0-alpha.a0
1.0.0-alpha.0a
1.0.0-alpha.1
1.0.0-alpha
1.0.0-0.3.7
0.0.1
0.0.0-0
GEODE_EOF
cat > "$WORK/e2.txt" <<'GEODE_EOF'
0.1.0
1.2.3
3.0.0
GEODE_EOF
P=/app/semver_sort.py
run() { timeout 10 python3 "$P" "$@"; }
t_exists() { [ -f "$P" ]; }
t_example() {
  printf '1.0.0-alpha\n1.0.0-beta.2\n1.0.0-beta.11\n1.0.0-rc.1\n1.0.0\n1.9.0\n1.10.0\nv2.1.0\n' > "$WORK/ex.txt"
  run < /app/versions.txt > "$WORK/ox.txt" 2>/dev/null; same_output "$WORK/ex.txt" "$WORK/ox.txt"
}
t_sort() { run < "$WORK/in1.txt" > "$WORK/o_sort.txt" 2> "$WORK/o_err.txt"; same_output "$WORK/e_sort.txt" "$WORK/o_sort.txt"; }
t_err() { run < "$WORK/in1.txt" > /dev/null 2> "$WORK/o_err.txt"; local rc=$?; [ $rc -eq 1 ] || { echo "exit status $rc"; return 1; }; same_output "$WORK/e_err.txt" "$WORK/o_err.txt"; }
t_rev() { run --reverse < "$WORK/in1.txt" > "$WORK/o_rev.txt" 2>/dev/null; same_output "$WORK/e_rev.txt" "$WORK/o_rev.txt"; }
t_uniq() { run --unique < "$WORK/in1.txt" > "$WORK/o_uniq.txt" 2>/dev/null; same_output "$WORK/e_uniq.txt" "$WORK/o_uniq.txt"; }
t_revuniq() { run --reverse --unique < "$WORK/in1.txt" > "$WORK/o_revuniq.txt" 2>/dev/null; same_output "$WORK/e_revuniq.txt" "$WORK/o_revuniq.txt"; }
t_valid() { run --unique < "$WORK/in2.txt" > "$WORK/o2.txt" 2> "$WORK/o2.err"; local rc=$?; [ $rc -eq 0 ] || { echo "exit status $rc"; return 1; }; [ ! -s "$WORK/o2.err" ] && same_output "$WORK/e2.txt" "$WORK/o2.txt"; }
check "script exists" t_exists
check "example from the instructions" t_example
check "precedence order on hidden input (stable ties)" t_sort
check "invalid lines reported on stderr, exit 1" t_err
check "--reverse keeps input order for ties" t_rev
check "--unique keeps first of equal precedence" t_uniq
check "--reverse --unique" t_revuniq
check "all-valid input exits 0 with empty stderr" t_valid

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
