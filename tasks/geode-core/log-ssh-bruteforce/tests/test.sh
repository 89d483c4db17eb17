#!/usr/bin/env bash
# Verifier for geode/log-ssh-bruteforce.
# The exit code is ignored: only /logs/verifier/reward.txt counts ("1" = every check passed).
set -u
REWARD_DIR=/logs/verifier
mkdir -p "$REWARD_DIR"
# Never trust anything left behind in the verifier folder.
rm -f "$REWARD_DIR/reward.txt" "$REWARD_DIR/reward.json" "$REWARD_DIR/ctrf.json"
echo 0 > "$REWARD_DIR/reward.txt"
PASSED=0
FAILED=0
RESULTS=""
WORK=$(mktemp -d /tmp/geode-verify.XXXXXX)
cd /app 2>/dev/null || true

# check "name" command [args...]: runs the command in a subshell, records PASS/FAIL.
check() {
  local name=$1
  shift
  if ( "$@" ) </dev/null >"$WORK/check.out" 2>&1; then
    echo "PASS: $name"
    PASSED=$((PASSED + 1))
    RESULTS+="passed"$'\t'"$name"$'\n'
  else
    echo "FAIL: $name"
    head -n 20 "$WORK/check.out" | sed 's/^/    /'
    FAILED=$((FAILED + 1))
    RESULTS+="failed"$'\t'"$name"$'\n'
  fi
}

# same_output EXPECTED_FILE ACTUAL_FILE: exact comparison with a diff on failure.
same_output() {
  if cmp -s "$1" "$2"; then return 0; fi
  echo "--- expected vs actual (diff):"
  diff "$1" "$2" | head -n 15
  return 1
}

cat > "$WORK/gen.py" <<'GEODE_EOF'
import datetime as dt, sys
out = []
def at(t, msg, prog="sshd[4242]"):
    out.append(f"{t.strftime('%b')} {t.day:>2} {t.strftime('%H:%M:%S')} gw {prog}: {msg}\n")
def F(t, ip, user="root", invalid=False):
    at(t, f"Failed password for {'invalid user ' if invalid else ''}{user} from {ip} port {40000 + t.second} ssh2")
T = lambda s: dt.datetime.strptime("2024 " + s, "%Y %b %d %H:%M:%S")
ev = []
def add(t, fn): ev.append((t, len(ev), fn))
# A: 4 in window, 5th just outside; later a real burst
for s in ["Feb 28 10:00:00", "Feb 28 10:02:00", "Feb 28 10:04:00", "Feb 28 10:06:00", "Feb 28 10:10:01"]:
    add(T(s), lambda t: F(t, "198.51.100.20", "oracle"))
for s in ["Feb 28 13:00:00", "Feb 28 13:01:00", "Feb 28 13:02:00", "Feb 28 13:03:00", "Feb 28 13:04:00", "Feb 28 13:05:00"]:
    add(T(s), lambda t: F(t, "198.51.100.20", "postgres", True))
add(T("Feb 28 12:00:00"), lambda t: at(t, "Accepted password for oracle from 198.51.100.20 port 5000 ssh2"))
# B: exactly 600 s -> flagged; accepted later -> compromised
for s in ["Feb 28 15:00:00", "Feb 28 15:01:40", "Feb 28 15:03:20", "Feb 28 15:05:00", "Feb 28 15:10:00"]:
    add(T(s), lambda t: F(t, "203.0.113.77", "admin", True))
add(T("Mar  2 09:00:00"), lambda t: at(t, "Accepted publickey for deploy from 203.0.113.77 port 5001 ssh2: RSA SHA256:xyz"))
# C: 601 s -> not flagged
for s in ["Feb 28 16:00:00", "Feb 28 16:00:01", "Feb 28 16:00:02", "Feb 28 16:00:03", "Feb 28 16:10:01"]:
    add(T(s), lambda t: F(t, "192.0.2.200", "test"))
# D: one failure + "message repeated 4 times"
add(T("Feb 28 18:00:00"), lambda t: F(t, "203.0.113.9", "ubuntu"))
add(T("Feb 28 18:09:00"), lambda t: at(t, "message repeated 4 times: [ Failed password for invalid user pi from 203.0.113.9 port 1234 ssh2]"))
# E: across midnight into the leap day and March; accepted only before the window -> not compromised
add(T("Feb 29 20:00:00"), lambda t: at(t, "Accepted password for bob from 10.1.2.3 port 6000 ssh2"))
for s in ["Feb 29 23:56:00", "Feb 29 23:58:30", "Mar  1 00:01:00", "Mar  1 00:03:00", "Mar  1 00:05:59"]:
    add(T(s), lambda t: F(t, "10.1.2.3", "bob"))
# F and G: same window_start -> sorted by ip string
for ip in ["10.9.0.5", "10.10.0.5"]:
    for s in ["Mar 10 08:00:00", "Mar 10 08:00:10", "Mar 10 08:00:20", "Mar 10 08:00:30", "Mar 10 08:00:40"]:
        add(T(s), lambda t, ip=ip: F(t, ip, "invalid", True))
add(T("Mar 10 08:00:40"), lambda t: at(t, "Accepted password for invalid from 10.10.0.5 port 7000 ssh2"))
# noise: other programs and other sshd messages
for s in ["Mar  5 11:00:00", "Mar  5 11:00:01", "Mar  5 11:00:02", "Mar  5 11:00:03", "Mar  5 11:00:04", "Mar  5 11:00:05"]:
    add(T(s), lambda t: at(t, "Failed password for root from 172.16.0.1 port 22 ssh2", prog="sudo[99]"))
    add(T(s), lambda t: at(t, "Connection closed by authenticating user root 172.16.0.2 port 22 [preauth]"))
    add(T(s), lambda t: at(t, "Invalid user guest from 172.16.0.3 port 22"))
ev.sort(key=lambda e: (e[0], e[1]))
for t, _, fn in ev:
    fn(t)
open(sys.argv[1], "w").write("".join(out))
quiet = [l for l in out if "172.16" in l or "192.0.2.200" in l]
open(sys.argv[2], "w").write("".join(quiet))
GEODE_EOF
cat > "$WORK/e1.json" <<'GEODE_EOF'
[
  {
    "ip": "198.51.100.20",
    "failures": 11,
    "window_start": "2024-02-28T13:00:00",
    "users": [
      "oracle",
      "postgres"
    ],
    "compromised": false
  },
  {
    "ip": "203.0.113.77",
    "failures": 5,
    "window_start": "2024-02-28T15:00:00",
    "users": [
      "admin"
    ],
    "compromised": true
  },
  {
    "ip": "203.0.113.9",
    "failures": 5,
    "window_start": "2024-02-28T18:00:00",
    "users": [
      "pi",
      "ubuntu"
    ],
    "compromised": false
  },
  {
    "ip": "10.1.2.3",
    "failures": 5,
    "window_start": "2024-02-29T23:56:00",
    "users": [
      "bob"
    ],
    "compromised": false
  },
  {
    "ip": "10.10.0.5",
    "failures": 5,
    "window_start": "2024-03-10T08:00:00",
    "users": [
      "invalid"
    ],
    "compromised": true
  },
  {
    "ip": "10.9.0.5",
    "failures": 5,
    "window_start": "2024-03-10T08:00:00",
    "users": [
      "invalid"
    ],
    "compromised": false
  }
]
GEODE_EOF
python3 "$WORK/gen.py" "$WORK/h1.log" "$WORK/h2.log"
P=/app/detect_bruteforce.py
cat > "$WORK/cmp.py" <<'PY'
import json, sys
want = json.load(open(sys.argv[1]))
try:
    got = json.load(open(sys.argv[2]))
except Exception as e:
    print("output is not valid JSON:", e); sys.exit(1)
mode = sys.argv[3]
if mode == "ips":
    a, b = [o["ip"] for o in want], [o.get("ip") for o in got] if isinstance(got, list) else None
    if a != b:
        print("want", a); print("got ", b); sys.exit(1)
elif got != want:
    for w, g in zip(want, got):
        if w != g:
            print("want", w); print("got ", g); break
    else:
        print(f"want {len(want)} objects, got {len(got)}")
    sys.exit(1)
PY
t_example() {
  timeout 20 python3 "$P" /app/auth.log > "$WORK/ex.json" || return 1
  printf '[{"ip": "203.0.113.5", "failures": 5, "window_start": "2024-03-03T14:02:11", "users": ["admin", "root"], "compromised": true}]' > "$WORK/ex_want.json"
  python3 "$WORK/cmp.py" "$WORK/ex_want.json" "$WORK/ex.json" full
}
t_ips() { timeout 20 python3 "$P" "$WORK/h1.log" > "$WORK/o1.json" && python3 "$WORK/cmp.py" "$WORK/e1.json" "$WORK/o1.json" ips; }
t_full() { timeout 20 python3 "$P" "$WORK/h1.log" > "$WORK/o1.json" && python3 "$WORK/cmp.py" "$WORK/e1.json" "$WORK/o1.json" full; }
t_none() { timeout 20 python3 "$P" "$WORK/h2.log" > "$WORK/o2.json" && echo '[]' > "$WORK/e2.json" && python3 "$WORK/cmp.py" "$WORK/e2.json" "$WORK/o2.json" full; }
check "example /app/auth.log" t_example
check "hidden log: right attackers in the right order" t_ips
check "hidden log: failures, window_start, users, compromised" t_full
check "hidden log without attackers prints []" t_none

# ---------------------------------------------------------------- summary and reward
echo "$PASSED passed, $FAILED failed"
printf '%s' "$RESULTS" | python3 -c '
import json, sys
tests = []
for line in sys.stdin.read().splitlines():
    if "\t" in line:
        status, name = line.split("\t", 1)
        tests.append({"name": name, "status": status, "duration": 0})
passed = sum(t["status"] == "passed" for t in tests)
report = {"results": {"tool": {"name": "geode-checks"},
          "summary": {"tests": len(tests), "passed": passed, "failed": len(tests) - passed,
                      "pending": 0, "skipped": 0, "other": 0},
          "tests": tests}}
print(json.dumps(report, indent=2))
' > "$REWARD_DIR/ctrf.json" 2>/dev/null || rm -f "$REWARD_DIR/ctrf.json"
rm -rf "$WORK"
if [ "$FAILED" -eq 0 ] && [ "$PASSED" -gt 0 ]; then
  echo 1 > "$REWARD_DIR/reward.txt"
else
  echo 0 > "$REWARD_DIR/reward.txt"
fi
