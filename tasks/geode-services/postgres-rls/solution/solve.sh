#!/usr/bin/env bash
# Reference solution for geode/postgres-rls: one policy per rule, through the helpers.
set -euo pipefail
until pg_isready -q; do sleep 0.5; done
psql -X -q -v ON_ERROR_STOP=1 <<'SQL'
BEGIN;
ALTER TABLE users ENABLE ROW LEVEL SECURITY;
ALTER TABLE posts ENABLE ROW LEVEL SECURITY;
ALTER TABLE comments ENABLE ROW LEVEL SECURITY;
ALTER TABLE likes ENABLE ROW LEVEL SECURITY;
ALTER TABLE follows ENABLE ROW LEVEL SECURITY;

CREATE POLICY users_read ON users FOR SELECT TO authenticated, anon USING (true);
CREATE POLICY users_update_own ON users FOR UPDATE TO authenticated
  USING (id = current_app_user()) WITH CHECK (id = current_app_user());

CREATE POLICY posts_read ON posts FOR SELECT TO authenticated, anon
  USING (post_visible(author_id, visibility));
CREATE POLICY posts_insert_own ON posts FOR INSERT TO authenticated
  WITH CHECK (author_id = current_app_user());
CREATE POLICY posts_update_own ON posts FOR UPDATE TO authenticated
  USING (author_id = current_app_user()) WITH CHECK (author_id = current_app_user());
CREATE POLICY posts_delete_own ON posts FOR DELETE TO authenticated
  USING (author_id = current_app_user());

CREATE POLICY comments_read ON comments FOR SELECT TO authenticated, anon
  USING (can_see_post(post_id));
CREATE POLICY comments_insert_own ON comments FOR INSERT TO authenticated
  WITH CHECK (author_id = current_app_user() AND can_see_post(post_id));
CREATE POLICY comments_update_own ON comments FOR UPDATE TO authenticated
  USING (author_id = current_app_user())
  WITH CHECK (author_id = current_app_user() AND can_see_post(post_id));
CREATE POLICY comments_delete_own ON comments FOR DELETE TO authenticated
  USING (author_id = current_app_user());

CREATE POLICY likes_read ON likes FOR SELECT TO authenticated, anon USING (can_see_post(post_id));
CREATE POLICY likes_insert_own ON likes FOR INSERT TO authenticated
  WITH CHECK (user_id = current_app_user() AND can_see_post(post_id));
CREATE POLICY likes_delete_own ON likes FOR DELETE TO authenticated
  USING (user_id = current_app_user());

CREATE POLICY follows_read ON follows FOR SELECT TO authenticated
  USING (current_app_user() IN (follower_id, followee_id));
CREATE POLICY follows_insert_own ON follows FOR INSERT TO authenticated
  WITH CHECK (follower_id = current_app_user());
CREATE POLICY follows_delete_own ON follows FOR DELETE TO authenticated
  USING (follower_id = current_app_user());
COMMIT;
SQL
echo "row-level security enabled on users, posts, comments, likes, follows"
