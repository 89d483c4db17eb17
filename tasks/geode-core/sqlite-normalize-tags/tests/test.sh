#!/usr/bin/env bash
# Verifier for geode/sqlite-normalize-tags.
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

cat > "$WORK/check.py" <<'GEODE_EOF'
TAGS = [(1, 'ai'), (2, 'alpha'), (3, 'c++'), (4, 'cafe'), (5, 'café'), (6, 'ci/cd'), (7, 'data-science'), (8, 'devops'), (9, 'history'), (10, 'kubernetes'), (11, 'machine-learning'), (12, 'python'), (13, 'rust'), (14, 'sql'), (15, 'systems'), (16, 'testing'), (17, 'wasm'), (18, 'web'), (19, 'zeta'), (20, 'éclair')]
LINKS = [(100, 'python'), (100, 'sql'), (100, 'web'), (107, 'ai'), (107, 'machine-learning'), (114, 'c++'), (114, 'systems'), (135, 'web'), (142, 'data-science'), (149, 'cafe'), (149, 'café'), (156, 'sql'), (163, 'ai'), (163, 'python'), (170, 'rust'), (170, 'systems'), (170, 'wasm'), (184, 'python'), (191, 'ci/cd'), (191, 'devops'), (198, 'alpha'), (198, 'zeta'), (198, 'éclair'), (205, 'ai'), (205, 'python'), (205, 'sql'), (205, 'web'), (212, 'devops'), (212, 'kubernetes'), (226, 'history'), (233, 'testing')]
import shutil, sqlite3, sys
what = sys.argv[1]
db = sqlite3.connect("file:/app/blog.db?mode=ro", uri=True)
if what == "posts":
    cols = [r[1] for r in db.execute("PRAGMA table_info(posts)")]
    assert cols == ["id", "title", "body"], cols
    rows = db.execute("SELECT id, title, body FROM posts ORDER BY id").fetchall()
    want = [(100 + 7 * i, f"Post number {i + 1}", f"Body of post {i + 1}.\nSecond line.") for i in range(20)]
    assert rows == want, rows[:3]
elif what == "tags":
    rows = db.execute("SELECT id, name FROM tags ORDER BY id").fetchall()
    assert rows == TAGS, rows
elif what == "links":
    names = dict(TAGS)
    rows = sorted((p, names.get(t)) for p, t in db.execute("SELECT post_id, tag_id FROM post_tags"))
    assert rows == LINKS, rows
elif what == "view":
    cur = db.execute("SELECT * FROM post_tag_names")
    cols = [d[0] for d in cur.description]
    assert sorted(cols) == ["post_id", "tag"], cols
    rows = sorted((r[cols.index("post_id")], r[cols.index("tag")]) for r in cur.fetchall())
    assert rows == LINKS, rows
    kind = db.execute("SELECT type FROM sqlite_master WHERE name='post_tag_names'").fetchone()
    assert kind == ("view",), kind
elif what == "constraints":
    shutil.copy("/app/blog.db", sys.argv[2])
    w = sqlite3.connect(sys.argv[2])
    fks = {(r[2], r[3], r[4]) for r in w.execute("PRAGMA foreign_key_list(post_tags)")}
    assert ("posts", "post_id", "id") in fks and ("tags", "tag_id", "id") in fks, fks
    for sql in ("INSERT INTO tags (name) VALUES ('python')", "INSERT INTO tags (name) VALUES (NULL)",
                "INSERT INTO post_tags VALUES (100, 12)"):
        try:
            w.execute(sql)
        except sqlite3.IntegrityError:
            continue
        raise AssertionError(f"accepted: {sql}")
elif what == "integrity":
    assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []
GEODE_EOF
check "posts has id, title, body and all rows unchanged" python3 "$WORK/check.py" posts
check "tags table: normalized names, ids in sorted order" python3 "$WORK/check.py" tags
check "post_tags links" python3 "$WORK/check.py" links
check "view post_tag_names" python3 "$WORK/check.py" view
check "UNIQUE, NOT NULL, primary key and foreign keys declared" python3 "$WORK/check.py" constraints "$WORK/copy.db"
check "integrity_check and foreign_key_check clean" python3 "$WORK/check.py" integrity

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
