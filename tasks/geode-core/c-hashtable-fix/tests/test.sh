#!/usr/bin/env bash
# Verifier for geode/c-hashtable-fix.
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

cat > "$WORK/harness.py" <<'PY'
import subprocess, sys

BIN, SCENARIO, WORKDIR = sys.argv[1], sys.argv[2], sys.argv[3]
state = 1234567
def rnd(n):
    global state
    state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
    return (state >> 33) % n

ops = []
if SCENARIO == "basic":
    ops = ["put apple red", "put banana yellow", "get apple", "put apple green", "get apple", "del banana",
           "get banana", "del banana", "size", "put cherry dark-red", "get cherry", "dump", "size"]
elif SCENARIO == "delete-chains":
    # small tables: lots of probe chains broken by deletions
    for round_ in range(200):
        keys = [f"k{round_}_{i}" for i in range(11)]
        for k in keys:
            ops.append(f"put {k} v{rnd(1000)}")
        for k in keys[::2]:
            ops.append(f"del {k}")
        for k in keys:
            ops.append(f"get {k}")
        ops.append("size")
        for k in keys[1::2]:
            ops.append(f"del {k}")
        ops.append("size")
elif SCENARIO == "growth":
    for i in range(20000):
        ops.append(f"put key{i} value{i * 7}")
    for i in range(0, 20000, 3):
        ops.append(f"get key{i}")
    ops.append("size")
    for i in range(0, 20000, 2):
        ops.append(f"put key{i} updated{i}")
    ops += [f"get key{i}" for i in range(0, 20000, 7)]
    ops += ["size", "dump"]
elif SCENARIO == "churn":
    # a sliding window of live keys: many inserts and deletes of distinct keys
    for i in range(150000):
        ops.append(f"put c{i} {i}")
        if i >= 40:
            ops.append(f"del c{i - 40}")
        if i % 997 == 0:
            ops.append(f"get c{i - 20 if i >= 20 else i}")
            ops.append("size")
    ops += ["size", "dump"]
elif SCENARIO == "random":
    for _ in range(120000):
        k = f"r{rnd(3000)}"
        r = rnd(10)
        if r < 5:
            ops.append(f"put {k} x{rnd(100000)}")
        elif r < 8:
            ops.append(f"get {k}")
        else:
            ops.append(f"del {k}")
        if rnd(5000) == 0:
            ops.append("size")
    ops += ["size", "dump"]

model, out = {}, []
for op in ops:
    p = op.split(" ")
    if p[0] == "put":
        model[p[1]] = p[2]
    elif p[0] == "get":
        out.append(model.get(p[1], "(nil)"))
    elif p[0] == "del":
        out.append("1" if model.pop(p[1], None) is not None else "0")
    elif p[0] == "size":
        out.append(str(len(model)))
    elif p[0] == "dump":
        out += sorted(f"{k}={v}" for k, v in model.items()) + ["end"]
out.append("freed")

inp = WORKDIR + f"/{SCENARIO}.in"
with open(inp, "w") as f:
    f.write("\n".join(ops) + "\n")
try:
    with open(inp) as f:
        r = subprocess.run([BIN], stdin=f, capture_output=True, text=True, timeout=20, errors="replace")
except subprocess.TimeoutExpired:
    print("timed out (infinite probe loop or too slow?)"); sys.exit(1)
got = r.stdout.split("\n")
if got and got[-1] == "":
    got.pop()
if r.returncode != 0:
    print(f"driver exit status {r.returncode}; stderr: {r.stderr[-300:]}")
    sys.exit(1)
for i, (a, b) in enumerate(zip(out, got)):
    if a != b:
        print(f"output line {i + 1}: want {a!r}, got {b!r}"); sys.exit(1)
if len(out) != len(got):
    print(f"want {len(out)} lines, got {len(got)}"); sys.exit(1)
PY
t_header() { cmp -s /tests/hashtable.h /app/ht/hashtable.h || { echo "hashtable.h was modified"; return 1; }; }
t_compile() {
  cp /tests/hashtable.h /tests/driver.c "$WORK/" && cp /app/ht/hashtable.c "$WORK/hashtable.c" &&
  cd "$WORK" && timeout 60 gcc -std=c99 -O2 -Wall -o driver driver.c hashtable.c
}
t_noleak_glibc() {
  # glibc's own heap checks: catch double frees / invalid frees on a mixed workload
  cd "$WORK" && MALLOC_CHECK_=3 MALLOC_PERTURB_=165 python3 "$WORK/harness.py" "$WORK/driver" random "$WORK"
}
check "hashtable.h unchanged" t_header
check "hashtable.c compiles with the hidden driver" t_compile
check "basic operations and copies of values" python3 "$WORK/harness.py" "$WORK/driver" basic "$WORK"
check "deletions do not break probe chains" python3 "$WORK/harness.py" "$WORK/driver" delete-chains "$WORK"
check "growth to 20000 keys with updates" python3 "$WORK/harness.py" "$WORK/driver" growth "$WORK"
check "heavy insert/delete churn terminates and stays correct" python3 "$WORK/harness.py" "$WORK/driver" churn "$WORK"
check "random mixed workload under glibc heap checking" t_noleak_glibc

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
