import os
FILES = {
    "docs/README.md": b"# Project notes  \r\n\r\nSome text.\t\r\nMore text   \r\n\r\n\r\n",
    "docs/notes/todo.txt": b"- item one\t\t\n- item two\n   \n- item three",
    "docs/notes/data.csv": b"name,value \r\nalpha,1 \r\nbeta,2\t\r\n",
    "docs/guide/intro.md": b"Intro\r\nline with a\rcarriage return inside \r\n  indented stays indented\r\n\r\n",
    "docs/guide/with space.txt": b"spaced name   \r\nsecond\r\n",
    "docs/guide/image.bin": bytes(range(256)) + b"  \r\n\r\n",
    "docs/guide/empty.txt": b"",
    "docs/guide/blank.md": b"\r\n  \r\n\t\n",
    "docs/archive/old.md.bak": b"backup   \r\n",
    "docs/archive/2019/summary.TXT": b"upper-case extension  \r\n",
    "docs/.hidden/secret-notes.txt": b"hidden dirs count too \t\r\n\n\n",
}
for path, data in FILES.items():
    full = os.path.join("/app", path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as f:
        f.write(data)
