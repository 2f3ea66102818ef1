"""The record store (DESIGN §2): `state.db`, SQLite in WAL mode, written only by the reconciler.

Tables:
  jobs     one row per request the reconciler knows: the whole models.JobRecord as JSON, plus the
           columns queries and compare-and-set need (phase, attachment holder, lease, times, id number)
  history  finished records pruned out of `jobs` (same shape), for `res hist`
  meta     key/value text: the schema version, the last good desired snapshot, counters, ...

Every write is a transaction (`BEGIN IMMEDIATE`, so two processes never deadlock upgrading a read to a
write); `put` is a compare-and-set on the stored phase and/or attachment holder, so a pass that was cut
off and is run again, or a second instance that lost its hold, cannot overwrite newer state. Readers
(`res status`, any CLI call) open the file read-only (`mode=ro`): that never creates the database,
never changes its bytes, and never waits for the writer (WAL).
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator
from urllib.parse import quote

# Every wait of this process for another's lock on state.db is bounded (config/deadline.py).
from reconciler.config.deadline import BUSY_TIMEOUT_S, wait_limits  # noqa: F401  (serve.py takes them from here)
from reconciler.config.deadline import wait_s as _wait_s
from reconciler.config.paths import Paths
from reconciler.recorded.errors import StoreError, StoreReplaced, store_error
from reconciler.recorded.schema import REQUEST_ID_OF_RECORD, SCHEMA, SCHEMA_VERSION, scrub_secrets

if TYPE_CHECKING:
    from reconciler.core.models import JobRecord, Phase

_TERMINAL = ("done", "refused", "cancelled")  # models.TERMINAL, kept here as text for SQL


class _Sentinel:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


ANY = _Sentinel("ANY")  # expect_holder default: do not compare the holder
ABSENT = _Sentinel("ABSENT")  # expect_phase=ABSENT: write only if there is no record yet


def _num(job_id: str) -> int:
    try:
        return int(job_id[2:]) if job_id.startswith("r-") else 0
    except ValueError:
        return 0


class Store:
    """state.db. Open with `Store.open(paths, readonly=False)`; close with `.close()` or `with`.

        records(phases=None) -> dict[str, JobRecord]       (by id, in id order)
        get(id) -> JobRecord | None
        put(record, expect_phase=None, expect_holder=ANY) -> bool
        delete(id, expect_phase=None) -> bool
        transaction()                                       (context manager; nests)
        get_meta(key, default=None) -> str | None ; set_meta(key, value: str)
        prune(before=None, ids=None) -> list[str]
        history(limit=None) -> list[JobRecord]              (latest ended first)
        max_number() -> int                                 (highest id number ever recorded)
    """

    def __init__(self, conn: sqlite3.Connection | None, path: Path, readonly: bool, busy_s: float = BUSY_TIMEOUT_S):
        self._conn = conn
        self.path = path
        self.readonly = readonly
        self.busy_s = busy_s  # the longest this store waits for another process's lock (also: wait_limits)
        self._busy_ms: int | None = None
        # Rows that records() could not read (a corrupt or hand-written row): id -> why. Skipped, so
        # that one bad row never blocks every command; a pass reports them and admits nothing for them.
        self.bad: dict[str, str] = {}
        self.identity: tuple[int, int] | None = None  # (device, inode) of the file opened
        self._depth = 0
        self._lock = threading.RLock()
        # Records already parsed, by id: (the row's JSON, the record). A pass reads every row each
        # time; a row unchanged since is not parsed again (records are never changed in place).
        self._parsed: dict[str, tuple[str, "JobRecord"]] = {}
        # Values a caller derives from this store and keeps with it (the loop's last saved desired state).
        self.memo: dict[str, Any] = {}

    # ---------------------------------------------------------- open / close

    @classmethod
    def open(cls, paths: Paths, readonly: bool = False, timeout: float = BUSY_TIMEOUT_S) -> "Store":
        """Open state.db. `readonly`: never creates the file or changes its bytes; a missing database
        is an empty store. Otherwise the state tree and the database are created (0700 / 0600)."""
        path = paths.db
        if os.path.islink(path):
            raise StoreError(f"{path}: is a symlink; refusing to use it")
        if readonly:
            if not path.exists():
                return cls(None, path, True)
            try:
                conn = sqlite3.connect(
                    f"file:{quote(str(path))}?mode=ro", uri=True, timeout=min(timeout, _wait_s()),
                    isolation_level=None, check_same_thread=False
                )
                conn.execute("PRAGMA query_only = ON")
            except sqlite3.Error as e:
                raise store_error(path, e) from None
            store = cls(conn, path, True, timeout)
            store._check_version()
            return store

        try:
            paths.ensure()
            # Create the file ourselves: 0600 and never through a symlink. SQLite gives the -wal and
            # -shm files the database file's mode.
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            os.close(fd)
        except OSError as e:
            raise StoreError(f"{path}: {' '.join(str(e.strerror or e).split())}") from None
        old = os.umask(0o077)
        try:
            conn = sqlite3.connect(str(path), timeout=min(timeout, _wait_s()), isolation_level=None,
                                   check_same_thread=False)
            # WAL: readers (every CLI call) never block the reconciler and never see half a
            # transaction. synchronous=NORMAL: in WAL mode a commit survives any crash of the process
            # (SIGKILL included: the fault tier) and the database is never corrupted; only an OS
            # crash or power cut can lose the last commits, and that also ends every job unit, while
            # what recorded them (log offset and spend in one transaction, exit records on disk) rolls
            # back together and is re-read. FULL would add an fsync to every commit (every lease
            # renewal) for no decision that could go wrong.
            store = cls(conn, path, False, timeout)
            store._bound()
            if store._current_schema() != str(SCHEMA_VERSION) or not store._has_index("jobs_request_id_valid"):
                # A new or older database: its tables made (or upgraded) in one write. One already
                # set up needs no write to be opened, so a process that holds state.db in a long
                # transaction does not stop a reader of it from opening it.
                conn.execute("PRAGMA journal_mode = WAL")
                with store.transaction():
                    for statement in SCHEMA.split(";"):  # (executescript would COMMIT first)
                        if statement.strip():
                            conn.execute(statement)
                    got = store._meta_raw("schema_version")
                    if got is None:
                        conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                        conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('db_id', ?)", (os.urandom(8).hex(),))
                    elif int(got) < 2:
                        scrub_secrets(conn)
                        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
            conn.execute("PRAGMA synchronous = NORMAL")
            store._check_version()
            st = os.stat(path)
            store.identity = (st.st_dev, st.st_ino)
        except sqlite3.Error as e:
            raise store_error(path, e) from None
        finally:
            os.umask(old)
        return store

    def _current_schema(self) -> str | None:
        """The schema version the database says it has (None: not set up yet), read without a write."""
        try:
            rows = self._conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
        except sqlite3.OperationalError as e:
            if "no such table" in str(e):
                return None
            raise
        return rows[0][0] if rows else None

    def _waited(self) -> float | None:
        """How long the last statement may have waited for another process's lock."""
        return None if self._busy_ms is None else self._busy_ms / 1000

    def _has_index(self, name: str) -> bool:
        rows = self._conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (name,)).fetchall()
        return bool(rows)

    def _bound(self) -> None:
        """The connection waits for another process's lock no longer than this process may now
        (wait_limits): a --timeout is kept whoever holds state.db."""
        if self._conn is None:
            return
        ms = int(min(self.busy_s, _wait_s()) * 1000)
        if ms != self._busy_ms:
            self._conn.execute(f"PRAGMA busy_timeout = {ms}")
            self._busy_ms = ms

    def check_same(self) -> None:
        """StoreReplaced unless the file at the path is still the one this connection writes to."""
        if self.identity is None:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise StoreReplaced(f"{self.path}: removed while res had it open; stopping: nothing more is "
                                "started, stopped or recorded by this process") from None
        if (st.st_dev, st.st_ino) != self.identity or st.st_size == 0:
            raise StoreReplaced(f"{self.path}: replaced or emptied while res had it open; stopping: nothing more "
                                "is started, stopped or recorded by this process")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_version(self) -> None:
        got = self._meta_raw("schema_version")
        if got is not None and int(got) > SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema version {got} is newer than this res understands ({SCHEMA_VERSION})")

    # ---------------------------------------------------------- low level

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        """Rows of a read; a read-only view of a database that is missing or not yet set up is empty."""
        if self._conn is None:
            return []
        with self._lock:
            try:
                self._bound()
                return self._conn.execute(sql, args).fetchall()
            except sqlite3.OperationalError as e:
                if self.readonly and "no such table" in str(e):
                    return []
                raise store_error(self.path, e, self._waited()) from None
            except sqlite3.Error as e:
                raise store_error(self.path, e, self._waited()) from None

    def _writable(self) -> sqlite3.Connection:
        if self.readonly or self._conn is None:
            raise StoreError(f"{self.path}: opened read-only")
        return self._conn

    def _meta_raw(self, key: str) -> str | None:
        rows = self._rows("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    @staticmethod
    def _load(job_id: str, raw: str) -> "JobRecord":
        from pydantic import ValidationError

        from reconciler.core.models import JobRecord, parse_json

        try:
            return parse_json(JobRecord, raw)
        except ValidationError as e:
            from reconciler.core.invalid import first

            raise StoreError(f"record {job_id}: {first(e.errors(), JobRecord)[1]}") from None
        except (ValueError, TypeError) as e:  # not even JSON
            raise StoreError(f"record {job_id}: {' '.join(str(e).split())[:200]}") from None

    # ---------------------------------------------------------- transactions

    @contextmanager
    def transaction(self) -> Iterator["Store"]:
        """One write transaction (BEGIN IMMEDIATE: the write lock is taken at once, waiting up to the
        busy timeout for another process). Nested calls join the outer transaction. An exception
        rolls everything back."""
        conn = self._writable()
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self
                finally:
                    self._depth -= 1
                return
            try:
                self._bound()
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise store_error(self.path, e, self._waited()) from None
            self._depth = 1
            try:
                yield self
            except BaseException as e:
                self._depth = 0
                _rollback(conn)
                if isinstance(e, sqlite3.Error):  # a statement of the transaction: said in res's words
                    raise store_error(self.path, e, self._waited()) from None
                raise
            self._depth = 0
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as e:
                _rollback(conn)
                raise store_error(self.path, e, self._waited()) from None

    # ---------------------------------------------------------- records

    def records(self, phases: Iterable["Phase | str"] | None = None) -> dict[str, "JobRecord"]:
        """All records by id (in id order), or only those in `phases`."""
        if phases is None:
            rows = self._rows("SELECT id, record FROM jobs ORDER BY num")
        else:
            wanted = [getattr(p, "value", p) for p in phases]
            if not wanted:
                return {}
            marks = ",".join("?" * len(wanted))
            rows = self._rows(f"SELECT id, record FROM jobs WHERE phase IN ({marks}) ORDER BY num", tuple(wanted))
        out, parsed = {}, self._parsed
        for job_id, raw in rows:
            known = parsed.get(job_id)
            if known is not None and known[0] == raw:
                out[job_id] = known[1]
                continue
            try:
                out[job_id] = self._load(job_id, raw)
            except StoreError as e:
                self.bad[job_id] = str(e)
            else:
                self.bad.pop(job_id, None)
                parsed[job_id] = (raw, out[job_id])
        if phases is None and len(parsed) > len(out):  # rows deleted since: forget them
            for gone in [j for j in parsed if j not in out]:
                del parsed[gone]
        return out

    def get(self, job_id: str) -> "JobRecord | None":
        rows = self._rows("SELECT record FROM jobs WHERE id = ?", (job_id,))
        if not rows:
            return None
        known = self._parsed.get(job_id)
        if known is not None and known[0] == rows[0][0]:
            return known[1]
        return self._load(job_id, rows[0][0])

    def with_request_id(self, request_id: str) -> dict[str, "JobRecord"]:
        """The records whose request carries this request id (`--request-id`), by id: one query (a
        scan of the JSON in SQLite, no record parsed but these), not a read of every record."""
        rows = self._rows(f"SELECT id, record FROM jobs WHERE {REQUEST_ID_OF_RECORD} = ? ORDER BY num", (request_id,))
        out = {}
        for job_id, raw in rows:
            try:
                out[job_id] = self._load(job_id, raw)
            except StoreError:
                continue
        return out

    def row(self, job_id: str) -> dict:
        """The record's row as plain JSON data, without building the record (no pydantic: what a
        waiting client looks up every few seconds); {} when there is none or it cannot be read."""
        rows = self._rows("SELECT record FROM jobs WHERE id = ?", (job_id,))
        try:
            found = json.loads(rows[0][0]) if rows else {}
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}

    def log_dir(self, job_id: str) -> str | None:
        """The record's log_dir, read from its row (`res run --wait` looks for a queued job's log
        where it was started)."""
        found = self.row(job_id).get("log_dir")
        return found if isinstance(found, str) and found else None

    def put(self, record: "JobRecord", expect_phase: Any = None, expect_holder: Any = ANY) -> bool:
        """Write `record` (insert or replace) in one transaction, if the stored row still is what the
        caller last saw; returns False (and writes nothing) if not:

        * expect_phase: None: any; ABSENT: only if there is no record yet; a Phase (or a collection of
          phases): the stored record must exist and be in it;
        * expect_holder: ANY (default): any; a string or None: the stored `attached_by` must equal it
          (a missing record counts as held by None).
        """
        from reconciler.core.models import dump_json

        conn = self._writable()
        data = dump_json(record)
        job_id = record.request.id
        with self.transaction():
            row = conn.execute("SELECT phase, holder FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if not _expected(row, expect_phase, expect_holder):
                return False
            conn.execute(
                "INSERT INTO jobs (id, num, phase, holder, lease_until, ended, updated, record)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (id) DO UPDATE SET num = excluded.num, phase = excluded.phase,"
                " holder = excluded.holder, lease_until = excluded.lease_until, ended = excluded.ended,"
                " updated = excluded.updated, record = excluded.record",
                (
                    job_id,
                    _num(job_id),
                    record.phase.value,
                    record.attached_by,
                    record.lease_until,
                    record.ended,
                    record.updated,
                    data,
                ),
            )
        return True

    def delete(self, job_id: str, expect_phase: Any = None) -> bool:
        """Remove a record (not into history). Same expect_phase rules as `put`; False if nothing
        was removed."""
        conn = self._writable()
        with self.transaction():
            row = conn.execute("SELECT phase, holder FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None or not _expected(row, expect_phase, ANY):
                return False
            conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
        return True

    def prune(self, before: float | None = None, ids: Iterable[str] | None = None) -> list[str]:
        """Move finished records (done, refused, cancelled) from `jobs` into `history`, in one
        transaction: those that ended before `before` (a record without an end time counts by its
        last update), and/or those with these `ids` (the planner's per-id `prune` actions); a record
        that is not finished is never moved. Returns the ids moved. Idempotent."""
        if before is None and ids is None:
            raise ValueError("prune needs `before` or `ids`")
        conn = self._writable()
        where = [f"phase IN ({','.join('?' * len(_TERMINAL))})"]
        args: list[Any] = list(_TERMINAL)
        if before is not None:
            where.append("COALESCE(ended, updated) < ?")
            args.append(before)
        if ids is not None:
            wanted = list(dict.fromkeys(ids))
            if not wanted:
                return []
            where.append(f"id IN ({','.join('?' * len(wanted))})")
            args.extend(wanted)
        with self.transaction():
            rows = conn.execute(
                f"SELECT id, num, phase, COALESCE(ended, updated), record FROM jobs WHERE {' AND '.join(where)} ORDER BY num",
                args,
            ).fetchall()
            conn.executemany(
                "INSERT OR REPLACE INTO history (id, num, phase, ended, record) VALUES (?, ?, ?, ?, ?)", rows
            )
            conn.executemany("DELETE FROM jobs WHERE id = ?", [(r[0],) for r in rows])
        return [r[0] for r in rows]

    def history_count(self) -> int:
        rows = self._rows("SELECT COUNT(*) FROM history")
        return int(rows[0][0]) if rows else 0

    def history(self, limit: int | None = None) -> list["JobRecord"]:
        """Pruned records, the latest ended first."""
        sql = "SELECT id, record FROM history ORDER BY ended DESC, num DESC"
        args: tuple = ()
        if limit is not None:
            sql += " LIMIT ?"
            args = (int(limit),)
        return [self._load(job_id, raw) for job_id, raw in self._rows(sql, args)]

    def max_number(self) -> int:
        """The highest id number ever recorded (live or history); 0 if none."""
        rows = self._rows("SELECT MAX(m) FROM (SELECT MAX(num) AS m FROM jobs UNION ALL SELECT MAX(num) FROM history)")
        return int(rows[0][0]) if rows and rows[0][0] is not None else 0

    # ---------------------------------------------------------- meta

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        got = self._meta_raw(key)
        return default if got is None else got

    def set_meta(self, key: str, value: str) -> None:
        """Store text (JSON is the caller's to encode)."""
        if not isinstance(value, str):
            raise TypeError("meta values are text")
        conn = self._writable()
        with self.transaction():
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def delete_meta(self, key: str) -> None:
        conn = self._writable()
        with self.transaction():
            conn.execute("DELETE FROM meta WHERE key = ?", (key,))

    def add_changes(self, rows: Iterable[tuple[float, str, str, str, str]]) -> None:
        """(at, file, how, who, summary) rows: changes to the user's own files (DESIGN §5.7)."""
        conn = self._writable()
        with self.transaction():
            conn.executemany("INSERT INTO changes (at, file, how, who, summary) VALUES (?, ?, ?, ?, ?)", list(rows))
            conn.execute("DELETE FROM changes WHERE rowid NOT IN (SELECT rowid FROM changes ORDER BY at DESC LIMIT 10000)")

    def changes(self, since: float = 0.0, files: Iterable[str] | None = None) -> list[tuple[float, str, str, str, str]]:
        """Changes noted at or after `since`, oldest first."""
        rows = self._rows("SELECT at, file, how, who, summary FROM changes WHERE at >= ? ORDER BY at, rowid", (since,))
        wanted = set(files) if files is not None else None
        return [r for r in rows if wanted is None or r[1] in wanted]

    def get_meta_json(self, key: str, default: Any = None) -> Any:
        got = self._meta_raw(key)
        return default if got is None else json.loads(got)

    def set_meta_json(self, key: str, value: Any) -> None:
        self.set_meta(key, json.dumps(value, separators=(",", ":"), sort_keys=True))


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back, where SQLite has not already (a full disk ends the transaction by itself)."""
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass


def _expected(row: tuple | None, expect_phase: Any, expect_holder: Any) -> bool:
    if expect_phase is ABSENT:
        if row is not None:
            return False
    elif expect_phase is not None:
        if row is None:
            return False
        if isinstance(expect_phase, (str, bytes)) or hasattr(expect_phase, "value"):
            wanted = {getattr(expect_phase, "value", expect_phase)}
        else:
            wanted = {getattr(p, "value", p) for p in expect_phase}
        if row[0] not in wanted:
            return False
    if expect_holder is not ANY:
        holder = row[1] if row is not None else None
        if holder != expect_holder:
            return False
    return True


def max_number(paths: Paths) -> int:
    """The highest id number state.db has recorded (0 if there is no database). Read-only."""
    with Store.open(paths, readonly=True, timeout=5.0) as store:
        return store.max_number()
