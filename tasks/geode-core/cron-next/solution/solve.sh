#!/usr/bin/env bash
set -euo pipefail
cat > /app/cronnext.py <<'PY'
import datetime as dt
import re
import sys

MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
MACROS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
          "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
          "@hourly": "0 * * * *"}


class CronError(Exception):
    pass


def value(tok, lo, hi, names):
    if names and tok.upper() in names:
        return names.index(tok.upper()) + (1 if names is MONTHS else 0)
    if not re.fullmatch(r"[0-9]+", tok):
        raise CronError(f"bad value {tok!r}")
    v = int(tok)
    if not lo <= v <= hi:
        raise CronError(f"value {v} out of range {lo}-{hi}")
    return v


def field(text, lo, hi, names=None):
    out = set()
    for item in text.split(","):
        if not item:
            raise CronError("empty item")
        rng, step = item, 1
        if "/" in item:
            rng, s = item.split("/", 1)
            if not re.fullmatch(r"[0-9]+", s) or int(s) < 1:
                raise CronError(f"bad step in {item!r}")
            step = int(s)
        if rng == "*":
            a, b = lo, hi
        elif "-" in rng:
            x, y = rng.split("-", 1)
            a, b = value(x, lo, hi, names), value(y, lo, hi, names)
            if a > b:
                raise CronError(f"bad range {rng!r}")
        else:
            a = value(rng, lo, hi, names)
            b = hi if "/" in item else a
        out.update(range(a, b + 1, step))
    return out


def parse(expr):
    expr = MACROS.get(expr.strip(), expr)
    parts = expr.split()
    if len(parts) != 5:
        raise CronError("expected 5 fields")
    minute = field(parts[0], 0, 59)
    hour = field(parts[1], 0, 23)
    dom = field(parts[2], 1, 31)
    month = field(parts[3], 1, 12, MONTHS)
    dow = {d % 7 for d in field(parts[4], 0, 7, DAYS)}
    return minute, hour, dom, month, dow, parts[2].startswith("*"), parts[4].startswith("*")


def main(argv):
    if len(argv) != 3:
        raise CronError("usage: cronnext.py EXPRESSION START COUNT")
    minute, hour, dom, month, dow, dom_star, dow_star = parse(argv[0])
    try:
        start = dt.datetime.strptime(argv[1], "%Y-%m-%d %H:%M")
    except ValueError:
        raise CronError("bad START")
    if not re.fullmatch(r"[0-9]+", argv[2]) or int(argv[2]) < 1:
        raise CronError("bad COUNT")
    count = int(argv[2])
    try:
        end = start.replace(year=start.year + 10)
    except ValueError:  # 29 February
        end = start.replace(year=start.year + 10, day=28) + dt.timedelta(days=1)
    found = []
    day = start.date()
    while len(found) < count:
        d_ok_dom = day.day in dom
        d_ok_dow = (day.isoweekday() % 7) in dow
        if dom_star or dow_star:
            ok = d_ok_dom and d_ok_dow
        else:
            ok = d_ok_dom or d_ok_dow
        if ok and day.month in month:
            for h in sorted(hour):
                for m in sorted(minute):
                    t = dt.datetime(day.year, day.month, day.day, h, m)
                    if t <= start:
                        continue
                    if t >= end:
                        break
                    found.append(t)
                    if len(found) == count:
                        break
                if len(found) == count:
                    break
        day += dt.timedelta(days=1)
        if dt.datetime(day.year, day.month, day.day) >= end:
            break
    return found


if __name__ == "__main__":
    try:
        times = main(sys.argv[1:])
    except CronError as e:
        print(f"cronnext: {e}", file=sys.stderr)
        sys.exit(2)
    for t in times:
        print(t.strftime("%Y-%m-%d %H:%M"))
PY
