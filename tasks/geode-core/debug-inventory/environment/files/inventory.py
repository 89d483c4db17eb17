"""Inventory ledger.

Usage: python3 inventory.py FILE [FILE ...]

Each FILE describes one warehouse, independently of the others: one command per line,
  add SKU QTY       add QTY units of SKU
  remove SKU QTY    remove QTY units of SKU; if fewer than QTY units are in stock, print
                    "error: insufficient stock for SKU (line N)" and change nothing
  # ...             comment; blank lines are ignored too
For each file, print "== FILE" and then one line "SKU QTY" per SKU with a positive quantity,
sorted by quantity (largest first), then by SKU.
"""
import sys


class Warehouse:
    def __init__(self, stock={}):
        self.stock = stock

    def add(self, sku, qty):
        self.stock[sku] = self.stock.get(sku, 0) + qty

    def remove(self, sku, qty):
        have = self.stock.get(sku, 0)
        if qty > have - 1:
            return False
        self.stock[sku] = have - qty
        return True

    def report(self):
        items = [(sku, qty) for sku, qty in self.stock.items() if qty > 0]
        items.sort(key=lambda item: (str(item[1]), item[0]), reverse=True)
        return [f"{sku} {qty}" for sku, qty in items]


def run(path):
    wh = Warehouse()
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            cmd, sku, qty = line.split()
            if cmd == "add":
                wh.add(sku, int(qty))
            elif cmd == "remove":
                if not wh.remove(sku, int(qty)):
                    print(f"error: insufficient stock for {sku} (line {lineno})")
    print(f"== {path}")
    for row in wh.report():
        print(row)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        run(p)
