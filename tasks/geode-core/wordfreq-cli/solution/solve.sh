#!/usr/bin/env bash
set -euo pipefail
cat > /app/wordfreq.py <<'PY'
import argparse, re, sys
from collections import Counter

WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--top", type=int, default=10)
    p.add_argument("--min-length", type=int, default=1)
    p.add_argument("files", nargs="+")
    a = p.parse_args()
    counts = Counter()
    for name in a.files:
        try:
            if name == "-":
                text = sys.stdin.buffer.read().decode("utf-8", "replace")
            else:
                with open(name, encoding="utf-8", errors="replace") as f:
                    text = f.read()
        except OSError as e:
            print(f"wordfreq: {e}", file=sys.stderr)
            return 2
        counts.update(w for w in WORD.findall(text.lower()) if len(w) >= a.min_length)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    for word, n in ranked[: a.top]:
        print(n, word)
    return 0

sys.exit(main())
PY
