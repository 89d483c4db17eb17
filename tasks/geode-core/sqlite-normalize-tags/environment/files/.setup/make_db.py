import sqlite3
TAGS = [
    " Python, SQL ,python,,web ", "Machine  Learning, AI", "C++,c++ , Systems", None, "   ",
    "Web,WEB, web", "data science, Data\tScience,DATA SCIENCE", "Café, cafe", "sql", "ai,Python",
    "rust, Systems , wasm", "", "python", "DevOps, CI/CD, ci/cd ", "Éclair,zeta,Alpha", "web, python, sql, ai",
    "Kubernetes,devops", ",,,", "history", "Testing, testing , TESTING",
]
db = sqlite3.connect("/app/blog.db")
db.execute("CREATE TABLE posts (id INTEGER PRIMARY KEY, title TEXT NOT NULL, body TEXT, tags TEXT)")
for i, tags in enumerate(TAGS):
    pid = 100 + 7 * i
    db.execute("INSERT INTO posts VALUES (?,?,?,?)", (pid, f"Post number {i + 1}", f"Body of post {i + 1}.\nSecond line.", tags))
db.commit()
