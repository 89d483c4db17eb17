#!/usr/bin/env bash
set -euo pipefail
cat > /app/flatten.py <<'PY'
import argparse, csv, json, sys


def flatten(value, prefix, sep, out):
    if isinstance(value, dict) and value:
        for k, v in value.items():
            flatten(v, f"{prefix}{sep}{k}", sep, out)
    elif isinstance(value, list) and value:
        for i, v in enumerate(value):
            flatten(v, f"{prefix}{sep}{i}", sep, out)
    else:
        if isinstance(value, (dict, list)) or value is None:
            cell = ""
        elif value is True:
            cell = "true"
        elif value is False:
            cell = "false"
        elif isinstance(value, str):
            cell = value
        else:
            cell = json.dumps(value)
        out[prefix] = cell


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sep", default=".")
    p.add_argument("file", nargs="?")
    a = p.parse_args()
    try:
        text = open(a.file, encoding="utf-8").read() if a.file else sys.stdin.read()
        data = json.loads(text)
    except (OSError, ValueError) as e:
        print(f"flatten: {e}", file=sys.stderr)
        return 1
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        print("flatten: expected an array of objects", file=sys.stderr)
        return 1
    rows, columns = [], {}
    for rec in data:
        flat = {}
        for k, v in rec.items():
            flatten(v, k, a.sep, flat)
        for k in flat:
            columns.setdefault(k, None)
        rows.append(flat)
    if not rows:
        return 0
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(list(columns))
    for flat in rows:
        w.writerow([flat.get(c, "") for c in columns])
    return 0


sys.exit(main())
PY
