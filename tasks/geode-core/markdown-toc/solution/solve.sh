#!/usr/bin/env bash
set -euo pipefail
cat > /app/mdtoc <<'PY'
#!/usr/bin/env python3
import re, sys

HEADING = re.compile(r"^(#{1,6}) +(.*)$")

def headings(lines):
    fence = None
    for line in lines:
        body = line.rstrip("\n")
        if fence:
            if body.startswith(fence):
                fence = None
            continue
        if body.startswith("```") or body.startswith("~~~"):
            fence = body[:3]
            continue
        m = HEADING.match(body)
        if not m:
            continue
        text = m.group(2).strip()
        text = re.sub(r"(^|\s+)#+$", "", text).strip()
        if text:
            yield len(m.group(1)), text

def toc(lines):
    seen = {}
    out = []
    for level, text in headings(lines):
        slug = re.sub(r"[^a-z0-9 _-]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        if n:
            slug = f"{slug}-{n}"
        if 2 <= level <= 4:
            out.append("  " * (level - 2) + f"- [{text}](#{slug})\n")
    return out

def main():
    args = sys.argv[1:]
    update = args and args[0] == "--update"
    path = args[-1]
    with open(path, encoding="utf-8", newline="") as f:
        lines = f.readlines()
    entries = toc(lines)
    if not update:
        sys.stdout.write("".join(entries))
        return
    starts = [i for i, l in enumerate(lines) if l.rstrip("\r\n") == "<!-- toc -->"]
    if not starts:
        return
    s = starts[0]
    e = next((i for i in range(s + 1, len(lines)) if lines[i].rstrip("\r\n") == "<!-- /toc -->"), None)
    if e is None:
        return
    new = lines[: s + 1] + entries + lines[e:]
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("".join(new))

main()
PY
chmod +x /app/mdtoc
