"""state.db's tables, as SQL, and its schema version: what `Store.open` creates in a new database
and what it changes in an older one on the way up (version 2: no secret-looking environment in any
record). Apart from the store's reads and writes so that the file's shape is read in one place.
"""
from __future__ import annotations

import json
import sqlite3

SCHEMA_VERSION = 2  # 2: records carry no secret-looking environment (scrubbed on upgrade)

# A record's request id as SQLite reads it, in the index and in the look-up alike (the same text, or
# the index is not used); guarded, so a record that is not JSON is set aside when read (records())
# rather than failing its insert or the index's creation at open.
REQUEST_ID_OF_RECORD = "CASE WHEN json_valid(record) THEN json_extract(record, '$.request.request_id') END"

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS jobs (
    id          TEXT PRIMARY KEY,
    num         INTEGER NOT NULL,          -- 12 for r-12: the order requests were made in
    phase       TEXT NOT NULL,
    holder      TEXT,                      -- attached_by: the instance streaming the job
    lease_until REAL,
    ended       REAL,
    updated     REAL NOT NULL DEFAULT 0,
    record      TEXT NOT NULL              -- models.JobRecord, models.dump_json()
);
CREATE INDEX IF NOT EXISTS jobs_phase ON jobs (phase);
-- (guarded: a row whose record is not JSON is set aside when read, never a failed insert or open)
CREATE INDEX IF NOT EXISTS jobs_request_id_valid ON jobs ({REQUEST_ID_OF_RECORD});
CREATE INDEX IF NOT EXISTS jobs_num ON jobs (num);
CREATE TABLE IF NOT EXISTS history (
    id          TEXT PRIMARY KEY,
    num         INTEGER NOT NULL,
    phase       TEXT NOT NULL,
    ended       REAL,
    record      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS history_ended ON history (ended);
CREATE INDEX IF NOT EXISTS history_num ON history (num);
CREATE TABLE IF NOT EXISTS meta (
    key         TEXT PRIMARY KEY,
    value       TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS changes (
    at          REAL NOT NULL,             -- when the change was made (res) or noticed (outside res)
    file        TEXT NOT NULL,             -- policy.toml, game.toml, queue.toml
    how         TEXT NOT NULL,             -- "res": through the writer, "outside": not
    who         TEXT NOT NULL DEFAULT '',  -- the calling process chain, for changes through res
    summary     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS changes_at ON changes (at);
"""


def scrub_secrets(conn: sqlite3.Connection) -> None:
    """Remove secret-looking variables (environ.is_secret) from every record's request, in `jobs` and
    `history`: what an older res wrote before its filter knew them."""
    from reconciler.config.environ import is_secret

    for table in ("jobs", "history"):
        for job_id, raw in conn.execute(f"SELECT id, record FROM {table}").fetchall():
            try:
                data = json.loads(raw)
                env = data["request"]["env"]
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(env, dict) and any(is_secret(str(k), str(v)) for k, v in env.items()):
                data["request"]["env"] = {k: v for k, v in env.items() if not is_secret(str(k), str(v))}
                conn.execute(f"UPDATE {table} SET record = ? WHERE id = ?", (json.dumps(data), job_id))
