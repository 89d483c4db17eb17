#!/usr/bin/env bash
# Verifier for geode/cron-next.
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

cat > "$WORK/cases.json" <<'GEODE_EOF'
[
 {
  "args": [
   "*/15 9-10 * * MON-FRI",
   "2024-03-01 10:20",
   "6"
  ],
  "rc": 0,
  "stdout": "2024-03-01 10:30\n2024-03-01 10:45\n2024-03-04 09:00\n2024-03-04 09:15\n2024-03-04 09:30\n2024-03-04 09:45\n"
 },
 {
  "args": [
   "0 0 29 2 1",
   "2024-01-01 00:00",
   "6"
  ],
  "rc": 0,
  "stdout": "2024-02-05 00:00\n2024-02-12 00:00\n2024-02-19 00:00\n2024-02-26 00:00\n2024-02-29 00:00\n2025-02-03 00:00\n"
 },
 {
  "args": [
   "0 0 29 2 *",
   "2097-01-01 00:00",
   "3"
  ],
  "rc": 0,
  "stdout": "2104-02-29 00:00\n"
 },
 {
  "args": [
   "30 4 1,15 * 5",
   "2024-02-10 00:00",
   "8"
  ],
  "rc": 0,
  "stdout": "2024-02-15 04:30\n2024-02-16 04:30\n2024-02-23 04:30\n2024-03-01 04:30\n2024-03-08 04:30\n2024-03-15 04:30\n2024-03-22 04:30\n2024-03-29 04:30\n"
 },
 {
  "args": [
   "0 12 */10 * *",
   "2024-01-30 12:00",
   "5"
  ],
  "rc": 0,
  "stdout": "2024-01-31 12:00\n2024-02-01 12:00\n2024-02-11 12:00\n2024-02-21 12:00\n2024-03-01 12:00\n"
 },
 {
  "args": [
   "5/20 */6 * JAN-MAR/2 *",
   "2024-12-31 20:00",
   "10"
  ],
  "rc": 0,
  "stdout": "2025-01-01 00:05\n2025-01-01 00:25\n2025-01-01 00:45\n2025-01-01 06:05\n2025-01-01 06:25\n2025-01-01 06:45\n2025-01-01 12:05\n2025-01-01 12:25\n2025-01-01 12:45\n2025-01-01 18:05\n"
 },
 {
  "args": [
   "0 0 * * 7",
   "2024-06-01 00:00",
   "3"
  ],
  "rc": 0,
  "stdout": "2024-06-02 00:00\n2024-06-09 00:00\n2024-06-16 00:00\n"
 },
 {
  "args": [
   "0 0 13 * FRI",
   "2024-01-01 00:00",
   "6"
  ],
  "rc": 0,
  "stdout": "2024-01-05 00:00\n2024-01-12 00:00\n2024-01-13 00:00\n2024-01-19 00:00\n2024-01-26 00:00\n2024-02-02 00:00\n"
 },
 {
  "args": [
   "0 0 */2 * 1",
   "2024-04-01 00:00",
   "5"
  ],
  "rc": 0,
  "stdout": "2024-04-15 00:00\n2024-04-29 00:00\n2024-05-13 00:00\n2024-05-27 00:00\n2024-06-03 00:00\n"
 },
 {
  "args": [
   "59 23 31 * *",
   "2024-01-31 23:59",
   "4"
  ],
  "rc": 0,
  "stdout": "2024-03-31 23:59\n2024-05-31 23:59\n2024-07-31 23:59\n2024-08-31 23:59\n"
 },
 {
  "args": [
   "0-5/2,58 1 * * 0-1",
   "2024-05-04 23:00",
   "9"
  ],
  "rc": 0,
  "stdout": "2024-05-05 01:00\n2024-05-05 01:02\n2024-05-05 01:04\n2024-05-05 01:58\n2024-05-06 01:00\n2024-05-06 01:02\n2024-05-06 01:04\n2024-05-06 01:58\n2024-05-12 01:00\n"
 },
 {
  "args": [
   "15 10 * * sun-tue/2",
   "2024-07-01 00:00",
   "4"
  ],
  "rc": 0,
  "stdout": "2024-07-02 10:15\n2024-07-07 10:15\n2024-07-09 10:15\n2024-07-14 10:15\n"
 },
 {
  "args": [
   "0 0 1 1 *",
   "2020-01-01 00:00",
   "20"
  ],
  "rc": 0,
  "stdout": "2021-01-01 00:00\n2022-01-01 00:00\n2023-01-01 00:00\n2024-01-01 00:00\n2025-01-01 00:00\n2026-01-01 00:00\n2027-01-01 00:00\n2028-01-01 00:00\n2029-01-01 00:00\n"
 },
 {
  "args": [
   "0 0 30 2 *",
   "2024-01-01 00:00",
   "3"
  ],
  "rc": 0,
  "stdout": ""
 },
 {
  "args": [
   "@weekly",
   "2024-02-27 00:00",
   "2"
  ],
  "rc": 0,
  "stdout": "2024-03-03 00:00\n2024-03-10 00:00\n"
 },
 {
  "args": [
   "@hourly",
   "2024-12-31 22:30",
   "3"
  ],
  "rc": 0,
  "stdout": "2024-12-31 23:00\n2025-01-01 00:00\n2025-01-01 01:00\n"
 },
 {
  "args": [
   "@annually",
   "2024-06-15 08:00",
   "2"
  ],
  "rc": 0,
  "stdout": "2025-01-01 00:00\n2026-01-01 00:00\n"
 },
 {
  "args": [
   "@monthly",
   "2024-01-31 00:00",
   "2"
  ],
  "rc": 0,
  "stdout": "2024-02-01 00:00\n2024-03-01 00:00\n"
 },
 {
  "args": [
   "0 0 31 4,6,9,11 *",
   "2024-01-01 00:00",
   "2"
  ],
  "rc": 0,
  "stdout": ""
 },
 {
  "args": [
   "7 7 7 7 *",
   "2024-07-07 07:06",
   "1"
  ],
  "rc": 0,
  "stdout": "2024-07-07 07:07\n"
 },
 {
  "args": [
   "60 * * * *",
   "2024-01-01 00:00",
   "1"
  ],
  "rc": 2,
  "stdout": ""
 },
 {
  "args": [
   "* * * *",
   "2024-01-01 00:00",
   "1"
  ],
  "rc": 2,
  "stdout": ""
 },
 {
  "args": [
   "5-1 * * * *",
   "2024-01-01 00:00",
   "1"
  ],
  "rc": 2,
  "stdout": ""
 },
 {
  "args": [
   "*/0 * * * *",
   "2024-01-01 00:00",
   "1"
  ],
  "rc": 2,
  "stdout": ""
 },
 {
  "args": [
   "* * * FOO *",
   "2024-01-01 00:00",
   "1"
  ],
  "rc": 2,
  "stdout": ""
 },
 {
  "args": [
   "1,,2 * * * *",
   "2024-01-01 00:00",
   "1"
  ],
  "rc": 2,
  "stdout": ""
 },
 {
  "args": [
   "* 24 * * *",
   "2024-01-01 00:00",
   "1"
  ],
  "rc": 2,
  "stdout": ""
 },
 {
  "args": [
   "* * 0 * *",
   "2024-01-01 00:00",
   "1"
  ],
  "rc": 2,
  "stdout": ""
 },
 {
  "args": [
   "* * * * 8",
   "2024-01-01 00:00",
   "1"
  ],
  "rc": 2,
  "stdout": ""
 },
 {
  "args": [
   "* * * * *",
   "2024-02-30 10:00",
   "1"
  ],
  "rc": 2,
  "stdout": ""
 },
 {
  "args": [
   "* * * * *",
   "2024-01-01 00:00",
   "0"
  ],
  "rc": 2,
  "stdout": ""
 },
 {
  "args": [
   "* * * * *",
   "2024-01-01 00:00",
   "abc"
  ],
  "rc": 2,
  "stdout": ""
 },
 {
  "args": [
   "@every5m",
   "2024-01-01 00:00",
   "1"
  ],
  "rc": 2,
  "stdout": ""
 }
]
GEODE_EOF
cat > "$WORK/run_case.py" <<'PY'
import json, os, subprocess, sys
if not os.path.isfile("/app/cronnext.py"):
    print("/app/cronnext.py missing"); sys.exit(1)
case = json.load(open(sys.argv[1]))[int(sys.argv[2])]
try:
    r = subprocess.run(["python3", "/app/cronnext.py", *case["args"]], capture_output=True, text=True, timeout=15)
except subprocess.TimeoutExpired:
    print("timed out"); sys.exit(1)
if r.returncode != case["rc"]:
    print(f"exit status {r.returncode}, expected {case['rc']}; stderr: {r.stderr[-300:]}"); sys.exit(1)
if r.stdout != case["stdout"]:
    print("expected:", repr(case["stdout"][:400])); print("actual:  ", repr(r.stdout[:400])); sys.exit(1)
if case["rc"] == 2 and not r.stderr.strip():
    print("no error message on stderr"); sys.exit(1)
PY
t_exists() { [ -f /app/cronnext.py ]; }
t_case() { python3 "$WORK/run_case.py" "$WORK/cases.json" "$1"; }
check "script exists" t_exists
python3 -c 'import json,sys
for c in json.load(open(sys.argv[1])): print(("ok  " if c["rc"]==0 else "err ") + " | ".join(c["args"]))' "$WORK/cases.json" > "$WORK/labels.txt"
i=0
while IFS= read -r label; do
  check "case $i: $label" t_case "$i"
  i=$((i + 1))
done < "$WORK/labels.txt"

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
