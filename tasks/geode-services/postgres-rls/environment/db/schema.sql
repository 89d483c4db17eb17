-- A small social service: five tables, row-level security not yet enabled.
CREATE ROLE app_admin LOGIN PASSWORD 'admin-secret' NOSUPERUSER NOCREATEROLE NOCREATEDB;
CREATE ROLE authenticated NOLOGIN;
CREATE ROLE anon NOLOGIN;
-- The application (and its tests) act as a signed-in user or as an anonymous visitor.
GRANT authenticated, anon TO app_admin;
CREATE DATABASE social OWNER app_admin;
\connect social
SET ROLE app_admin;

CREATE TABLE users (
  id integer PRIMARY KEY,
  handle text UNIQUE NOT NULL,
  bio text NOT NULL DEFAULT ''
);
CREATE TABLE posts (
  id integer PRIMARY KEY,
  author_id integer NOT NULL REFERENCES users (id),
  body text NOT NULL,
  visibility text NOT NULL DEFAULT 'public'
    CHECK (visibility IN ('public', 'followers', 'private'))
);
CREATE TABLE comments (
  id integer PRIMARY KEY,
  post_id integer NOT NULL REFERENCES posts (id) ON DELETE CASCADE,
  author_id integer NOT NULL REFERENCES users (id),
  body text NOT NULL
);
CREATE TABLE likes (
  post_id integer NOT NULL REFERENCES posts (id) ON DELETE CASCADE,
  user_id integer NOT NULL REFERENCES users (id),
  PRIMARY KEY (post_id, user_id)
);
CREATE TABLE follows (
  follower_id integer NOT NULL REFERENCES users (id),
  followee_id integer NOT NULL REFERENCES users (id),
  PRIMARY KEY (follower_id, followee_id)
);

-- Helpers the application already uses.
-- The signed-in user: the session setting app.user_id (NULL for anonymous visitors).
CREATE FUNCTION current_app_user() RETURNS integer
  LANGUAGE sql STABLE
  AS $$ SELECT nullif(current_setting('app.user_id', true), '')::integer $$;
-- Whether the signed-in user follows `target`.
CREATE FUNCTION follows_user(target integer) RETURNS boolean
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public
  AS $$ SELECT EXISTS (SELECT 1 FROM follows
                       WHERE follower_id = current_app_user() AND followee_id = target) $$;
-- Whether the signed-in user may read a post by `author` with `visibility`: public posts, their
-- own, and followers-only posts of people they follow.
CREATE FUNCTION post_visible(author integer, visibility text) RETURNS boolean
  LANGUAGE sql STABLE
  AS $$ SELECT visibility = 'public' OR author = current_app_user()
               OR (visibility = 'followers' AND follows_user(author)) $$;
-- Whether the signed-in user may read the post with id `post`.
CREATE FUNCTION can_see_post(post integer) RETURNS boolean
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public
  AS $$ SELECT EXISTS (SELECT 1 FROM posts p
                       WHERE p.id = post AND post_visible(p.author_id, p.visibility)) $$;

GRANT USAGE ON SCHEMA public TO authenticated, anon;
GRANT SELECT, INSERT, UPDATE, DELETE ON users, posts, comments, likes, follows TO authenticated;
GRANT SELECT ON users, posts, comments, likes, follows TO anon;
GRANT EXECUTE ON FUNCTION current_app_user(), follows_user(integer), post_visible(integer, text),
  can_see_post(integer) TO authenticated, anon;

INSERT INTO users (id, handle) VALUES (1, 'alice'), (2, 'bob'), (3, 'carol');
INSERT INTO follows VALUES (2, 1);  -- bob follows alice
INSERT INTO posts VALUES
  (10, 1, 'hello world', 'public'),
  (11, 1, 'for my followers', 'followers'),
  (12, 1, 'note to self', 'private'),
  (20, 2, 'bob here', 'public');
INSERT INTO comments VALUES
  (100, 10, 2, 'hi alice'),
  (101, 11, 2, 'followers only reply'),
  (102, 20, 3, 'hi bob');
INSERT INTO likes VALUES (10, 2), (20, 1), (11, 2);
