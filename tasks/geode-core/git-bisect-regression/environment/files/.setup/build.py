"""Builds /app/project: 48 commits, one of which introduces a regression."""
import os, subprocess

REPO = "/app/project"
os.makedirs(REPO, exist_ok=True)
os.chdir(REPO)

def git(*args):
    subprocess.run(["git", *args], check=True, stdout=subprocess.DEVNULL)

git("config", "--global", "user.email", "dev@example.com")
git("config", "--global", "user.name", "GEODE Dev")
git("init", "-q", "-b", "main")

GOOD_SORT = "    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))\n"
BAD_SORT = "    ranked = sorted(counts.items(), key=lambda kv: -kv[1])\n"

def textstats(sort_line, doc_note):
    return (
        '"""Small text statistics helpers."""\n'
        "import re\n\n"
        f"# {doc_note}\n"
        "WORD = re.compile(r\"[a-z']+\")\n\n\n"
        "def words(text):\n"
        "    return WORD.findall(text.lower())\n\n\n"
        "def word_count(text):\n"
        "    return len(words(text))\n\n\n"
        "def line_count(text):\n"
        "    return len(text.splitlines())\n\n\n"
        "def top_words(text, n):\n"
        '    """The n most frequent words; ties broken alphabetically."""\n'
        "    counts = {}\n"
        "    for w in words(text):\n"
        "        counts[w] = counts.get(w, 0) + 1\n"
        + sort_line +
        "    return [w for w, _ in ranked[:n]]\n"
    )

TEST = '''import sys
from textstats import word_count, line_count, top_words

def main():
    assert word_count("Hello, world! Hello.") == 3
    assert line_count("a\\nb\\nc") == 3
    assert top_words("b a c b a", 2) == ["a", "b"], top_words("b a c b a", 2)
    assert top_words("zeta alpha zeta beta", 3) == ["zeta", "alpha", "beta"]
    print("ok")

if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print("FAIL", e)
        sys.exit(1)
'''

SUBJECTS = [
    "Add contributor notes", "Tweak wording in docs", "Refresh examples", "Housekeeping",
    "Update changelog", "Improve comments", "Reformat code", "Adjust docs layout",
    "Polish README", "Small cleanups", "Rename internal notes", "Update notes",
]
BAD_INDEX = 31  # 1-based commit number that introduces the regression
TOTAL = 48

sort_line = GOOD_SORT
for i in range(1, TOTAL + 1):
    if i == BAD_INDEX:
        sort_line = BAD_SORT
        subject = "Micro-optimize hot paths (#%d)" % (100 + i)
    elif i == 1:
        subject = "Initial import (#101)"
    else:
        subject = "%s (#%d)" % (SUBJECTS[i % len(SUBJECTS)], 100 + i)
    note = "revision %d" % (i // 3)
    with open("textstats.py", "w") as f:
        f.write(textstats(sort_line, note))
    with open("test_textstats.py", "w") as f:
        f.write(TEST)
    if i == 1:
        with open(".gitignore", "w") as f:
            f.write("__pycache__/\n*.pyc\n")
    with open("NOTES.md", "a") as f:
        f.write("- note %d\n" % i)
    if i % 5 == 0:
        with open("CHANGELOG.md", "a") as f:
            f.write("## %d.%d\n" % (i // 10, i % 10))
    git("add", "-A")
    env = dict(os.environ,
               GIT_AUTHOR_DATE="2024-01-%02dT%02d:00:00Z" % (1 + i // 24, i % 24),
               GIT_COMMITTER_DATE="2024-01-%02dT%02d:00:00Z" % (1 + i // 24, i % 24))
    subprocess.run(["git", "commit", "-q", "-m", subject], check=True, env=env)
