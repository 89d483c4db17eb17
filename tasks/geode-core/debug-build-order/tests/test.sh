#!/usr/bin/env bash
# Verifier for geode/debug-build-order.
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

cat > "$WORK/g1.txt" <<'GEODE_EOF'
# hidden graph 1
server: net log config   # main binary
net: sys
log: sys fmt
config: yaml fmt
yaml: sys
server: tls
tls: crypto sys
crypto: sys
Zeta: alpha
alpha:
fmt: sys
tests: server # needs everything
GEODE_EOF
cat > "$WORK/g2.txt" <<'GEODE_EOF'
lib-a.so: base
lib-b.so: base lib-a.so lib-a.so
main: lib-b.so lib-c.so
lib-c.so: base

  # indented comment
extra: 
GEODE_EOF
cat > "$WORK/g1.exp" <<'GEODE_EOF'
alpha
Zeta
sys
crypto
fmt
log
net
tls
yaml
config
server
tests
GEODE_EOF
cat > "$WORK/g2.exp" <<'GEODE_EOF'
base
extra
lib-a.so
lib-b.so
lib-c.so
main
GEODE_EOF
cat > "$WORK/cyc.txt" <<'GEODE_EOF'
e: f
a: b
b: c
c: a
d: a
f:
g: d
GEODE_EOF
cat > "$WORK/self.txt" <<'GEODE_EOF'
x: x
y:
GEODE_EOF
cat > "$WORK/nocolon.txt" <<'GEODE_EOF'
a: b
# fine
b c
c: d
GEODE_EOF
P=/app/buildorder.py
run() { timeout 10 python3 "$P" "$@"; }
t_example() {
  printf 'icons\nlibcore\nlibnet\nlibui\napp\n' > "$WORK/w0"
  run /app/deps.txt > "$WORK/g0" && same_output "$WORK/w0" "$WORK/g0"
}
t_g1() { run "$WORK/g1.txt" > "$WORK/o1" && same_output "$WORK/g1.exp" "$WORK/o1"; }
t_g2() { run "$WORK/g2.txt" > "$WORK/o2" && same_output "$WORK/g2.exp" "$WORK/o2"; }
t_stable() {
  local s
  for s in 0 1 2 3 4 5; do
    PYTHONHASHSEED=$s run "$WORK/g1.txt" > "$WORK/os" 2>/dev/null && cmp -s "$WORK/g1.exp" "$WORK/os" || { echo "differs with PYTHONHASHSEED=$s"; return 1; }
  done
}
expect_err() {  # FILE RC MESSAGE
  run "$1" > "$WORK/oe" 2> "$WORK/ee"
  local rc=$?
  [ $rc -eq "$2" ] || { echo "exit status $rc, want $2"; return 1; }
  [ ! -s "$WORK/oe" ] || { echo "stdout not empty"; return 1; }
  [ "$(cat "$WORK/ee")" = "$3" ] || { echo "stderr: $(cat "$WORK/ee")"; return 1; }
}
t_cycle() { expect_err "$WORK/cyc.txt" 1 "error: cycle detected: a b c d g"; }
t_self() { expect_err "$WORK/self.txt" 1 "error: cycle detected: x"; }
t_colon() { expect_err "$WORK/nocolon.txt" 2 "error: line 3: missing colon"; }
check "example /app/deps.txt" t_example
check "hidden graph: merged lines, comments, dependency-only nodes" t_g1
check "hidden graph: punctuation names, duplicates, empty deps" t_g2
check "same output for any hash seed" t_stable
check "cycle: blocked nodes sorted on stderr, exit 1" t_cycle
check "self-dependency is a cycle" t_self
check "missing colon: exit 2" t_colon

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
