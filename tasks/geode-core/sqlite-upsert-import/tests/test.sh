#!/usr/bin/env bash
# Verifier for geode/sqlite-upsert-import.
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

cat > "$WORK/setup_hidden.py" <<'GEODE_EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.execute("""CREATE TABLE events (
  id TEXT PRIMARY KEY,
  user_id INTEGER NOT NULL,
  kind TEXT NOT NULL,
  amount_cents INTEGER NOT NULL,
  updated_at TEXT NOT NULL
)""")
db.executemany("INSERT INTO events VALUES (?,?,?,?,?)", [
    ("a-1", 1, "purchase", 1000, "2024-05-01T12:00:00Z"),
    ("a-2", 2, "purchase", 2500, "2024-05-01T12:00:00Z"),
    ("a-3", 3, "signup", 0, "2024-05-02T00:00:00Z"),
    ("a-4", 4, "refund", -700, "2024-05-03T08:15:00Z"),
])
db.commit()
open(sys.argv[2], "w", encoding="utf-8", newline="").write(
    "id,user_id,kind,amount,updated_at\r\n"
    "a-1,1,purchase,12.34,2024-05-01T14:00:01+02:00\r\n"      # 12:00:01Z later -> update
    "a-2,2,purchase,99.99,2024-05-01T14:00:00+02:00\r\n"      # same instant -> skip
    "a-3,3,signup,0,2024-05-01T23:59:59Z\r\n"                 # older -> skip
    "  a-4 , 4 ,refund, -0.5 ,2024-05-03T05:15:01-03:00\r\n"  # 08:15:01Z later -> update, stripped
    "\"ev,7\",7,purchase,0.29,2024-03-01T01:00:00+05:00\r\n"  # quoted id, leap-day conversion
    "\r\n"
    "b-1,10,purchase,1,2023-12-31T22:30:00-03:00\r\n"         # crosses year
    "b-1,10,refund,-1.5,2024-01-01T01:29:59Z\r\n"             # older than the first b-1 -> skip
    "b-1,10,refund,-1.05,2024-01-01T01:30:01Z\r\n"            # newer -> update
    "b-2,11,PURCHASE,1,2024-01-01T00:00:00Z\r\n"              # bad kind
    "b-3,-3,purchase,1,2024-01-01T00:00:00Z\r\n"              # bad user_id
    "b-4,12,purchase,1.234,2024-01-01T00:00:00Z\r\n"          # 3 decimals
    "b-5,12,purchase,.5,2024-01-01T00:00:00Z\r\n"             # no integer part
    "b-6,12,purchase,1,2024-02-30T00:00:00Z\r\n"              # impossible date
    "b-7,12,purchase,1,2024-01-01T00:00:00\r\n"               # no offset
    "b-8,12,purchase,1,2024-01-01 00:00:00Z\r\n"              # space separator
    "b-9,12,purchase\r\n"                                     # too few fields
    "b-10,12,purchase,1,2024-01-01T00:00:00Z,extra\r\n"       # too many fields
    ",12,purchase,1,2024-01-01T00:00:00Z\r\n"                 # empty id
    "b-11, 12 ,signup,-0,2024-06-30T23:00:00-01:00\r\n"       # valid, -0 -> 0, next day UTC
    "b-12,13,purchase,1e3,2024-01-01T00:00:00Z\r\n"           # not a decimal
    "b-13,13,purchase,+5,2024-01-01T00:00:00Z\r\n"            # plus sign not allowed
    "b-14,14,refund,-1234567.8,2024-01-01T00:00:00+14:00\r\n" # big amount, big offset
)
GEODE_EOF
cat > "$WORK/rows.py" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for r in db.execute("SELECT id, user_id, kind, amount_cents, updated_at, typeof(user_id), typeof(amount_cents) FROM events ORDER BY id"):
    print("|".join(map(str, r)))
PY
cat > "$WORK/expected_rows.txt" <<'GEODE_EOF'
a-1|1|purchase|1234|2024-05-01T12:00:01Z|integer|integer
a-2|2|purchase|2500|2024-05-01T12:00:00Z|integer|integer
a-3|3|signup|0|2024-05-02T00:00:00Z|integer|integer
a-4|4|refund|-50|2024-05-03T08:15:01Z|integer|integer
b-1|10|refund|-105|2024-01-01T01:30:01Z|integer|integer
b-11|12|signup|0|2024-07-01T00:00:00Z|integer|integer
b-14|14|refund|-123456780|2023-12-31T10:00:00Z|integer|integer
ev,7|7|purchase|29|2024-02-29T20:00:00Z|integer|integer
GEODE_EOF
cat > "$WORK/expected_sample.txt" <<'GEODE_EOF'
ev-1|42|purchase|2150|2024-03-01T11:00:00Z|integer|integer
ev-2|42|refund|-500|2024-03-01T10:30:00Z|integer|integer
GEODE_EOF
P=/app/import_events.py
cd "$WORK" && python3 setup_hidden.py hidden.db hidden.csv
t_exists() { [ -f "$P" ]; }
t_sample() {
  local out
  out=$(cd "$WORK" && timeout 20 python3 "$P" sample.db /app/sample.csv) || return 1
  [ "$out" = "inserted=2 updated=1 skipped=0 rejected=1" ] || { echo "summary: $out"; return 1; }
  python3 "$WORK/rows.py" "$WORK/sample.db" > "$WORK/got_sample.txt" && same_output "$WORK/expected_sample.txt" "$WORK/got_sample.txt"
}
t_schema() {
  python3 - "$WORK/sample.db" <<'PY'
import sqlite3, sys
info = [r[1:] for r in sqlite3.connect(sys.argv[1]).execute("PRAGMA table_info(events)")]
want = [("id", "TEXT", 0, None, 1), ("user_id", "INTEGER", 1, None, 0), ("kind", "TEXT", 1, None, 0),
        ("amount_cents", "INTEGER", 1, None, 0), ("updated_at", "TEXT", 1, None, 0)]
assert info == want, info
PY
}
t_hidden_summary() {
  local out
  out=$(cd "$WORK" && timeout 20 python3 "$P" hidden.db hidden.csv) || return 1
  [ "$out" = "inserted=4 updated=3 skipped=3 rejected=12" ] || { echo "summary: $out"; return 1; }
}
t_hidden_rows() { python3 "$WORK/rows.py" "$WORK/hidden.db" > "$WORK/got_rows.txt" && same_output "$WORK/expected_rows.txt" "$WORK/got_rows.txt"; }
t_rerun() {
  local out
  out=$(cd "$WORK" && timeout 20 python3 "$P" hidden.db hidden.csv) || return 1
  [ "$out" = "inserted=0 updated=0 skipped=10 rejected=12" ] || { echo "summary: $out"; return 1; }
  python3 "$WORK/rows.py" "$WORK/hidden.db" > "$WORK/got_rows2.txt" && same_output "$WORK/expected_rows.txt" "$WORK/got_rows2.txt"
}
t_badheader() {
  local rc
  [ -f "$P" ] || return 1
  printf 'id,user,kind,amount,updated_at\nz-1,1,purchase,1,2024-01-01T00:00:00Z\n' > "$WORK/bad.csv"
  (cd "$WORK" && timeout 20 python3 "$P" hidden.db bad.csv > "$WORK/bad.out" 2>&1)
  rc=$?
  [ $rc -eq 2 ] || { echo "exit status $rc"; return 1; }
  python3 "$WORK/rows.py" "$WORK/hidden.db" > "$WORK/got_rows3.txt" && same_output "$WORK/expected_rows.txt" "$WORK/got_rows3.txt"
}
check "script exists" t_exists
check "example import into a new database" t_sample
check "events table created with the exact schema" t_schema
check "hidden import: summary line" t_hidden_summary
check "hidden import: rows (upserts, cents, UTC, rejections)" t_hidden_rows
check "second run changes nothing and counts skips" t_rerun
check "wrong header: exit 2, database untouched" t_badheader

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
