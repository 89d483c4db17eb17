#!/usr/bin/env bash
# Verifier for geode/largest-files.
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

H="$WORK/tree"
mkdir -p "$H/a" "$H/x y" "$H/d.log" "$H/.hid" "$H/deep/er/est"
mk() { head -c "$2" /dev/zero > "$H/$1"; }
mk a/b.log 100; mk a/c.log 100; mk "x y/z.log" 5000; mk big.txt 1000000; mk d.log/inner.log 50
mk .hid/q.log 7000; mk file.LOG 999999; mk e.log.gz 888888; head -c 3000 /dev/zero > "$H/-n.log"
mk Zeta.log 3000; mk deep/er/est/tiny.log 1; mk "deep/er/ lead.log" 4999
ln -s "$H/big.txt" "$H/link.log"
ln -s "$H/a" "$H/linkdir"
t_exec() { [ -x /app/largest.sh ]; }
t_sample() {
  printf '12000\t.cache/hidden.log\n12000\tapp/worker.log\n9000\told logs/jan 2024.log\n' > "$WORK/w0"
  timeout 20 /app/largest.sh /app/data 3 log > "$WORK/g0" && same_output "$WORK/w0" "$WORK/g0"
}
t_top5() {
  printf '7000\t.hid/q.log\n5000\tx y/z.log\n4999\tdeep/er/ lead.log\n3000\t-n.log\n3000\tZeta.log\n' > "$WORK/w1"
  timeout 20 /app/largest.sh "$H" 5 log > "$WORK/g1" && same_output "$WORK/w1" "$WORK/g1"
}
t_all_rel() {
  printf '7000\t.hid/q.log\n5000\tx y/z.log\n4999\tdeep/er/ lead.log\n3000\t-n.log\n3000\tZeta.log\n100\ta/b.log\n100\ta/c.log\n50\td.log/inner.log\n1\tdeep/er/est/tiny.log\n' > "$WORK/w2"
  (cd "$WORK" && timeout 20 /app/largest.sh tree/ 100 log) > "$WORK/g2" && same_output "$WORK/w2" "$WORK/g2"
}
t_other_ext() {
  printf '888888\te.log.gz\n' > "$WORK/w3"
  timeout 20 /app/largest.sh "$H" 10 gz > "$WORK/g3" && same_output "$WORK/w3" "$WORK/g3" || return 1
  printf '1000000\tbig.txt\n' > "$WORK/w4"
  timeout 20 /app/largest.sh "$H" 1 txt > "$WORK/g4" && same_output "$WORK/w4" "$WORK/g4"
}
t_none() { timeout 20 /app/largest.sh "$H" 5 csv > "$WORK/g5" && [ ! -s "$WORK/g5" ]; }
check "/app/largest.sh is executable" t_exec
check "sample tree example" t_sample
check "hidden tree: top 5 .log (spaces, dash names, ties, symlinks ignored)" t_top5
check "hidden tree: all .log via relative DIR with trailing slash" t_all_rel
check "other extensions (gz, txt)" t_other_ext
check "no matching files: empty output" t_none

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
