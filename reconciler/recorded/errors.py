"""state.db's failures, said in res's words: the file cannot be used (StoreError), it was replaced
under an open connection (StoreReplaced), another process holds it longer than this one may wait
(StoreBusy, naming the holder), and SQLite's result codes as a line (store_error). Apart from the
store so that a caller that only catches or says them (the CLI's error line, the loop's answers)
does not load it.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

from reconciler.config.deadline import wait_s as _wait_s
from reconciler.core.errors import HeldElsewhere


class StoreError(Exception):
    """state.db cannot be used; one line naming the file."""


class StoreReplaced(StoreError):
    """state.db was removed, replaced or emptied under an open connection: whatever this process would
    write would be lost, and what it would read is no longer true. It must stop acting."""


class StoreBusy(StoreError, HeldElsewhere):
    """state.db is held by another process (a transaction it keeps open) for longer than this process
    may wait: one line naming the holder where /proc/locks shows it. Tried again later, never a bug."""

    def __init__(self, path: Path, waited: float):
        from reconciler.config.locks import describe_pid, lock_holders

        holders = lock_holders(path)
        who = ", ".join(describe_pid(p) for p in holders[:3]) if holders else "another process (not seen)"
        self.path, self.waited, self.holders = path, waited, holders
        waited_text = f"; res waited {_span(waited)} for it" if waited >= 0.05 else ""
        super().__init__(f"{path}: held by {who} in a write transaction{waited_text}")


def _span(s: float) -> str:
    return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"


# SQLite's result codes, said in res's words (never SQLite's own text, issue 40).
_SQLITE_WORDS = {
    "SQLITE_FULL": "the disk is full",
    "SQLITE_IOERR": "the disk failed to read or write it (or is full)",
    "SQLITE_CORRUPT": "it is damaged (not a consistent SQLite database: move it away; res starts a new one)",
    "SQLITE_NOTADB": "it is not a SQLite database (replaced by another file? move it away; res starts a new one)",
    "SQLITE_CANTOPEN": "it cannot be opened (its directory or its permissions?)",
    "SQLITE_READONLY": "it is read-only for res (its permissions, or a read-only file system?)",
    "SQLITE_PERM": "res may not open it (its permissions?)",
    "SQLITE_AUTH": "res may not open it (its permissions?)",
    "SQLITE_NOMEM": "SQLite ran out of memory",
    "SQLITE_TOOBIG": "a value is too big for it",
    "SQLITE_SCHEMA": "its tables changed under res",
    "SQLITE_MISMATCH": "a value of the wrong type",
    "SQLITE_CONSTRAINT": "a value breaks its constraints",
}


def store_error(path: Path, e: sqlite3.Error, waited: float | None = None) -> StoreError:
    """SQLite's error as res says it: held by another process (StoreBusy, with the holder), or what
    its result code means; never SQLite's own text."""
    name = getattr(e, "sqlite_errorname", "") or ""
    base = name.split("_", 2)[:2]
    base_name = "_".join(base) if len(base) == 2 else name
    text = str(e).lower()
    if base_name in ("SQLITE_BUSY", "SQLITE_LOCKED") or "database is locked" in text or "database is busy" in text:
        return StoreBusy(path, _wait_s() if waited is None else waited)
    said = _SQLITE_WORDS.get(base_name)
    if said is None:
        if "no such table" in text or "no such column" in text:
            said = "it lacks the tables res keeps (made by another program?)"
        elif "disk is full" in text or "disk i/o" in text:
            said = "the disk failed to read or write it (or is full)"
        else:
            said = f"it could not be used (SQLite code {name or 'unknown'})"
    return StoreError(f"{path}: {said}")
