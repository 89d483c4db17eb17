#!/usr/bin/env bash
# Verifier for geode/todo-extractor.
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

cat > "$WORK/tree.py" <<'PY'
import os, sys
root = sys.argv[1]
FILES = {
    "a.py": b"x = 1  # TODO(zed): first\r\n# TODO(amy):   spaced text   \r\n# TODO(amy): two TODO(bob): on one line\n",
    "B.txt": b"TODO(Upper_Case): capital B sorts first\n",
    "dir with space/notes.md": b"<!-- TODO(x.y-z): html closer -->\n   TODO(q):\nTODO(w) missing colon\n",
    ".hidden/conf.ini": b"[core]\n; TODO(hid): line two\n" + b"\n" * 7 + b"; TODO(hid): hidden file counts\n",
    "node_modules/pkg/index.js": b"// TODO(nm): skipped\n",
    "src/node_modules/x.js": b"// TODO(nm2): skipped too\n",
    ".git/hooks/pre-commit": b"# TODO(git): skipped\n",
    "bin/blob.dat": b"\x00\x01TODO(bin): skipped binary\n",
    "src/lib/mod10.c": b"/* TODO(carl): close comment */\n// todo(low): no\n// TODO: none\n// TODO(): empty owner\n"
                       + b"\n" * 7 + b"int x; /* TODO(carl): second*/\n",
    "src/lib/mod2.c": b"int y;\n// TODO(dana): tabs\tinside\t \n",
    "src/deep/a/b/c/d.go": b"package d\n\n// TODO(eve-9): deep file\n",
}
for p, data in FILES.items():
    full = os.path.join(root, p)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    open(full, "wb").write(data)
os.makedirs(os.path.join(sys.argv[2]), exist_ok=True)
open(os.path.join(sys.argv[2], "plain.txt"), "w").write("nothing to do here\nTODO: unowned\n")
PY
cat > "$WORK/expected1.txt" <<'TXT'
.hidden/conf.ini:2	hid	line two
.hidden/conf.ini:10	hid	hidden file counts
B.txt:1	Upper_Case	capital B sorts first
a.py:1	zed	first
a.py:2	amy	spaced text
a.py:3	amy	two TODO(bob): on one line
dir with space/notes.md:1	x.y-z	html closer
dir with space/notes.md:2	q	
src/deep/a/b/c/d.go:3	eve-9	deep file
src/lib/mod10.c:1	carl	close comment
src/lib/mod10.c:12	carl	second
src/lib/mod2.c:2	dana	tabs	inside
TXT
mkdir -p "$WORK/run"
python3 "$WORK/tree.py" "$WORK/run/tree1" "$WORK/run/tree2"
t_exec() { test -x /app/todos.sh; }
t_sample() {
  printf 'docs/index.html:2\tdave-2\tadd a title\nsrc/main.c:2\talice\thandle argc == 0\nsrc/main.c:5\tbob\tuse puts\nsrc/util.py:3\tcarol.d\tmake this faster\n' > "$WORK/exp_sample.txt"
  timeout 20 /app/todos.sh /app/sample > "$WORK/out_sample.txt" && same_output "$WORK/exp_sample.txt" "$WORK/out_sample.txt"
}
t_hidden_abs() { timeout 20 /app/todos.sh "$WORK/run/tree1" > "$WORK/out1.txt" && same_output "$WORK/expected1.txt" "$WORK/out1.txt"; }
t_hidden_rel() { cd "$WORK/run" && timeout 20 /app/todos.sh tree1/ > "$WORK/out1r.txt" && same_output "$WORK/expected1.txt" "$WORK/out1r.txt"; }
t_empty() { timeout 20 /app/todos.sh "$WORK/run/tree2" > "$WORK/out2.txt" && [ ! -s "$WORK/out2.txt" ]; }
check "/app/todos.sh exists and is executable" t_exec
check "output for /app/sample" t_sample
check "hidden tree (absolute path)" t_hidden_abs
check "hidden tree (relative path, trailing slash)" t_hidden_rel
check "no TODOs: empty output, exit 0" t_empty

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
