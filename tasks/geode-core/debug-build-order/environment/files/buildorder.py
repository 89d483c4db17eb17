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
import sys
from collections import defaultdict


def parse(path):
    deps = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if line.startswith("#") or not line.strip():
                continue
            if ":" not in line:
                print(f"error: line {lineno}: missing colon", file=sys.stderr)
                sys.exit(2)
            target, rest = line.split(":", 1)
            deps[target.strip()] = set(rest.split())
    return deps


def order(deps):
    indegree = {t: 0 for t in deps}
    users = defaultdict(list)
    for target, ds in deps.items():
        for d in ds:
            if d != target:
                indegree[target] += 1
                users[d].append(target)
    ready = {t for t, n in indegree.items() if n == 0}
    out = []
    while ready:
        node = ready.pop()
        out.append(node)
        for u in users[node]:
            indegree[u] -= 1
            if indegree[u] == 0:
                ready.add(u)
    stuck = [t for t, n in indegree.items() if n > 0]
    return out, stuck


def main():
    deps = parse(sys.argv[1])
    out, stuck = order(deps)
    if stuck:
        print("error: cycle detected: " + " ".join(stuck), file=sys.stderr)
    for node in out:
        print(node)


if __name__ == "__main__":
    main()
