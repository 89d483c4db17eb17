#!/usr/bin/env bash
set -euo pipefail
cat > /app/import_events.py <<'PY'
import csv, datetime as dt, re, sqlite3, sys

HEADER = ["id", "user_id", "kind", "amount", "updated_at"]
AMOUNT = re.compile(r"(-?)([0-9]+)(?:\.([0-9]{1,2}))?")
STAMP = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(Z|[+-][0-9]{2}:[0-9]{2})")


def parse_amount(s):
    m = AMOUNT.fullmatch(s)
    if not m:
        return None
    cents = int(m.group(2)) * 100 + int((m.group(3) or "0").ljust(2, "0"))
    return -cents if m.group(1) else cents


def parse_stamp(s):
    m = STAMP.fullmatch(s)
    if not m:
        return None
    try:
        t = dt.datetime(*(int(m.group(i)) for i in range(1, 7)))
    except ValueError:
        return None
    off = m.group(7)
    if off != "Z":
        hh, mm = int(off[1:3]), int(off[4:6])
        if hh > 23 or mm > 59:
            return None
        delta = dt.timedelta(hours=hh, minutes=mm)
        t = t - delta if off[0] == "+" else t + delta
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def main(db_path, csv_path):
    with open(csv_path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    if not rows or [c.strip() for c in rows[0]] != HEADER:
        print("bad or missing header", file=sys.stderr)
        return 2
    db = sqlite3.connect(db_path)
    counts = dict(inserted=0, updated=0, skipped=0, rejected=0)
    with db:
        db.execute("""CREATE TABLE IF NOT EXISTS events (
  id TEXT PRIMARY KEY,
  user_id INTEGER NOT NULL,
  kind TEXT NOT NULL,
  amount_cents INTEGER NOT NULL,
  updated_at TEXT NOT NULL
)""")
        for raw in rows[1:]:
            if not raw or (len(raw) == 1 and not raw[0].strip()):
                continue
            rec = [c.strip() for c in raw]
            if len(rec) != 5:
                counts["rejected"] += 1
                continue
            rid, uid, kind, amount, stamp = rec
            cents, utc = parse_amount(amount), parse_stamp(stamp)
            if (not rid or not re.fullmatch(r"[0-9]+", uid) or kind not in ("purchase", "refund", "signup")
                    or cents is None or utc is None):
                counts["rejected"] += 1
                continue
            old = db.execute("SELECT updated_at FROM events WHERE id = ?", (rid,)).fetchone()
            if old is None:
                db.execute("INSERT INTO events VALUES (?,?,?,?,?)", (rid, int(uid), kind, cents, utc))
                counts["inserted"] += 1
            elif utc > old[0]:
                db.execute("UPDATE events SET user_id=?, kind=?, amount_cents=?, updated_at=? WHERE id=?",
                           (int(uid), kind, cents, utc, rid))
                counts["updated"] += 1
            else:
                counts["skipped"] += 1
    print(" ".join(f"{k}={v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
PY
