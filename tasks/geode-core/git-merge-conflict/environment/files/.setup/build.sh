#!/bin/sh
set -eu
git config --global user.email "dev@example.com"
git config --global user.name "GEODE Dev"
mkdir -p /app/shop
cd /app/shop
git init -q -b main
c() { GIT_AUTHOR_DATE="$1" GIT_COMMITTER_DATE="$1" git commit -q -m "$2"; }
printf '__pycache__/\n*.pyc\n' > .gitignore
cat > prices.py <<'PY'
"""Price list and order totals for the corner shop."""

PRICES = {
    "apple": 0.50,
    "bread": 2.25,
    "milk": 1.20,
}

TAX_RATE = 0.07


def subtotal(items):
    """items: dict of product name -> quantity."""
    return sum(PRICES[name] * qty for name, qty in items.items())


def total(items):
    """Total with tax, rounded to cents."""
    amount = subtotal(items)
    return round(amount * (1 + TAX_RATE), 2)
PY
printf '# Changelog\n\n## Unreleased\n\n## 1.0.0\n\n- First release\n' > CHANGELOG.md
git add -A && c 2024-05-01T09:00:00Z "Initial price list"
git checkout -q -b feature/discounts
python3 - <<'PY'
s = open("prices.py").read()
s = s.replace('    "bread": 2.25,\n', '    "bread": 2.25,\n    "coffee": 6.40,\n')
open("prices.py", "w").write(s)
PY
git add -A && c 2024-05-02T09:00:00Z "Add coffee"
python3 - <<'PY'
s = open("prices.py").read()
s = s.replace('''def total(items):
    """Total with tax, rounded to cents."""
    amount = subtotal(items)
''', '''def discount(amount):
    """10% off orders of 20.00 or more (before tax), rounded to cents."""
    return round(amount * 0.10, 2) if amount >= 20 else 0.0


def total(items):
    """Total with discount and tax, rounded to cents."""
    amount = subtotal(items)
    amount -= discount(amount)
''')
open("prices.py", "w").write(s)
s = open("CHANGELOG.md").read()
s = s.replace("## Unreleased\n\n", "## Unreleased\n\n- Add coffee and a 10% discount on orders of 20.00 or more\n")
open("CHANGELOG.md", "w").write(s)
PY
git add -A && c 2024-05-03T09:00:00Z "Add volume discount"
git checkout -q main
python3 - <<'PY'
s = open("prices.py").read()
s = s.replace('    "bread": 2.25,\n', '    "bread": 2.25,\n    "cheese": 4.75,\n    "eggs": 3.10,\n')
s = s.replace("TAX_RATE = 0.07", "TAX_RATE = 0.08")
open("prices.py", "w").write(s)
s = open("CHANGELOG.md").read()
s = s.replace("## Unreleased\n\n", "## Unreleased\n\n- Add cheese and eggs; sales tax is now 8%\n")
open("CHANGELOG.md", "w").write(s)
PY
git add -A && c 2024-05-04T09:00:00Z "Add dairy products, raise tax to 8%"
