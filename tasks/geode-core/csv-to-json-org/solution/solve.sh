#!/usr/bin/env bash
set -euo pipefail
python3 - <<'PY'
import csv, json
from collections import defaultdict
with open("/app/employees.csv", newline="", encoding="utf-8") as f:
    rows = [{k.strip(): (v or "").strip() for k, v in r.items()} for r in csv.DictReader(f)]
names = {r["id"]: r["name"] for r in rows}
deps = defaultdict(list)
for r in rows:
    deps[r["department"] or "Unassigned"].append(r)
out = []
for dep in sorted(deps):
    members = deps[dep]
    total = sum(int(r["salary"]) for r in members)
    oldest = min(members, key=lambda r: (r["start_date"], int(r["id"])))
    out.append({
        "name": dep,
        "headcount": len(members),
        "total_salary": total,
        "avg_salary": round(total / len(members), 2),
        "max_tenure_employee": int(oldest["id"]),
        "employees": [
            {"id": int(r["id"]), "name": r["name"], "title": r["title"], "salary": int(r["salary"]),
             "manager": names[r["manager_id"]] if r["manager_id"] else None}
            for r in sorted(members, key=lambda r: r["name"])
        ],
    })
with open("/app/org.json", "w", encoding="utf-8") as f:
    json.dump({"departments": out, "total_headcount": len(rows)}, f, indent=2, ensure_ascii=False)
    f.write("\n")
PY
