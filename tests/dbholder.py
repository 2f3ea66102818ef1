"""Another process holding state.db in an exclusive transaction, for as long as its stdin is open:
`python3 tests/dbholder.py <state.db>` prints `holding` once it holds it (tests/hostile, bench t).
Not res's code: what a user's own sqlite3 session, a backup tool or a stuck process would do."""
import sqlite3
import sys

conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('held', 'yes')")
print("holding", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
