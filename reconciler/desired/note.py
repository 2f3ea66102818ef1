"""queue.toml as the writer holds it during an edit (`QueueFile`), and the writer's note about the
last queue.toml it wrote (`Note`, the file `desired/.queue.toml.ok`): the shortcut that spares `res
run` parsing a long queue again, and a floor for the id counter.

Import-light (`res run` reads the note on every add).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconciler.desired.disk import Bad, read_bytes, write_atomic

NOTE_NAME = ".queue.toml.ok"  # the writer's note about the last queue.toml it wrote (see Note)


@dataclass
class QueueFile:
    """queue.toml as the writer loaded it."""

    exists: bool
    text: str
    next_id: int  # the counter as written (1 if absent)
    top: int  # the highest id number present (0 if none)
    counts: dict[str, int]
    plain: bool
    data: dict[str, Any] | None = None  # None when known from the writer's note without parsing
    ident: tuple[int, int, int, int] | None = None  # the file as read (None: it did not exist)
    found: str = "missing"  # the digest of the file as read ("missing": it did not exist)


class Note:
    """`.queue.toml.ok`: the writer's note about the last queue.toml it wrote: its digest, the counter,
    the highest id, the table counts, and whether plain text edits are exact for it. Two uses:

    * a shortcut: while queue.toml's bytes still match the digest, `add` need not parse and validate
      the whole file again, so adding stays cheap however long the queue grows. Any mismatch (a hand
      edit, a crash between the two renames) means a full read: the note can make the writer skip
      work, never accept a file it has not validated;
    * a floor for the counter: an id once given out is not given out again even if queue.toml is
      moved away or replaced (state.db is the other floor, for ids the reconciler has recorded).
    """

    def __init__(self, digest: str, next_id: int, top: int, counts: dict[str, int], plain: bool):
        self.digest, self.next_id, self.top, self.counts, self.plain = digest, next_id, top, counts, plain

    @classmethod
    def load(cls, dfd: int) -> "Note | None":
        try:
            raw = read_bytes(dfd, NOTE_NAME)
            if raw is None:
                return None
            v, digest, nid, top, jobs, notes, plain = raw.decode("ascii").split()
            if v != "v1":
                return None
            return cls(digest, int(nid), int(top), {"job": int(jobs), "note": int(notes)}, plain == "1")
        except (Bad, ValueError, UnicodeDecodeError, OSError):
            return None

    def queue(self, data: bytes, sha: str) -> QueueFile | None:
        """The queue as noted, if `data` (digest `sha`) is exactly the file noted and plain text edits
        work on it."""
        if not self.plain or self.digest != sha:
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return QueueFile(True, text, self.next_id, self.top, dict(self.counts), plain=True, found=sha)

    @staticmethod
    def save(dfd: int, sha: str, q: QueueFile, floor: int) -> None:
        c = q.counts
        line = f"v1 {sha} {max(q.next_id, floor)} {q.top} {c.get('job', 0)} {c.get('note', 0)} {int(q.plain)}\n"
        try:
            write_atomic(dfd, NOTE_NAME, line.encode(), durable=False)
        except OSError:
            pass  # the queue file itself is written; the note only saves work
