#!/usr/bin/env bash
# Verifier for geode/debug-backup-rotation.
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

S=/app/rotate_backups.sh
mkset() {  # mkset DIR: a realistic, messy backup directory
  rm -rf "$1"; mkdir -p "$1/backup-4.tar.gz"
  local n
  for n in 1 2 3 5 8 9 10 11 12 100; do printf "b$n" > "$1/backup-$n.tar.gz"; done
  printf x > "$1/backup-notes.txt"; printf x > "$1/backup-7.tar.gz.part"; printf x > "$1/backup-07.tar.gz"
  printf x > "$1/backup-6.tar.gz.bak"; printf x > "$1/old backup-1.tar.gz"; printf x > "$1/backup-.tar.gz"
}
listing() { (cd "$1" && find . -mindepth 1 | LC_ALL=C sort); }
OTHERS='./backup-.tar.gz
./backup-07.tar.gz
./backup-4.tar.gz
./backup-6.tar.gz.bak
./backup-7.tar.gz.part
./backup-notes.txt
./old backup-1.tar.gz'
t_example() {
  rm -rf "$WORK/ex" && cp -r /app/backups "$WORK/ex" || return 1
  printf 'deleted backup-1.tar.gz\ndeleted backup-2.tar.gz\ndeleted backup-3.tar.gz\n' > "$WORK/w0"
  timeout 20 bash "$S" "$WORK/ex" 3 > "$WORK/g0" && same_output "$WORK/w0" "$WORK/g0"
}
t_keep4() {
  local d="$WORK/my backups"
  mkset "$d"
  mkdir -p "$WORK/cwd" && printf x > "$WORK/cwd/backup-1.tar.gz"
  printf 'deleted backup-%s.tar.gz\n' 1 2 3 5 8 9 > "$WORK/w1"
  (cd "$WORK/cwd" && timeout 20 bash "$S" "$d" 4) > "$WORK/g1" || { echo "non-zero exit"; return 1; }
  same_output "$WORK/w1" "$WORK/g1" || return 1
  printf '%s\n' "./backup-10.tar.gz" "./backup-100.tar.gz" "./backup-11.tar.gz" "./backup-12.tar.gz" > "$WORK/want_left"
  printf '%s\n' "$OTHERS" >> "$WORK/want_left"
  LC_ALL=C sort -o "$WORK/want_left" "$WORK/want_left"
  listing "$d" > "$WORK/got_left"
  same_output "$WORK/want_left" "$WORK/got_left" || return 1
  [ -f "$WORK/cwd/backup-1.tar.gz" ] || { echo "deleted a file in the current directory"; return 1; }
}
t_keep_many() {
  local d="$WORK/many"
  mkset "$d"; listing "$d" > "$WORK/before"
  timeout 20 bash "$S" "$d" 50 > "$WORK/g2" || return 1
  [ ! -s "$WORK/g2" ] && listing "$d" | cmp -s - "$WORK/before"
}
t_keep0() {
  local d="$WORK/zero keep"
  mkset "$d"
  printf 'deleted backup-%s.tar.gz\n' 1 2 3 5 8 9 10 11 12 100 > "$WORK/w3"
  timeout 20 bash "$S" "$d" 0 > "$WORK/g3" || return 1
  same_output "$WORK/w3" "$WORK/g3" || return 1
  printf '%s\n' "$OTHERS" > "$WORK/want3"; listing "$d" > "$WORK/got3"
  same_output "$WORK/want3" "$WORK/got3"
}
t_empty() {
  mkdir -p "$WORK/empty dir" && printf x > "$WORK/empty dir/readme"
  timeout 20 bash "$S" "$WORK/empty dir" 2 > "$WORK/g4" 2> "$WORK/e4" || { echo "non-zero exit"; return 1; }
  [ ! -s "$WORK/g4" ] && [ -f "$WORK/empty dir/readme" ]
}
t_badkeep() {
  local d="$WORK/bad" k rc
  mkset "$d"; listing "$d" > "$WORK/before5"
  for k in -1 abc 2x ""; do
    timeout 20 bash "$S" "$d" "$k" > "$WORK/g5" 2> "$WORK/e5"
    rc=$?
    [ $rc -eq 2 ] || { echo "KEEP='$k': exit status $rc"; return 1; }
    [ -s "$WORK/e5" ] || { echo "KEEP='$k': no usage message"; return 1; }
  done
  listing "$d" | cmp -s - "$WORK/before5" || { echo "files deleted on bad KEEP"; return 1; }
}
check "example directory, KEEP=3" t_example
check "directory with spaces, numeric order, non-backups untouched" t_keep4
check "KEEP larger than the number of backups" t_keep_many
check "KEEP=0 deletes every backup and nothing else" t_keep0
check "no backups: no output, exit 0" t_empty
check "invalid KEEP: usage, exit 2, nothing deleted" t_badkeep

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
