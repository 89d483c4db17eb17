#!/usr/bin/env bash
set -euo pipefail
python3 - <<'PY'
import csv, datetime as dt, json, math
from collections import defaultdict

EPOCH = dt.datetime(1970, 1, 1)

def ms(ts):
    return (dt.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ") - EPOCH) // dt.timedelta(milliseconds=1)

open_starts = defaultdict(list)  # req_id -> stack of (endpoint, start_ms)
lat = defaultdict(list)
errors = defaultdict(int)
endpoints = set()
for line in open("/app/app.log", encoding="utf-8"):
    try:
        ev = json.loads(line)
    except ValueError:
        continue
    if not isinstance(ev, dict):
        continue
    kind = ev.get("event")
    if kind == "request_start":
        endpoints.add(ev["endpoint"])
        open_starts[ev["req_id"]].append((ev["endpoint"], ms(ev["ts"])))
    elif kind == "request_end":
        stack = open_starts.get(ev["req_id"])
        if not stack:
            continue
        ep, t0 = stack.pop()
        lat[ep].append(ms(ev["ts"]) - t0)
        if ev["status"] >= 500:
            errors[ep] += 1

incomplete = defaultdict(int)
for stack in open_starts.values():
    for ep, _ in stack:
        incomplete[ep] += 1

def pct(values, p):
    return values[math.ceil(p / 100 * len(values)) - 1]

with open("/app/latency_report.csv", "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["endpoint", "completed", "incomplete", "p50_ms", "p95_ms", "p99_ms", "max_ms", "error_rate"])
    for ep in sorted(endpoints):
        v = sorted(lat[ep])
        w.writerow([ep, len(v), incomplete[ep], pct(v, 50), pct(v, 95), pct(v, 99), v[-1],
                    f"{errors[ep] / len(v):.3f}"])
PY
