#!/usr/bin/env bash
set -euo pipefail
cat > /app/buildorder.py <<'PY'
"""Compute a build order from a dependency file.

Usage: python3 buildorder.py DEPFILE

DEPFILE lines look like
    target: dep1 dep2 ...
meaning `target` needs every `dep` built first. A `#` starts a comment that runs to the end of
the line (anywhere on the line); blank lines are ignored. A target may appear on several lines:
its dependencies are the union of all of them. Names are non-empty runs of non-space characters
other than `:` and `#`. Every name that appears anywhere (as a target or only as a dependency) is
a node to build.

Output: every node exactly once, one per line, dependencies before dependents. Whenever several
nodes are ready to be built, the alphabetically smallest one (plain string order) comes first, so
the output is the lexicographically smallest valid order, and it is the same on every run.

If some nodes can never be built because of a dependency cycle (including a node depending on
itself), print nothing to stdout; print "error: cycle detected: " followed by the sorted names of
all nodes that cannot be built (the cycle members and everything that depends on them), separated
by spaces, to stderr, and exit with status 1. A line without a colon is an error too: print
"error: line N: missing colon" to stderr and exit with status 2. Otherwise exit with status 0.
"""
import heapq
import sys
from collections import defaultdict


def parse(path):
    deps = defaultdict(set)
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#", 1)[0]
            if not line.strip():
                continue
            if ":" not in line:
                print(f"error: line {lineno}: missing colon", file=sys.stderr)
                sys.exit(2)
            target, rest = line.split(":", 1)
            target = target.strip()
            deps[target].update(rest.split())
            for d in rest.split():
                deps.setdefault(d, set())
    return deps


def order(deps):
    indegree = {t: len(ds) for t, ds in deps.items()}
    users = defaultdict(list)
    for target, ds in deps.items():
        for d in ds:
            users[d].append(target)
    ready = [t for t, n in indegree.items() if n == 0]
    heapq.heapify(ready)
    out = []
    while ready:
        node = heapq.heappop(ready)
        out.append(node)
        for u in users[node]:
            indegree[u] -= 1
            if indegree[u] == 0:
                heapq.heappush(ready, u)
    stuck = sorted(t for t, n in indegree.items() if n > 0)
    return out, stuck


def main():
    deps = parse(sys.argv[1])
    out, stuck = order(deps)
    if stuck:
        print("error: cycle detected: " + " ".join(stuck), file=sys.stderr)
        sys.exit(1)
    for node in out:
        print(node)


if __name__ == "__main__":
    main()
PY
