#!/usr/bin/env bash
# Verifier for geode/c-fix-makefile.
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

C=/app/calc
cd "$C" || true
t_clean_first() {
  cd "$C" && timeout 60 make clean >/dev/null 2>&1 || { echo "make clean failed"; return 1; }
  [ ! -e rpn ] && [ -z "$(ls src/*.o 2>/dev/null)" ]
}
t_build() { cd "$C" && timeout 120 make > "$WORK/make.log" 2>&1 || { tail -20 "$WORK/make.log"; return 1; }; [ -x rpn ]; }
t_uptodate() { cd "$C" && timeout 60 make -q; }
t_flags() {
  cd "$C" && timeout 60 make -B -n > "$WORK/dry.log" 2>&1 || return 1
  local f n=0
  for f in src/main.c src/stack.c src/ops.c src/parse.c; do
    grep -E -- " -c .*$f|$f.* -c " "$WORK/dry.log" > "$WORK/line" || { echo "no compile line for $f"; return 1; }
    for flag in -std=c99 -O2 -Wall -Wextra -Werror; do
      grep -q -- "$flag" "$WORK/line" || { echo "$f compiled without $flag"; return 1; }
    done
  done
}
t_headers() {
  cd "$C" || return 1
  touch -c -d '2020-01-01 00:00:00' src/*.c src/*.h src/*.o rpn
  touch -c -d '2021-01-01 00:00:00' src/stack.h
  timeout 60 make -n > "$WORK/h1.log" 2>&1
  for f in main stack ops; do grep -q "src/$f\.c" "$WORK/h1.log" || { echo "touching stack.h does not rebuild $f.c"; return 1; }; done
  touch -c -d '2020-01-01 00:00:00' src/stack.h
  touch -c -d '2021-01-01 00:00:00' src/parse.h
  timeout 60 make -n > "$WORK/h2.log" 2>&1
  for f in main parse; do grep -q "src/$f\.c" "$WORK/h2.log" || { echo "touching parse.h does not rebuild $f.c"; return 1; }; done
  touch -c -d '2020-01-01 00:00:00' src/parse.h
  timeout 120 make >/dev/null 2>&1
}
rpn_ok() {  # rpn_ok EXPECTED args...
  local want=$1; shift
  local got
  got=$(cd "$C" && timeout 5 ./rpn "$@") || { echo "rpn $* failed"; return 1; }
  [ "$got" = "$want" ] || { echo "rpn $*: got '$got' want '$want'"; return 1; }
}
rpn_err() {
  (cd "$C" && timeout 5 ./rpn "$@" > "$WORK/e.out" 2> "$WORK/e.err")
  local rc=$?
  [ $rc -eq 1 ] && [ -s "$WORK/e.err" ] || { echo "rpn $*: exit $rc"; return 1; }
}
t_calc() {
  rpn_ok 14 3 4 + 2 '*' && rpn_ok 1.414213562 2 0.5 ^ && rpn_ok 1.414213562 2 sqrt &&
  rpn_ok 0.3333333333 1 3 / && rpn_ok 14 5 1 2 + 4 '*' + 3 - && rpn_ok -10 -2.5 4 '*' &&
  rpn_ok 993 1e3 7 - && rpn_ok 1.024e+30 2 10 ^ 1e27 '*'
}
t_errors() { rpn_err 1 0 / && rpn_err 1 + && rpn_err 1 2 && rpn_err abc && rpn_err -1 sqrt; }
t_clean_last() {
  cd "$C" && timeout 60 make clean >/dev/null 2>&1 || return 1
  [ ! -e rpn ] && [ -z "$(ls src/*.o 2>/dev/null)" ]
}
check "make clean works on a fresh tree" t_clean_first
check "make builds rpn" t_build
check "second make has nothing to do" t_uptodate
check "every source compiled with the required flags" t_flags
check "header changes trigger recompilation" t_headers
check "calculator results (hidden expressions)" t_calc
check "calculator errors exit 1 with a message" t_errors
check "make clean removes rpn and objects" t_clean_last

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
