#!/usr/bin/env bash
set -euo pipefail
cat > /app/detect_bruteforce.py <<'PY'
import datetime as dt, json, re, sys
from collections import defaultdict

HEAD = re.compile(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d\d:\d\d:\d\d) \S+ sshd\[\d+\]: (.*)$")
FAIL = re.compile(r"^Failed password for (?:invalid user )?(\S+) from (\d+\.\d+\.\d+\.\d+) port \d+ ssh2")
REPEAT = re.compile(r"^message repeated (\d+) times: \[ (.*)\]$")
OK = re.compile(r"^Accepted \S+ for (\S+) from (\d+\.\d+\.\d+\.\d+) port \d+")

fails = defaultdict(list)   # ip -> [(time, user)]
accepts = defaultdict(list)
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    m = HEAD.match(line.rstrip("\n"))
    if not m:
        continue
    t = dt.datetime.strptime(f"2024 {m.group(1)} {m.group(2)} {m.group(3)}", "%Y %b %d %H:%M:%S")
    msg, times = m.group(4), 1
    r = REPEAT.match(msg)
    if r:
        times, msg = int(r.group(1)), r.group(2)
    f = FAIL.match(msg)
    if f:
        fails[f.group(2)].extend([(t, f.group(1))] * times)
        continue
    a = OK.match(msg)
    if a and not r:
        accepts[a.group(2)].append(t)

out = []
for ip, evs in fails.items():
    times = [t for t, _ in evs]
    start = None
    for i in range(len(times) - 4):
        if (times[i + 4] - times[i]).total_seconds() <= 600:
            start = times[i]
            break
    if start is None:
        continue
    out.append({
        "ip": ip,
        "failures": len(evs),
        "window_start": start.strftime("%Y-%m-%dT%H:%M:%S"),
        "users": sorted({u for _, u in evs}),
        "compromised": any(t >= start for t in accepts[ip]),
    })
out.sort(key=lambda o: (o["window_start"], o["ip"]))
print(json.dumps(out, indent=2))
PY
