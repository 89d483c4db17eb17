#!/usr/bin/env bash
set -euo pipefail
cat > /app/semver_sort.py <<'PY'
import functools, re, sys

NUM = r"(0|[1-9][0-9]*)"
IDENT = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
BUILD = r"[0-9A-Za-z-]+"
SEMVER = re.compile(rf"^v?{NUM}\.{NUM}\.{NUM}(?:-({IDENT}(?:\.{IDENT})*))?(?:\+({BUILD}(?:\.{BUILD})*))?$")

def key(m):
    pre = m.group(4)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)), pre.split(".") if pre else None)

def cmp_ident(a, b):
    an, bn = a.isdigit(), b.isdigit()
    if an and bn:
        return (int(a) > int(b)) - (int(a) < int(b))
    if an != bn:
        return -1 if an else 1
    return (a > b) - (a < b)

def cmp(x, y):
    kx, ky = x[0], y[0]
    if kx[:3] != ky[:3]:
        return -1 if kx[:3] < ky[:3] else 1
    px, py = kx[3], ky[3]
    if px is None or py is None:
        return (px is None) - (py is None)
    for a, b in zip(px, py):
        c = cmp_ident(a, b)
        if c:
            return c
    return (len(px) > len(py)) - (len(px) < len(py))

def main():
    args = sys.argv[1:]
    reverse, unique = "--reverse" in args, "--unique" in args
    items, bad = [], 0
    for line in sys.stdin.read().splitlines():
        s = line.strip()
        if not s:
            continue
        m = SEMVER.match(s)
        if not m:
            print(f"invalid: {s}", file=sys.stderr)
            bad += 1
            continue
        items.append((key(m), s))
    if unique:
        kept = []
        for it in items:
            if not any(cmp(it, k) == 0 for k in kept):
                kept.append(it)
        items = kept
    c = functools.cmp_to_key(cmp)
    if reverse:
        # stable descending: sort by the negated comparison
        items = sorted(items, key=functools.cmp_to_key(lambda a, b: -cmp(a, b)))
    else:
        items = sorted(items, key=c)
    for _, s in items:
        print(s)
    return 1 if bad else 0

sys.exit(main())
PY
