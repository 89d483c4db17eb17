#!/usr/bin/env bash
# Verifier for geode/wordfreq-cli.
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

cat > "$WORK/gen.py" <<'GEODE_EOF'
import sys, os
d = sys.argv[1]
open(os.path.join(d, "t1.txt"), "w", encoding="utf-8").write(
    "Café au lait, CAFÉ! rock'n'roll isn't 'dead'... It's 42nd street's best-kept secret.\n"
    "a''b don''t -- x y z x X\n" * 3 + "Rock'N'Roll never dies; it's ALIVE, alive, alive!\n")
open(os.path.join(d, "t2.txt"), "w", encoding="utf-8").write(
    "zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon\n"
    "alpha beta gamma delta epsilon zeta eta theta\n")
open(os.path.join(d, "t3.txt"), "w", encoding="utf-8").write(
    "beta beta GAMMA gamma Gamma alpha\n\tdelta\r\nepsilon's epsilon'\n")
GEODE_EOF
cat > "$WORK/e1.txt" <<'GEODE_EOF'
9 x
6 caf
4 it's
4 rock'n'roll
3 a
3 alive
3 au
3 b
3 best
3 dead
GEODE_EOF
cat > "$WORK/e2.txt" <<'GEODE_EOF'
7 gamma
5 beta
3 alpha
3 delta
3 epsilon
GEODE_EOF
cat > "$WORK/e3.txt" <<'GEODE_EOF'
4 rock'n'roll
3 alive
3 isn't
3 secret
3 street's
2 theta
1 alpha
1 delta
1 epsilon
1 gamma
1 kappa
1 lambda
1 never
1 omicron
1 sigma
1 upsilon
GEODE_EOF
python3 "$WORK/gen.py" "$WORK"
W=/app/wordfreq.py
t_sample() { printf '4 the\n2 dog\n2 fox\n' > "$WORK/es.txt"; timeout 10 python3 $W --top 3 /app/sample.txt > "$WORK/os.txt" && same_output "$WORK/es.txt" "$WORK/os.txt"; }
t_defaults() { timeout 10 python3 $W "$WORK/t1.txt" > "$WORK/o1.txt" && same_output "$WORK/e1.txt" "$WORK/o1.txt"; }
t_stdin_multi() { timeout 10 python3 $W --top 5 --min-length 3 "$WORK/t2.txt" - "$WORK/t3.txt" < "$WORK/t3.txt" > "$WORK/o2.txt" && same_output "$WORK/e2.txt" "$WORK/o2.txt"; }
t_minlen() { timeout 10 python3 $W --top 100 --min-length 5 "$WORK/t2.txt" "$WORK/t1.txt" > "$WORK/o3.txt" && same_output "$WORK/e3.txt" "$WORK/o3.txt"; }
t_missing() {
  local rc
  [ -f $W ] || { echo "$W missing"; return 1; }
  timeout 10 python3 $W "$WORK/t1.txt" "$WORK/does-not-exist.txt" > "$WORK/o4.txt" 2> "$WORK/e4.err"
  rc=$?
  [ $rc -eq 2 ] || { echo "exit status $rc"; return 1; }
  [ ! -s "$WORK/o4.txt" ] || { echo "stdout not empty"; return 1; }
  [ -s "$WORK/e4.err" ] || { echo "no error message"; return 1; }
}
check "example from the instructions" t_sample
check "defaults, apostrophes and separators (hidden text)" t_defaults
check "stdin, several files, --top and --min-length" t_stdin_multi
check "--min-length 5 with --top 100" t_minlen
check "unreadable file: exit 2, empty stdout, stderr message" t_missing

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
