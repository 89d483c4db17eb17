#!/usr/bin/env bash
set -euo pipefail
python3 - <<'PY'
import re, sqlite3
db = sqlite3.connect("/app/blog.db")
posts = db.execute("SELECT id, title, body, tags FROM posts ORDER BY id").fetchall()
links = {}
for pid, _, _, tags in posts:
    names = []
    for piece in (tags or "").split(","):
        name = re.sub(r"\s+", "-", piece.strip().lower())
        if name and name not in names:
            names.append(name)
    links[pid] = names
all_names = sorted({n for names in links.values() for n in names})
ids = {n: i for i, n in enumerate(all_names, 1)}
with db:
    db.execute("CREATE TABLE posts_new (id INTEGER PRIMARY KEY, title TEXT NOT NULL, body TEXT)")
    db.execute("INSERT INTO posts_new SELECT id, title, body FROM posts")
    db.execute("DROP TABLE posts")
    db.execute("ALTER TABLE posts_new RENAME TO posts")
    db.execute("CREATE TABLE tags (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE)")
    db.execute("""CREATE TABLE post_tags (post_id INTEGER NOT NULL REFERENCES posts(id),
                  tag_id INTEGER NOT NULL REFERENCES tags(id), PRIMARY KEY (post_id, tag_id))""")
    db.executemany("INSERT INTO tags VALUES (?, ?)", [(i, n) for n, i in ids.items()])
    db.executemany("INSERT INTO post_tags VALUES (?, ?)",
                   [(pid, ids[n]) for pid, names in links.items() for n in names])
    db.execute("""CREATE VIEW post_tag_names AS
                  SELECT pt.post_id AS post_id, t.name AS tag
                  FROM post_tags pt JOIN tags t ON t.id = pt.tag_id""")
db.close()
PY
