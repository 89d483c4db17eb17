#!/usr/bin/env bash
# Verifier for geode/c-rle-bugs.
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

BIN = sys.argv[1]
state = 987654321
def rnd(n):
    global state
    state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
    return (state >> 33) % n

def ref_compress(data):
    out = bytearray()
    i = 0
    while i < len(data):
        j = i
        while j < len(data) and data[j] == data[i] and j - i < 255:
            j += 1
        out += bytes([j - i, data[i]])
        i = j
    return bytes(out)

def run(flag, data):
    r = subprocess.run([BIN, flag], input=data, capture_output=True, timeout=10)
    return r.returncode, r.stdout, r.stderr

CASES = {
    "empty": b"",
    "single": b"a",
    "simple": b"aaabccdddd",
    "byte 0xff": b"\xff\xff\xff\x00\xff",
    "all byte values": bytes(range(256)) * 2,
    "run of 255": b"x" * 255,
    "run of 256": b"x" * 256,
    "run of 600": b"x" * 600,
    "long zero run": b"\x00" * 1000 + b"\x01",
    "text": b"The quick brown fox jumps over the lazy dog\n" * 20,
}
blob = bytearray()
for _ in range(3000):
    b = rnd(256)
    blob += bytes([b]) * (1 + (rnd(400) if rnd(10) == 0 else rnd(4)))
CASES["random runs"] = bytes(blob)

what = sys.argv[2]
fails = 0
if what == "compress":
    for name, data in CASES.items():
        rc, out, err = run("-c", data)
        if rc != 0 or out != ref_compress(data):
            print(f"compress {name}: rc={rc}, got {out[:16]!r}..., want {ref_compress(data)[:16]!r}..."); fails += 1
elif what == "decompress":
    for name, data in CASES.items():
        rc, out, err = run("-d", ref_compress(data))
        if rc != 0 or out != data:
            print(f"decompress {name}: rc={rc}, {len(out)} bytes, want {len(data)}"); fails += 1
elif what == "roundtrip":
    for name, data in CASES.items():
        rc1, comp, _ = run("-c", data)
        rc2, back, _ = run("-d", comp)
        if rc1 or rc2 or back != data:
            print(f"roundtrip {name} failed"); fails += 1
elif what == "malformed":
    for name, data in {"odd length": b"\x03a\x02", "zero count": b"\x02a\x00b", "single byte": b"\x05"}.items():
        rc, out, err = run("-d", data)
        if rc != 1 or not err.strip():
            print(f"malformed {name}: rc={rc}, stderr={err!r}"); fails += 1
elif what == "usage":
    for args in ([], ["-x"], ["-c", "-d"]):
        r = subprocess.run([BIN, *args], input=b"", capture_output=True, timeout=10)
        if r.returncode != 2 or not r.stderr.strip():
            print(f"usage {args}: rc={r.returncode}"); fails += 1
sys.exit(1 if fails else 0)
PY
t_compile() { cp /app/rle/rle.c "$WORK/rle.c" && cd "$WORK" && timeout 60 gcc -std=c99 -O2 -Wall -o rle rle.c; }
check "rle.c compiles" t_compile
check "compression matches the format (hidden inputs)" python3 "$WORK/harness.py" "$WORK/rle" compress
check "decompression of valid streams" python3 "$WORK/harness.py" "$WORK/rle" decompress
check "round trip reproduces the input" python3 "$WORK/harness.py" "$WORK/rle" roundtrip
check "malformed input rejected with exit 1" python3 "$WORK/harness.py" "$WORK/rle" malformed
check "bad arguments give usage and exit 2" python3 "$WORK/harness.py" "$WORK/rle" usage

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
