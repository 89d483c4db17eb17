#!/usr/bin/env bash
set -euo pipefail
cd /app
python3 - <<'PY'
p = "/app/inventory.py"
s = open(p).read()
s = s.replace("""    def __init__(self, stock={}):
        self.stock = stock""", """    def __init__(self, stock=None):
        self.stock = dict(stock) if stock else {}""")
s = s.replace("if qty > have - 1:", "if qty > have:")
s = s.replace("""        items.sort(key=lambda item: (str(item[1]), item[0]), reverse=True)""",
              """        items.sort(key=lambda item: (-item[1], item[0]))""")
open(p, "w").write(s)
PY
