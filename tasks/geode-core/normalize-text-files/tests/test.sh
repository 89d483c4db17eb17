#!/usr/bin/env bash
# Verifier for geode/normalize-text-files.
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

cat > "$WORK/check.py" <<'PY'
import os, sys
EXPECTED = {
    'docs/README.md': b'# Project notes\n\nSome text.\nMore text\n',
    'docs/notes/todo.txt': b'- item one\n- item two\n\n- item three\n',
    'docs/notes/data.csv': b'name,value \r\nalpha,1 \r\nbeta,2\t\r\n',
    'docs/guide/intro.md': b'Intro\nline with a\rcarriage return inside\n  indented stays indented\n',
    'docs/guide/with space.txt': b'spaced name\nsecond\n',
    'docs/guide/image.bin': b'\x00\x01\x02\x03\x04\x05\x06\x07\x08\t\n\x0b\x0c\r\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f !"#$%&\'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~\x7f\x80\x81\x82\x83\x84\x85\x86\x87\x88\x89\x8a\x8b\x8c\x8d\x8e\x8f\x90\x91\x92\x93\x94\x95\x96\x97\x98\x99\x9a\x9b\x9c\x9d\x9e\x9f\xa0\xa1\xa2\xa3\xa4\xa5\xa6\xa7\xa8\xa9\xaa\xab\xac\xad\xae\xaf\xb0\xb1\xb2\xb3\xb4\xb5\xb6\xb7\xb8\xb9\xba\xbb\xbc\xbd\xbe\xbf\xc0\xc1\xc2\xc3\xc4\xc5\xc6\xc7\xc8\xc9\xca\xcb\xcc\xcd\xce\xcf\xd0\xd1\xd2\xd3\xd4\xd5\xd6\xd7\xd8\xd9\xda\xdb\xdc\xdd\xde\xdf\xe0\xe1\xe2\xe3\xe4\xe5\xe6\xe7\xe8\xe9\xea\xeb\xec\xed\xee\xef\xf0\xf1\xf2\xf3\xf4\xf5\xf6\xf7\xf8\xf9\xfa\xfb\xfc\xfd\xfe\xff  \r\n\r\n',
    'docs/guide/empty.txt': b'',
    'docs/guide/blank.md': b'',
    'docs/archive/old.md.bak': b'backup   \r\n',
    'docs/archive/2019/summary.TXT': b'upper-case extension  \r\n',
    'docs/.hidden/secret-notes.txt': b'hidden dirs count too\n',
}
mode = sys.argv[1]
if mode == "set":
    found = set()
    for root, dirs, files in os.walk("/app/docs"):
        for n in files:
            found.add(os.path.relpath(os.path.join(root, n), "/app"))
    missing = sorted(set(EXPECTED) - found)
    extra = sorted(found - set(EXPECTED))
    if missing or extra:
        print("missing:", missing, "extra:", extra)
        sys.exit(1)
else:
    path = sys.argv[2]
    try:
        data = open(os.path.join("/app", path), "rb").read()
    except OSError as e:
        print(e); sys.exit(1)
    if data != EXPECTED[path]:
        print("expected", repr(EXPECTED[path])[:300]); print("actual  ", repr(data)[:300])
        sys.exit(1)
PY
check "same set of files under /app/docs" python3 "$WORK/check.py" set
for p in docs/README.md docs/notes/todo.txt docs/notes/data.csv docs/guide/intro.md docs/guide/with%20space.txt docs/guide/image.bin docs/guide/empty.txt docs/guide/blank.md docs/archive/old.md.bak docs/archive/2019/summary.TXT docs/.hidden/secret-notes.txt; do
  p=${p//%20/ }
  check "content of $p" python3 "$WORK/check.py" file "$p"
done

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
