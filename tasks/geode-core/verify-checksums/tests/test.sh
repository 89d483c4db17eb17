#!/usr/bin/env bash
# Verifier for geode/verify-checksums.
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
mkdir -p "$H/sub/deep" "$H/gone-not"
printf 'alpha\n' > "$H/a b.txt"
printf 'zzz' > "$H/z.bin"
printf 'deep\n' > "$H/sub/deep/file"
printf 'hidden\n' > "$H/.hidden"
printf 'extra\n' > "$H/extra one.txt"
printf 'cache\n' > "$H/sub/.cache"
ln -s "$H/a b.txt" "$H/link.txt"
rmdir "$H/gone-not"
sum() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
{
  echo "# release manifest"
  echo "$(sum $'alpha\n')  a b.txt"
  echo ""
  echo "$(sum 'not zzz') *z.bin"
  echo "$(sum $'deep\n')  sub/deep/file"
  echo "$(sum $'hidden\n') *.hidden"
  echo "$(sum 'gone')  gone/file.txt"
} > "$H/CHECKSUMS"
mkdir -p "$WORK/good/x"
printf 'one' > "$WORK/good/x/one"; printf 'two' > "$WORK/good/two words"
{ echo "$(sum one)  x/one"; echo "$(sum two) *two words"; } > "$WORK/good.sums"
t_exec() { [ -x /app/verify.sh ]; }
t_example() {
  printf 'EXTRA NOTES.txt\nOK README.txt\nOK VERSION\nMISMATCH app.bin\nMISSING docs/missing.pdf\nOK docs/user guide.md\n' > "$WORK/w0"
  timeout 20 /app/verify.sh /app/SHA256SUMS /app/release > "$WORK/g0"
  local rc=$?
  [ $rc -eq 1 ] || { echo "exit status $rc"; return 1; }
  same_output "$WORK/w0" "$WORK/g0"
}
t_hidden() {
  printf 'OK .hidden\nOK a b.txt\nEXTRA extra one.txt\nMISSING gone/file.txt\nEXTRA sub/.cache\nOK sub/deep/file\nMISMATCH z.bin\n' > "$WORK/w1"
  timeout 20 /app/verify.sh "$H/CHECKSUMS" "$H" > "$WORK/g1"
  local rc=$?
  [ $rc -eq 1 ] || { echo "exit status $rc"; return 1; }
  same_output "$WORK/w1" "$WORK/g1"
}
t_relative() {
  printf 'OK .hidden\nOK a b.txt\nEXTRA extra one.txt\nMISSING gone/file.txt\nEXTRA sub/.cache\nOK sub/deep/file\nMISMATCH z.bin\n' > "$WORK/w2"
  (cd "$WORK" && timeout 20 /app/verify.sh tree/CHECKSUMS tree/) > "$WORK/g2"
  same_output "$WORK/w2" "$WORK/g2"
}
t_allok() {
  printf 'OK two words\nOK x/one\n' > "$WORK/w3"
  timeout 20 /app/verify.sh "$WORK/good.sums" "$WORK/good" > "$WORK/g3"
  local rc=$?
  [ $rc -eq 0 ] || { echo "exit status $rc"; return 1; }
  same_output "$WORK/w3" "$WORK/g3"
}
t_nomanifest() {
  [ -x /app/verify.sh ] || return 1
  timeout 20 /app/verify.sh "$WORK/does-not-exist" "$WORK/good" > "$WORK/g4" 2> "$WORK/e4"
  local rc=$?
  [ $rc -eq 2 ] && [ -s "$WORK/e4" ] || { echo "exit status $rc"; return 1; }
}
check "/app/verify.sh is executable" t_exec
check "example release directory" t_example
check "hidden tree: statuses, spaces, hidden files, symlink and manifest ignored" t_hidden
check "relative paths with trailing slash" t_relative
check "everything OK: exit 0" t_allok
check "unreadable manifest: exit 2" t_nomanifest

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
