import datetime as dt, json
state = 777
def rnd(n):
    global state
    state = (state * 1103515245 + 12345) % 2**31
    return (state >> 4) % n

ENDPOINTS = ["GET /api/items", "POST /api/orders", "GET /api/users/:id", "GET /healthz"]
base = dt.datetime(2024, 4, 2, 9, 0, 0)
events = []  # (time_ms, seq, line)
seq = 0
def emit(ms, obj=None, raw=None):
    global seq
    seq += 1
    t = base + dt.timedelta(milliseconds=ms)
    if obj is not None:
        obj = dict(ts=t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z", **obj)
        raw = json.dumps(obj)
    events.append((ms, seq, raw))

open_ids = []
for i in range(900):
    start = i * 400 + rnd(300)
    ep = ENDPOINTS[rnd(4)]
    rid = f"r{rnd(60):02d}"   # ids are reused over time
    if rid in open_ids:
        rid = f"x{i}"
    lat = {0: 20 + rnd(80), 1: 150 + rnd(900), 2: 30 + rnd(200), 3: 1 + rnd(5)}[ENDPOINTS.index(ep)]
    if rnd(50) == 0:
        lat += 5000
    emit(start, {"level": "info", "event": "request_start", "req_id": rid, "endpoint": ep})
    r = rnd(100)
    if r < 3:
        continue  # never finishes
    status = 200 if r < 90 else (404 if r < 94 else 500 + rnd(4))
    emit(start + lat, {"level": "error" if status >= 500 else "info", "event": "request_end", "req_id": rid, "status": status})
    if status >= 500 and rnd(2) == 0:
        emit(start + lat, raw="Traceback (most recent call last):")
        emit(start + lat, raw='  File "/srv/app/handlers.py", line 88, in create_order')
        emit(start + lat, raw="ValueError: boom")
    if rnd(40) == 0:
        emit(start + 5, {"level": "debug", "event": "cache_miss", "req_id": rid})
# an end without a start, and a truncated line
emit(10, {"level": "info", "event": "request_end", "req_id": "ghost", "status": 200})
emit(20, raw='{"ts": "2024-04-02T09:00:00.020Z", "level": "info", "event": "request_st')
events.sort(key=lambda e: (e[0], e[1]))
with open("/app/app.log", "w") as f:
    for _, _, line in events:
        f.write(line + "\n")
