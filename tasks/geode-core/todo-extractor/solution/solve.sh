#!/usr/bin/env bash
set -euo pipefail
cat > /app/todos.sh <<'SH'
#!/usr/bin/env bash
exec python3 - "$1" <<'PY'
import os, re, sys
root = sys.argv[1]
pat = re.compile(rb"TODO\(([A-Za-z0-9_.-]+)\):(.*)")
rows = []
for dirpath, dirs, files in os.walk(root):
    dirs[:] = [d for d in dirs if d not in (".git", "node_modules")]
    for name in files:
        full = os.path.join(dirpath, name)
        if not os.path.isfile(full):
            continue
        data = open(full, "rb").read()
        if b"\0" in data:
            continue
        rel = os.path.relpath(full, root).encode()
        for no, line in enumerate(data.split(b"\n"), 1):
            m = pat.search(line)
            if not m:
                continue
            text = m.group(2).strip()
            for closer in (b"*/", b"-->"):
                if text.endswith(closer):
                    text = text[: -len(closer)].rstrip()
                    break
            rows.append((rel, no, m.group(1), text))
rows.sort(key=lambda r: (r[0], r[1]))
out = sys.stdout.buffer
for rel, no, owner, text in rows:
    out.write(rel + b":" + str(no).encode() + b"\t" + owner + b"\t" + text + b"\n")
PY
SH
chmod +x /app/todos.sh
