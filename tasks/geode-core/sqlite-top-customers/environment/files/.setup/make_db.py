"""Creates /app/shop.db deterministically (own LCG, no dependence on random's algorithm)."""
import sqlite3

state = 20240601
def rnd(n):
    global state
    state = (state * 1103515245 + 12345) % 2**31
    return state % n

FIRST = ["Ana", "Bo", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jun", "Kai", "Lena"]
LAST = ["Silva", "Novak", "Okafor", "Ibrahim", "Kowalski", "Tanaka", "Moreau", "Berg"]
COUNTRIES = ["PT", "DE", "NG", "JP", "FR", "SE", "BR", "US"]
PRODUCTS = [("widget", 1999), ("gadget", 4550), ("doohickey", 799), ("gizmo", 12900), ("sprocket", 350)]

db = sqlite3.connect("/app/shop.db")
db.executescript("""
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT, country TEXT);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
                     ordered_at TEXT NOT NULL, status TEXT NOT NULL);
CREATE TABLE order_items (order_id INTEGER NOT NULL REFERENCES orders(id), product TEXT NOT NULL,
                          quantity INTEGER NOT NULL, unit_price_cents INTEGER NOT NULL);
""")
for cid in range(1, 41):
    name = f"{FIRST[rnd(len(FIRST))]} {LAST[rnd(len(LAST))]}"
    if cid == 17:
        name = "Smith, Jane"
    if cid == 23:
        name = 'Dmitri "Dima" Ivanov'
    db.execute("INSERT INTO customers VALUES (?,?,?,?)",
               (cid, name, f"user{cid}@example.com", COUNTRIES[rnd(len(COUNTRIES))]))
oid = 0
def order(cid, when, status, items):
    global oid
    oid += 1
    db.execute("INSERT INTO orders VALUES (?,?,?,?)", (oid, cid, when, status))
    for prod, qty, price in items:
        db.execute("INSERT INTO order_items VALUES (?,?,?,?)", (oid, prod, qty, price))
for _ in range(400):
    cid = 1 + rnd(40)
    year = 2022 + rnd(3)
    when = f"{year}-{1 + rnd(12):02d}-{1 + rnd(28):02d}T{rnd(24):02d}:{rnd(60):02d}:00"
    status = ["paid", "paid", "paid", "refunded", "pending"][rnd(5)]
    items = []
    for _ in range(1 + rnd(3)):
        prod, price = PRODUCTS[rnd(len(PRODUCTS))]
        items.append((prod, 1 + rnd(4), price))
    order(cid, when, status, items)
# boundary cases
order(17, "2023-12-31T23:59:59", "paid", [("gizmo", 9, 12900)])
order(17, "2024-01-01T00:00:00", "paid", [("gizmo", 50, 12900)])
order(23, "2022-12-31T23:59:59", "paid", [("gizmo", 50, 12900)])
order(23, "2023-01-01T00:00:00", "paid", [("gizmo", 10, 12900), ("sprocket", 3, 350)])
order(5, "2023-06-15T12:00:00", "refunded", [("gizmo", 80, 12900)])
order(8, "2023-03-03T08:00:00", "pending", [("gizmo", 80, 12900)])
db.commit()
