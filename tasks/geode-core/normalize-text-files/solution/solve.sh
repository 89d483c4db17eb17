#!/usr/bin/env bash
set -euo pipefail
cd /app
python3 - <<'PY'
import os, re
for root, dirs, files in os.walk("/app/docs"):
    for name in files:
        if not (name.endswith(".md") or name.endswith(".txt")):
            continue
        path = os.path.join(root, name)
        data = open(path, "rb").read()
        data = data.replace(b"\r\n", b"\n")
        lines = [re.sub(rb"[ \t]+$", b"", line) for line in data.split(b"\n")]
        while lines and lines[-1] == b"":
            lines.pop()
        out = b"\n".join(lines) + b"\n" if lines else b""
        with open(path, "wb") as f:
            f.write(out)
PY
