#!/usr/bin/env bash
set -euo pipefail
python3 - <<'PY'
import csv, datetime as dt, json
from decimal import Decimal

def fmt(cents):
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}{cents // 100}.{cents % 100:02d}"

bank = []
with open("/app/bank.csv", newline="", encoding="utf-8") as f:
    r = csv.reader(f, delimiter=";")
    next(r)
    for line, (date, desc, amount) in enumerate(r, start=2):
        cents = int(Decimal(amount.replace(".", "").replace(",", ".")) * 100)
        bank.append({"line": line, "date": dt.datetime.strptime(date, "%d/%m/%Y").date(),
                     "description": desc, "cents": cents})
ledger = []
with open("/app/ledger.csv", newline="", encoding="utf-8") as f:
    for row in csv.DictReader(f):
        debit = int(Decimal(row["debit"] or "0") * 100)
        credit = int(Decimal(row["credit"] or "0") * 100)
        ledger.append({"ref": row["ref"], "date": dt.date.fromisoformat(row["date"]), "cents": credit - debit})

used, matched, unmatched_ledger = set(), [], []
for e in sorted(ledger, key=lambda e: (e["date"], e["ref"])):
    cands = [b for b in bank if b["line"] not in used and b["cents"] == e["cents"]
             and abs((b["date"] - e["date"]).days) <= 3]
    if not cands:
        unmatched_ledger.append(e["ref"])
        continue
    b = min(cands, key=lambda b: (abs((b["date"] - e["date"]).days), b["date"], b["line"]))
    used.add(b["line"])
    matched.append({"ref": e["ref"], "bank_line": b["line"], "amount": fmt(e["cents"]),
                    "days_apart": abs((b["date"] - e["date"]).days)})
bank_total = sum(b["cents"] for b in bank)
ledger_total = sum(e["cents"] for e in ledger)
out = {
    "matched": sorted(matched, key=lambda m: m["ref"]),
    "unmatched_ledger": sorted(unmatched_ledger),
    "unmatched_bank": [{"line": b["line"], "date": b["date"].isoformat(), "description": b["description"],
                        "amount": fmt(b["cents"])} for b in bank if b["line"] not in used],
    "bank_total": fmt(bank_total),
    "ledger_total": fmt(ledger_total),
    "difference": fmt(bank_total - ledger_total),
}
with open("/app/reconciliation.json", "w") as f:
    json.dump(out, f, indent=2)
    f.write("\n")
PY
