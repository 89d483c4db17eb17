import gzip, os
state = 424242
def rnd(n):
    global state
    state = (state * 1103515245 + 12345) % 2**31
    return (state >> 4) % n

PATHS = ["/", "/api/items", "/api/items/42", "/login", "/static/app.js", "/api/search?q=x"]
AGENTS = ['"Mozilla/5.0 (X11; Linux x86_64)"', '"curl/8.4.0"', '"Go-http-client/1.1"']
MON = ["Jan", "Feb", "Mar"]
def line(day, hh, mm, ss, status):
    ip = f"10.0.{rnd(4)}.{1 + rnd(250)}"
    path = PATHS[rnd(len(PATHS))]
    size = rnd(5000)
    return (f'{ip} - - [{day:02d}/Mar/2024:{hh:02d}:{mm:02d}:{ss:02d} +0000] "GET {path} HTTP/1.1" '
            f'{status} {size} "-" {AGENTS[rnd(3)]}\n')

def status():
    r = rnd(100)
    if r < 70: return 200
    if r < 78: return 304
    if r < 85: return 404
    if r < 88: return 499
    if r < 93: return 500
    if r < 97: return 502
    return 503

chunks = {}
for name, day, hours in (("access.log.2.gz", 9, range(20, 24)), ("access.log.1", 10, range(0, 5)), ("access.log", 10, range(5, 9))):
    out = []
    for hh in hours:
        if hh == 2:  # a quiet hour: no requests at all
            continue
        n = 5 + rnd(30)
        stamps = sorted((rnd(60), rnd(60)) for _ in range(n))
        for mm, ss in stamps:
            out.append(line(day, hh, mm, ss, status()))
        if hh == 6:
            out.append("garbage line without the expected format\n")
            out.append('10.0.0.9 - - [10/Mar/2024:06:59:59 +0000] "GET / HTTP/1.1" - 0 "-" "x"\n')
    chunks[name] = "".join(out)
os.makedirs("/app/logs", exist_ok=True)
with gzip.open("/app/logs/access.log.2.gz", "wt") as f:
    f.write(chunks["access.log.2.gz"])
open("/app/logs/access.log.1", "w").write(chunks["access.log.1"])
open("/app/logs/access.log", "w").write(chunks["access.log"])
open("/app/logs/error.log", "w").write("[error] this is not an access log: 500 500 500\n")
