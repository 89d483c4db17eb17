#!/usr/bin/env bash
# Verifier for geode/postgres-rls: named checks against the `db` sidecar, each run as a user
# of the application in a transaction that is rolled back.
# The exit code is ignored: only /logs/verifier/reward.txt counts ("1" = every check passed).
set -u -o pipefail
REWARD_DIR=/logs/verifier
mkdir -p "$REWARD_DIR"
rm -f "$REWARD_DIR/reward.txt" "$REWARD_DIR/reward.json" "$REWARD_DIR/ctrf.json"
echo 0 > "$REWARD_DIR/reward.txt"
PASSED=0
FAILED=0
TESTS=""
WORK=$(mktemp -d /tmp/geode-verify.XXXXXX)

for _ in $(seq 1 60); do pg_isready -q && break; sleep 0.5; done

# as ROLE USER_ID SQL: the rows of SQL (one per line, columns joined by |) as that user.
as() {
  psql -X -q -tA -v ON_ERROR_STOP=1 2>"$WORK/err" <<SQL
BEGIN;
SET LOCAL ROLE $1;
SET LOCAL app.user_id = '$2';
$3
ROLLBACK;
SQL
}
# sees ROLE USER_ID TABLE EXPECTED: the ids (or key pairs) the user reads from TABLE.
sees() {
  local key=id
  case $3 in likes) key="post_id || ':' || user_id" ;; follows) key="follower_id || ':' || followee_id" ;; esac
  local got
  got=$(as "$1" "$2" "SELECT coalesce(string_agg(k, ',' ORDER BY k), '') FROM (SELECT ($key)::text AS k FROM $3) s;") || { cat "$WORK/err"; return 1; }
  [ "$got" = "$4" ] || { echo "$1 ${2:-(anonymous)} reads $3: got '$got', want '$4'"; return 1; }
}
# changes ROLE USER_ID SQL EXPECTED: a write whose RETURNING rows must be EXPECTED ("" = none).
changes() {
  local got
  got=$(as "$1" "$2" "$3" | paste -sd, -) || { echo "$3 failed: $(cat "$WORK/err")"; return 1; }
  [ "$got" = "$4" ] || { echo "$3 as user $2: changed '$got', want '$4'"; return 1; }
}
# refused ROLE USER_ID SQL: the write must fail or change nothing.
refused() {
  local got
  if got=$(as "$1" "$2" "$3" | paste -sd, -) && [ -n "$got" ]; then
    echo "$3 as user $2 was allowed (returned '$got')"
    return 1
  fi
  return 0
}

check() {
  local name=$1
  shift
  if ( "$@" ) </dev/null >"$WORK/check.out" 2>&1; then
    echo "PASS: $name"
    PASSED=$((PASSED + 1))
    TESTS+="{\"name\":\"$name\",\"status\":\"passed\",\"duration\":0},"
  else
    echo "FAIL: $name"
    head -n 10 "$WORK/check.out" | sed 's/^/    /'
    FAILED=$((FAILED + 1))
    TESTS+="{\"name\":\"$name\",\"status\":\"failed\",\"duration\":0},"
  fi
}

rls_on() {
  local on
  on=$(psql -X -q -tA -c "SELECT relrowsecurity FROM pg_class WHERE oid = 'public.$1'::regclass") || return 1
  [ "$on" = t ] || { echo "relrowsecurity of $1 is '$on'"; return 1; }
}
t_users_read() { sees anon '' users 1,2,3 && sees authenticated 3 users 1,2,3; }
t_users_update() {
  changes authenticated 1 "UPDATE users SET bio = 'x' WHERE id IN (1, 2) RETURNING id;" 1 &&
  refused authenticated 1 "INSERT INTO users VALUES (9, 'mallory') RETURNING id;" &&
  refused authenticated 1 "DELETE FROM users WHERE id = 3 RETURNING id;"
}
t_posts_anon() { sees anon '' posts 10,20; }
t_posts_followers() { sees authenticated 2 posts 10,11,20; }
t_posts_others() { sees authenticated 3 posts 10,20; }
t_posts_author() { sees authenticated 1 posts 10,11,12,20; }
t_posts_edit() {
  changes authenticated 1 "UPDATE posts SET body = 'edited' WHERE id IN (10, 20) RETURNING id;" 10 &&
  changes authenticated 2 "DELETE FROM posts WHERE id IN (12, 20) RETURNING id;" 20
}
t_posts_as_other() {
  changes authenticated 1 "INSERT INTO posts VALUES (31, 1, 'mine', 'public') RETURNING id;" 31 &&
  refused authenticated 1 "INSERT INTO posts VALUES (30, 2, 'forged', 'public') RETURNING id;" &&
  refused authenticated 1 "UPDATE posts SET author_id = 2 WHERE id = 10 RETURNING id;"
}
t_comments_read() {
  sees anon '' comments 100,102 && sees authenticated 3 comments 100,102 &&
  sees authenticated 2 comments 100,101,102
}
t_comments_write() {
  changes authenticated 2 "DELETE FROM comments WHERE id IN (100, 102) RETURNING id;" 100 &&
  changes authenticated 3 "INSERT INTO comments VALUES (200, 10, 3, 'nice') RETURNING id;" 200 &&
  refused authenticated 3 "INSERT INTO comments VALUES (201, 12, 3, 'peek') RETURNING id;" &&
  refused authenticated 3 "INSERT INTO comments VALUES (202, 10, 1, 'forged') RETURNING id;"
}
t_likes() {
  sees authenticated 3 likes 10:2,20:1 &&
  changes authenticated 3 "INSERT INTO likes VALUES (10, 3) RETURNING post_id;" 10 &&
  refused authenticated 3 "INSERT INTO likes VALUES (20, 2) RETURNING post_id;" &&
  refused authenticated 3 "DELETE FROM likes WHERE user_id = 1 RETURNING post_id;"
}
t_follows() {
  sees authenticated 3 follows '' && sees authenticated 1 follows 2:1 &&
  sees authenticated 2 follows 2:1 &&
  changes authenticated 3 "INSERT INTO follows VALUES (3, 1) RETURNING follower_id;" 3 &&
  refused authenticated 3 "INSERT INTO follows VALUES (1, 3) RETURNING follower_id;" &&
  refused authenticated 1 "DELETE FROM follows RETURNING follower_id;"
}
t_anon_writes() {
  refused anon '' "UPDATE posts SET body = 'x' RETURNING id;" &&
  refused anon '' "INSERT INTO comments VALUES (300, 10, 1, 'x') RETURNING id;"
}
t_data_kept() {
  local got
  got=$(psql -X -q -tA -c "SELECT (SELECT count(*) FROM users) || ',' || (SELECT count(*) FROM posts) || ',' || (SELECT count(*) FROM comments) || ',' || (SELECT count(*) FROM likes) || ',' || (SELECT count(*) FROM follows)") || return 1
  [ "$got" = "3,4,3,3,1" ] || { echo "row counts users,posts,comments,likes,follows: $got"; return 1; }
}

for table in users posts comments likes follows; do
  check "row-level security is on for $table" rls_on "$table"
done
check "everyone reads every user" t_users_read
check "a user changes only their own profile" t_users_update
check "anonymous visitors see public posts only" t_posts_anon
check "followers see followers-only posts" t_posts_followers
check "others see public posts only" t_posts_others
check "authors see their private posts" t_posts_author
check "a user edits and deletes only their own posts" t_posts_edit
check "a user cannot post as someone else" t_posts_as_other
check "comments follow their post's visibility" t_comments_read
check "comments are written by their author on readable posts" t_comments_write
check "likes are read with their post and made as oneself" t_likes
check "follows are seen by their two users and made as oneself" t_follows
check "anonymous visitors write nothing" t_anon_writes
check "the existing rows are kept" t_data_kept

echo "$PASSED passed, $FAILED failed"
printf '{"results":{"tool":{"name":"geode-checks"},"summary":{"tests":%d,"passed":%d,"failed":%d,"pending":0,"skipped":0,"other":0},"tests":[%s]}}\n' \
  $((PASSED + FAILED)) "$PASSED" "$FAILED" "${TESTS%,}" > "$REWARD_DIR/ctrf.json"
rm -rf "$WORK"
if [ "$FAILED" -eq 0 ] && [ "$PASSED" -gt 0 ]; then
  echo 1 > "$REWARD_DIR/reward.txt"
fi
