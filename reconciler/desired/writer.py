"""The small writer (DESIGN §2, §4), `Writer`: the only code that edits the desired files (`res run`,
`res note`, `res release`, `res game`, `res init`, and the reconciler retiring finished entries). It
edits under an exclusive lock, keeps the user's comments and formatting, validates before it writes,
never overwrites a file it could not read, and replaces files atomically (temp file, fsync, rename,
fsync of the directory). Reading the files is desired/reader.py's.

Import-light (the writer is on `res run`'s hot path): tomllib, pydantic (via models) and tomlkit are
imported inside the functions that need them, and tomlkit only when an edit cannot be made as a plain
text edit (see `Writer._appended`).
"""
from __future__ import annotations

import json
import math
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from reconciler.config.locks import LockBusy, acquire, release
from reconciler.config.paths import Paths

if TYPE_CHECKING:
    from reconciler.core.models import Game, Request
from reconciler.config.files import digest
from reconciler.desired.reader import (DesiredError, KINDS, MAX_ID, _Bad, _decode, _first_error, _ident, _open_dir, _parse_game, _parse_queue, _read_bytes, _read_file)

CHANGES_NAME = ".changes.jsonl"  # the writer's log of its own changes (reconciler/desired/changes.py reads it)
CHANGES_LIMIT = 1 << 20
_CACHE_NAME = ".queue.toml.ok"  # the writer's note about the last queue.toml it wrote (see _Note)


class _Changed(Exception):
    """queue.toml changed between the writer reading and replacing it."""


# ---------------------------------------------------------------- writing TOML text

_BARE_KEY = r"^[A-Za-z0-9_-]+$"
_MUST_ESCAPE = r'[\x00-\x1f\x7f"\\]'
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _toml_str(s: str) -> str:
    """A TOML basic string that reads back as exactly `s`."""
    return '"' + re.sub(_MUST_ESCAPE, lambda m: _SHORT_ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), s) + '"'


def _toml_key(k: str) -> str:
    return k if re.match(_BARE_KEY, k) else _toml_str(k)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError("not a finite number")
        return repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        if not v:
            return "{}"
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _entry_text(kind: str, entry: dict[str, Any]) -> str:
    lines = ["", f"[[{kind}]]"] + [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in entry.items()]
    return "\n".join(lines) + "\n"


_NEXT_ID_LINE = r"(?m)^([ \t]*next_id[ \t]*=[ \t]*)([1-9][0-9]*|0)([ \t]*(?:#[^\n]*)?)$"
_NEXT_ID_ANY = r"""(?m)^[ \t]*(?:next_id|"next_id"|'next_id')[ \t]*[=.]"""
_HEADER_M = r"(?m)^[ \t]*\["


def _set_next_id(text: str, n: int) -> str | None:
    """`text` with the top-level `next_id = n` (replaced in place, or added before the first table);
    None if that cannot be done as a plain text edit (the caller then uses tomlkit).
    Only for `plain` text (see _plain): every line that looks like a header or a key is one."""
    m = re.search(_HEADER_M, text)
    cut = m.start() if m else len(text)
    region, rest = text[:cut], text[cut:]
    found = re.search(_NEXT_ID_LINE, region)
    if found:
        return region[: found.start(2)] + str(n) + region[found.end(2) :] + rest
    if re.search(_NEXT_ID_ANY, region):
        return None  # written some other way (0x.., 1_000, a quoted key): let tomlkit do it
    if region and not region.endswith("\n"):
        region += "\n"
    return region + f"next_id = {n}\n" + ("\n" if rest else "") + rest


def _header_lines(text: str, kind: str) -> list[int]:
    """0-based indices of the lines that are a bare `[[kind]]` header (in `plain` text)."""
    out, pos, line = [], 0, 0
    for m in re.finditer(rf"(?m)^[ \t]*\[\[[ \t]*{kind}[ \t]*\]\][ \t]*(?:#.*)?$", text):
        line += text.count("\n", pos, m.start())
        pos = m.start()
        out.append(line)
    return out


def _plain(text: str, counts: dict[str, int]) -> bool:
    """True if plain text edits of this (valid) queue.toml are exact: no multi-line strings (so every
    line is what it looks like), every entry is a `[[kind]]` table with a bare header, and no
    `kind = [...]` array. Validation already ruled out other top-level keys and nested arrays."""
    if '"""' in text or "'''" in text:
        return False
    for kind in KINDS:
        if len(_header_lines(text, kind)) != counts.get(kind, 0):
            return False
        if re.search(rf"""^[ \t]*(?:{kind}|"{kind}"|'{kind}')[ \t]*[=.]""", text, re.M):
            return False
    return True


def _remove_plain(text: str, ids: Iterable[str]) -> tuple[str, dict[str, str]] | None:
    """Plain text edit: remove the `[[job]]` / `[[note]]` tables with these ids from `plain` text
    (see _plain) that has been validated. Returns (new text, {id: kind} of those removed), or None if
    a table does not read back as exactly one entry with its id (the caller then uses tomlkit).

    A table runs from its header to its last key line (its sub-tables `[job.x]` included); comments
    and blank lines after it stay, as they are likelier to be about what follows. Each removed piece
    is parsed on its own to check it was exactly that one table."""
    import bisect
    import tomllib

    heads = [(m.start(), m.group()) for m in re.finditer(r"(?m)^[ \t]*\[[^\n]*", text)]
    starts = [h[0] for h in heads]
    spans: list[tuple[int, int, str, str]] = []
    for job_id in ids:
        if not re.fullmatch(r"r-[0-9]{1,10}", job_id):
            continue
        for m in re.finditer(rf'(?m)^[ \t]*id[ \t]*=[ \t]*"{re.escape(job_id)}"[ \t]*(?:#[^\n]*)?$', text):
            k = bisect.bisect_right(starts, m.start()) - 1
            head = re.match(r"^[ \t]*\[\[[ \t]*(job|note)[ \t]*\]\][ \t]*(?:#.*)?$", heads[k][1]) if k >= 0 else None
            if head is None:
                continue  # e.g. an env variable called id in a [job.env] sub-table
            kind = head.group(1)
            sub = re.compile(rf"^[ \t]*\[\[?[ \t]*{kind}[ \t]*\.")
            j = k + 1
            while j < len(heads) and sub.match(heads[j][1]):
                j += 1
            start, end = starts[k], (starts[j] if j < len(heads) else len(text))
            lines = text[start:end].split("\n")
            while len(lines) > 1 and not _is_content(lines[-1]):
                lines.pop()
            end = start + len("\n".join(lines))
            spans.append((start, end, job_id, kind))
            break
    removed: dict[str, str] = {}
    for start, end, job_id, kind in sorted(spans, reverse=True):
        piece = text[start:end]
        try:
            got = tomllib.loads(piece)
        except tomllib.TOMLDecodeError:
            return None
        if list(got) != [kind] or len(got[kind]) != 1 or got[kind][0].get("id") != job_id:
            return None
        before, after = text[:start], text[end:]
        # the table's own line end, and one blank line that separated it from what came before
        if after.startswith("\n"):
            after = after[1:]
        if before.endswith("\n\n") and (not after or after.startswith("\n")):
            before = before[:-1]
        text = before + after
        removed[job_id] = kind
    return text, removed


def _is_content(line: str) -> bool:
    s = line.strip()
    return bool(s) and not s.startswith("#")


def _to_tomlkit(v: Any) -> Any:
    import tomlkit

    if isinstance(v, dict):
        t = tomlkit.inline_table()
        for k, x in v.items():
            t.append(k, _to_tomlkit(x))
        return t
    if isinstance(v, list):
        a = tomlkit.array()
        for x in v:
            a.append(_to_tomlkit(x))
        return a
    return tomlkit.item(v)


# ---------------------------------------------------------------- atomic files


def write_atomic(dfd: int, name: str, data: bytes, durable: bool = True) -> None:
    """Replace `name` in the directory `dfd` with `data`: a 0600 temp file in the same directory,
    fsync, rename over, fsync the directory. A reader sees the old file or the new one, never a mix."""
    tmp = f".{name}.tmp-{os.getpid()}-{time.monotonic_ns()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise
    if durable:
        os.fsync(dfd)




# ---------------------------------------------------------------- the writer


@dataclass
class _Queue:
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


class _Note:
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
    def load(cls, dfd: int) -> "_Note | None":
        try:
            raw = _read_bytes(dfd, _CACHE_NAME)
            if raw is None:
                return None
            v, digest, nid, top, jobs, notes, plain = raw.decode("ascii").split()
            if v != "v1":
                return None
            return cls(digest, int(nid), int(top), {"job": int(jobs), "note": int(notes)}, plain == "1")
        except (_Bad, ValueError, UnicodeDecodeError, OSError):
            return None

    def queue(self, data: bytes, sha: str) -> _Queue | None:
        """The queue as noted, if `data` (digest `sha`) is exactly the file noted and plain text edits
        work on it."""
        if not self.plain or self.digest != sha:
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return _Queue(True, text, self.next_id, self.top, dict(self.counts), plain=True, found=sha)

    @staticmethod
    def save(dfd: int, sha: str, q: _Queue, floor: int) -> None:
        c = q.counts
        line = f"v1 {sha} {max(q.next_id, floor)} {q.top} {c.get('job', 0)} {c.get('note', 0)} {int(q.plain)}\n"
        try:
            write_atomic(dfd, _CACHE_NAME, line.encode(), durable=False)
        except OSError:
            pass  # the queue file itself is written; the note only saves work


def _check_text(where: str, s: str) -> None:
    if "\x00" in s:
        raise DesiredError(f"{where}: contains a NUL character")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise DesiredError(f"{where}: not valid UTF-8 (bytes that are not text cannot be stored in queue.toml)") from None


class Writer:
    """The only code that edits desired/queue.toml and desired/game.toml.

    Every method takes `Paths.writer_lock` (flock, opened without following symlinks, 0600), waiting
    up to `timeout` seconds, then reads the file, refuses to touch it if it is unusable (DesiredError:
    `<path>:<line>: <error>; fix it or move it away, nothing was changed`), edits it keeping the
    user's comments and formatting, checks that the edited text reads back as exactly the intended
    data, and replaces it atomically. A DesiredError always means nothing was changed.

        Writer(paths, timeout=30.0)
        .add(request_fields: dict, kind="job") -> Request
        .remove(ids: Iterable[str]) -> list[str]
        .set_game(on: bool, until: float | None = None) -> Game
        .init(force=False) -> list[Path]
    """

    def __init__(self, paths: Paths, timeout: float = 30.0):
        self.paths = paths
        self.timeout = timeout
        # Who asks for the changes this writer makes (DESIGN §5.7): set per request by the loop (the
        # caller's process chain); None: this process's own.
        self.who: str | None = None
        if paths.queue.parent != paths.desired or paths.game.parent != paths.desired:
            raise ValueError("desired files must live in the desired directory")

    # ---------------------------------------------------------- lock

    @contextmanager
    def _locked(self) -> Iterator[int]:
        """Hold the writer lock; yields an fd of the desired directory (files are opened relative to
        it, so a directory swapped for a symlink meanwhile is never followed)."""
        try:
            self.paths.ensure()
        except OSError as e:
            raise DesiredError(" ".join(str(e).split())) from None
        try:
            dfd = _open_dir(self.paths.desired)
        except _Bad as b:
            raise DesiredError(b.msg) from None
        except OSError as e:
            raise DesiredError(f"{self.paths.desired}: {e.strerror}") from None
        lock = self.paths.writer_lock
        try:
            try:
                lfd = acquire(lock, self.timeout)
            except LockBusy:
                raise DesiredError(f"{lock}: another writer still holds it after {self.timeout:g} s; nothing was changed") from None
            except OSError as e:
                raise DesiredError(" ".join(str(e).split())) from None
            try:
                yield dfd
            finally:
                release(lfd)
        finally:
            os.close(dfd)

    # ---------------------------------------------------------- loading

    def _refuse(self, path: Path, b: _Bad) -> DesiredError:
        return DesiredError(f"{b.at(path)}; fix it or move it away, nothing was changed")

    def _load_queue(self, dfd: int, note: _Note | None = None) -> _Queue:
        """queue.toml, validated; from the writer's note without parsing when `note` vouches for it."""
        path = self.paths.queue
        try:
            got = _read_file(dfd, path.name)
        except _Bad as b:
            raise self._refuse(path, b) from None
        raw, ident = got if got is not None else (None, None)
        if raw is None:
            text = _template("queue.toml")
            q = _Queue(False, text, 1, 0, {k: 0 for k in KINDS}, plain=True)
            q.data = {}
            q.plain = _plain(text, q.counts)
            return q
        sha = digest(raw)
        if note is not None:
            known = note.queue(raw, sha)
            if known is not None:
                known.ident = ident
                return known
        try:
            text = _decode(raw)
            data, requests, aside = _parse_queue(text)
        except _Bad as b:
            raise self._refuse(path, b) from None
        counts = {k: len(data.get(k, [])) for k in KINDS}
        # An entry set aside keeps its id: it is never given out again either.
        top = max([r.number for r in requests] + [int(a.id[2:]) for a in aside if a.id], default=0)
        return _Queue(True, text, data.get("next_id", 1), top, counts, _plain(text, counts), data, ident, sha)

    def _full(self, dfd: int, q: _Queue) -> _Queue:
        return q if q.data is not None else self._load_queue(dfd)

    def _store_top(self) -> int:
        """The highest id number state.db has ever recorded (0 if none or unreadable): ids are never
        reused, even when queue.toml was moved away or its counter lowered by hand."""
        try:
            from reconciler.recorded.store import max_number

            return max_number(self.paths)
        except Exception:  # best effort: a missing or broken state.db must not stop `res run`
            return 0

    def _given_out(self, note: _Note | None) -> int:
        """The lowest id number never given out as far as the file's neighbours tell: past state.db's
        highest id and the counter of the writer's note (either survives the file being moved away
        or its counter lowered by hand)."""
        return max(self._store_top() + 1, note.next_id if note else 1)

    def _next_free(self, q: _Queue, note: _Note | None = None, past: int = 0, given_out: bool = False) -> int:
        """The one rule of the id counter: the next id number is past the file's counter, past every
        id in the file and past `past`; with `given_out`, past every id ever given out too (unless the
        file is the writer's own last one, whose counter already is)."""
        n = max(q.next_id, q.top + 1, past + 1)
        if given_out and q.data is not None:
            n = max(n, self._given_out(note))
        return n

    def _commit_queue(self, dfd: int, q: _Queue, new_text: str, note: _Note | None, op: str = "edit",
                      ids: Iterable[str] = (), by: dict[str | None, list[str]] | None = None,
                      checked: bool = False) -> None:
        """Write the edited queue, unless the file changed since it was read (an editor saving
        meanwhile does not take the writer's lock): then _Changed, and the caller starts over. `by`:
        the ids each asker's requests got, when one edit makes the changes of several (add_many).
        `checked`: the file found was already checked for changes made outside res (init)."""
        data = new_text.encode("utf-8")
        if not checked:
            self._outside_first(dfd, "queue.toml", q.found, note)
        self._replace(dfd, self.paths.queue.name, q.ident, data)
        sha = digest(data)  # the note's and the change line's: one file, one digest
        _Note.save(dfd, sha, q, note.next_id if note else 1)
        self._log_change(dfd, "queue.toml", op, list(ids), sha, by)

    def _outside_first(self, dfd: int, file: str, found: str, note: _Note | None = None) -> None:
        """Before the writer replaces `file` (found with digest `found`): a file that is not what the
        writer last left (its note's digest; game.toml has none) may hold a change made outside res
        that no pass has seen yet. It is recorded now, as a pass would (desired/changes.record_outside),
        and a queue entry it added is held: once this write's change line vouches for the file, a
        pass would take that entry for the writer's own and start it. Nothing is written unchecked."""
        if file == "queue.toml":
            note = note or _Note.load(dfd)  # the edit's own, read under this lock: not read again
            if note is not None and note.digest == found:
                return  # the writer's own last file: nothing happened to it since
        from reconciler.desired.changes import record_outside

        try:
            record_outside(self.paths)
        except Exception as e:  # noqa: BLE001 - a forged entry must not slip through: write nothing
            raise DesiredError(f"{self.paths.desired / file}: could not check it for changes made outside res "
                               f"({' '.join(str(e).split())}); nothing was changed") from None

    def _log_change(self, dfd: int, file: str, op: str, ids: list[str], sha: str,
                    by: dict[str | None, list[str]] | None = None) -> None:
        """One line in `.changes.jsonl` per change the writer made (per asker, when one edit made the
        changes of several): when, which file, what, who asked, and the digest of the file it left (a
        pass tells changes made outside res by it)."""
        from reconciler.observed.procs import process_chain

        at, own = time.time(), None
        lines = []
        for who, some in (by or {self.who: ids}).items():
            if who is None:
                own = own or process_chain(os.getpid())
            lines.append(json.dumps({"at": at, "file": file, "op": op, "ids": some, "who": who or own,
                                     "digest": sha}, separators=(",", ":")) + "\n")
        line = "".join(lines)
        try:
            fd = os.open(CHANGES_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=dfd)
            try:
                if os.fstat(fd).st_size > CHANGES_LIMIT:  # keep it bounded: the pass has read it long since
                    os.ftruncate(fd, 0)
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError:
            pass  # the change itself is made; a pass then calls it a change outside res

    @staticmethod
    def _replace(dfd: int, name: str, ident: tuple[int, int, int, int] | None, data: bytes) -> None:
        """Replace the file with `data` if it is still the one read (`ident`; None: it did not
        exist), else _Changed."""
        try:
            now = _ident(os.stat(name, dir_fd=dfd, follow_symlinks=False))
        except FileNotFoundError:
            now = None
        if now != ident:
            raise _Changed()
        write_atomic(dfd, name, data)

    def _retrying(self, edit: Any, path: Path | None = None) -> Any:
        """Run `edit(dfd)` under the lock, again (up to 3 times) if the file changed under it."""
        with self._locked() as dfd:
            for _ in range(3):
                try:
                    return edit(dfd)
                except _Changed:
                    time.sleep(0.05)
        where = path or self.paths.queue
        raise DesiredError(f"{where}: it kept changing while being edited (an editor saving it?); nothing was changed")

    # ---------------------------------------------------------- add

    def add(self, request_fields: dict[str, Any], kind: str = "job") -> "Request":
        """Append a new request: allocate its id under the lock ("r-" + max(next_id, 1 + the highest
        id present, 1 + the highest id state.db knows); next_id goes past it), fill `created` if
        absent, validate through models.Request before anything is written, append a [[job]] or
        [[note]] table (`_appended`). Returns the Request as written (and as the reader will read it
        back); DesiredError if it was refused (nothing written)."""
        got = self.add_many([(request_fields, kind, None)])[0]
        if isinstance(got, DesiredError):
            raise got
        return got

    def add_many(self, items: list[tuple[dict[str, Any], str, str | None]]) -> list["Request | DesiredError"]:
        """Append several requests in one edit: one lock, one durable write of queue.toml (the loop's
        group commit: requests that arrive together). `items`: (fields, kind, who asked: None for
        this writer's own). Returns, in order, each one's Request as written or the DesiredError that
        refused it; a refused one never stops the others. Ids are given in the order of `items`."""
        from pydantic import ValidationError

        from reconciler.core.models import Request, parse

        results: list[Request | DesiredError | None] = [None] * len(items)
        good: list[tuple[int, dict[str, Any], str, str | None]] = []
        for i, (fields, kind, who) in enumerate(items):
            try:
                good.append((i, _entry_dict(self._checked(fields, kind)), kind, who))
            except DesiredError as e:
                results[i] = e
        if not good:
            return results  # type: ignore[return-value]

        def edit(dfd: int) -> list[Request | DesiredError]:
            note = _Note.load(dfd)
            q = self._load_queue(dfd, note)
            n = self._next_free(q, note, given_out=True)
            out: list[Request | DesiredError] = []
            entries, by = [], {}
            for _, base, kind, who in good:
                if n > MAX_ID:
                    out.append(DesiredError(f"{self.paths.queue}: no ids left (next would be r-{n}); nothing was changed"))
                    continue
                entry = {"id": f"r-{n}", **base}
                try:
                    made = parse(Request, {**entry, "kind": kind})  # exactly what the reader will make of it
                except ValidationError as e:
                    out.append(DesiredError(f"{kind}: {_first_error(e)[1]}; nothing was written"))
                    continue
                out.append(made)
                entries.append((kind, entry))
                by.setdefault(who if who is not None else self.who, []).append(made.id)
                n += 1
            if entries:
                q, new_text = self._appended(dfd, q, entries, n)
                q.top = n - 1
                self._commit_queue(dfd, q, new_text, note, "add", [e["id"] for _, e in entries], by)
            return out

        try:
            made = self._retrying(edit)
        except DesiredError as e:  # the edit as a whole (the lock, the file): nothing was written
            made = [e] * len(good)
        for (i, *_), one in zip(good, made):
            results[i] = one
        return results  # type: ignore[return-value]

    @staticmethod
    def _checked(request_fields: dict[str, Any], kind: str) -> "Request":
        """The new request as models.Request validates it (its id a stand-in), with every text it
        holds storable in queue.toml; DesiredError (nothing written) otherwise."""
        from pydantic import ValidationError

        from reconciler.core.models import Request, parse

        if kind not in KINDS:
            raise DesiredError(f"kind {kind!r}: must be one of {', '.join(KINDS)}")
        fields = dict(request_fields)
        if fields.pop("kind", kind) != kind:
            raise DesiredError(f"kind {request_fields['kind']!r} given for a {kind}")
        if "id" in fields:
            raise DesiredError("the writer allocates ids; do not pass one")
        if fields.get("created") is None:
            fields["created"] = time.time()
        for key, value in fields.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise DesiredError(f"{kind}: {key}: must be a finite number; nothing was written")
        try:
            req = parse(Request, {**fields, "id": "r-1", "kind": kind})
        except ValidationError as e:
            raise DesiredError(f"{kind}: {_first_error(e)[1]}; nothing was written") from None
        texts = [("title", req.title), ("project", req.project), ("cwd", req.cwd)]
        texts += [(f"cmd[{i}]", arg) for i, arg in enumerate(req.cmd)]
        for k, v in req.env.items():
            texts += [(f"env {k!r}", k), (f"env {k}", v)]
            if "=" in k or not k:
                raise DesiredError(f"env {k!r}: not a variable name")
        texts += [(name, v) for name, v in (("lock", req.lock), ("owner_name", req.owner_name), ("by", req.by),
                                            ("task", req.task), ("reply_to", req.reply_to)) if v is not None]
        for where, text in texts:
            _check_text(where, text)
        return req

    def _appended(self, dfd: int, q: _Queue, entries: list[tuple[str, dict[str, Any]]], next_id: int) -> tuple[_Queue, str]:
        """(the queue, its new text) with `entries` appended as [[kind]] tables and the counter at
        `next_id`. The common case is a plain text edit (the new tables appended, the counter's digits
        replaced), checked by reading the new pieces back; a file the plain edit cannot handle exactly
        (multi-line strings, inline arrays of tables, ...) is edited with tomlkit and the whole result
        checked against the intended data."""
        added = {k: sum(1 for kind, _ in entries if kind == k) for k in KINDS}
        new_text = self._appended_plain(q, entries, next_id) if q.plain else None
        if new_text is None:
            q = self._full(dfd, q)
            new_text = self._appended_tomlkit(q, entries, next_id)
            q.counts = {k: len(q.data.get(k, [])) + added[k] for k in KINDS}
            q.plain = _plain(new_text, q.counts)
        else:  # a plain edit of plain text stays plain: each block has one bare header, no multi-line string
            q.counts = {k: q.counts.get(k, 0) + added[k] for k in KINDS}
        q.next_id = next_id
        return q, new_text

    def _appended_plain(self, q: _Queue, entries: list[tuple[str, dict[str, Any]]], next_id: int) -> str | None:
        import tomllib

        text = _set_next_id(q.text, next_id)
        if text is None:
            return None
        # Read the pieces back: each new table alone, and the part before the first table (which in
        # plain text holds nothing but comments and next_id).
        from reconciler.desired.reader import known_table

        blocks = []
        for kind, entry in entries:
            block = _entry_text(kind, entry)
            got = tomllib.loads(block)
            if got != {kind: [entry]}:
                raise DesiredError(f"{self.paths.queue}: the new entry would not read back as written; nothing was changed")
            known_table(block, kind, got[kind][0])  # a reader in this process (the loop's) needs not parse it again
            blocks.append(block)
        cut = re.search(_HEADER_M, text)
        head = text[: cut.start()] if cut else text
        if tomllib.loads(head) != {"next_id": next_id}:
            return None
        if text and not text.endswith("\n"):
            text += "\n"
        return text + "".join(blocks)

    def _appended_tomlkit(self, q: _Queue, entries: list[tuple[str, dict[str, Any]]], next_id: int) -> str:
        import tomlkit

        assert q.data is not None
        try:
            doc = tomlkit.parse(q.text)
            doc["next_id"] = next_id
            for kind, entry in entries:
                table = tomlkit.table()
                for k, v in entry.items():
                    table.append(k, _to_tomlkit(v))
                if kind in doc:
                    if not isinstance(doc[kind], tomlkit.items.AoT):
                        raise DesiredError(
                            f"{self.paths.queue}: {kind} is written as an inline array; write its entries as [[{kind}]]"
                            " tables so they can be added to; nothing was changed"
                        )
                    doc[kind].append(table)
                else:
                    aot = tomlkit.aot()
                    aot.append(table)
                    doc.append(kind, aot)
            new_text = tomlkit.dumps(doc)
        except DesiredError:
            raise
        except Exception as e:
            raise DesiredError(f"{self.paths.queue}: could not edit it ({' '.join(str(e).split())}); nothing was changed") from None
        expected = dict(q.data)
        expected["next_id"] = next_id
        for kind in KINDS:
            new = [entry for k, entry in entries if k == kind]
            if new:
                expected[kind] = list(q.data.get(kind, [])) + new
        self._verify(new_text, expected)
        return new_text

    def _verify(self, new_text: str, expected: dict[str, Any]) -> None:
        import tomllib

        try:
            got = tomllib.loads(new_text)
        except tomllib.TOMLDecodeError:
            got = None
        norm = {k: v for k, v in expected.items() if v != []}
        if got != norm:
            raise DesiredError(f"{self.paths.queue}: the edit would not read back as intended (unusual formatting?); nothing was changed")

    # ---------------------------------------------------------- remove

    def remove(self, ids: Iterable[str]) -> list[str]:
        """Remove the entries with these ids (jobs or notes). Returns the ids removed, in the order
        given; ids not in the file are fine (nothing to do). The counter is kept past every id that
        was present, so a removed id is never given out again."""
        wanted = list(dict.fromkeys(str(i) for i in ids))
        if not wanted:
            return []
        def edit(dfd: int) -> list[str]:
            note = _Note.load(dfd)
            q = self._load_queue(dfd, note)
            if not q.exists:
                return []
            if q.data is None:
                done = self._removed_own(dfd, q, note, wanted)
                if done is not None:
                    return done
                q = self._full(dfd, q)
            return self._removed_any(dfd, q, note, wanted)

        return self._retrying(edit)

    def _removed_own(self, dfd: int, q: _Queue, note: _Note | None, wanted: list[str]) -> list[str] | None:
        """The writer's own last file, validated and plain: a plain text edit, each removed table
        checked on its own (its counter is already past every id in it). None: not possible here."""
        done = _remove_plain(q.text, wanted)
        if done is None:
            return None
        new_text, removed = done
        if not removed:
            return []
        for kind in removed.values():
            q.counts[kind] -= 1
        self._commit_queue(dfd, q, new_text, note, "remove", list(removed))
        return [i for i in wanted if i in removed]

    def _removed_any(self, dfd: int, q: _Queue, note: _Note | None, wanted: list[str]) -> list[str]:
        """Any valid file: the entries removed as a plain text edit where the whole result reads back
        as intended, else with tomlkit; the counter kept past every id that was present."""
        assert q.data is not None
        doomed: dict[str, set[int]] = {}
        found: set[str] = set()
        for kind in KINDS:
            for i, raw in enumerate(q.data.get(kind, [])):
                if raw.get("id") in wanted:
                    doomed.setdefault(kind, set()).add(i)
                    found.add(raw["id"])
        if not found:
            return []
        next_id = self._next_free(q)
        expected: dict[str, Any] = dict(q.data)
        expected["next_id"] = next_id
        for kind, idx in doomed.items():
            expected[kind] = [e for i, e in enumerate(q.data[kind]) if i not in idx]
        counts = {k: len(expected.get(k, [])) for k in KINDS}
        new_text = self._removed_plain(q, found, next_id, expected) if q.plain else None
        if new_text is None:
            new_text = self._removed_tomlkit(q, doomed, next_id, expected)
        q.next_id, q.counts = next_id, counts
        q.plain = _plain(new_text, counts)
        self._commit_queue(dfd, q, new_text, note, "remove", sorted(found))
        return [i for i in wanted if i in found]

    def _removed_plain(self, q: _Queue, found: set[str], next_id: int, expected: dict[str, Any]) -> str | None:
        done = _remove_plain(q.text, found)
        text = done[0] if done is not None else None
        if text is not None and next_id != q.data.get("next_id"):
            text = _set_next_id(text, next_id)
        if text is None:
            return None
        try:
            self._verify(text, expected)
        except DesiredError:
            return None
        return text

    def _removed_tomlkit(self, q: _Queue, doomed: dict[str, set[int]], next_id: int, expected: dict[str, Any]) -> str:
        import tomlkit

        try:
            doc = tomlkit.parse(q.text)
            for kind, idx in doomed.items():
                arr = doc[kind]
                for i in sorted(idx, reverse=True):
                    del arr[i]
                if len(arr) == 0:
                    del doc[kind]
            if doc.get("next_id") != next_id:
                doc["next_id"] = next_id
            new_text = tomlkit.dumps(doc)
        except Exception as e:
            raise DesiredError(f"{self.paths.queue}: could not edit it ({' '.join(str(e).split())}); nothing was changed") from None
        self._verify(new_text, expected)
        return new_text

    # ---------------------------------------------------------- update

    def update(self, job_id: str, changes: dict[str, Any]) -> bool:
        """Set keys of one entry, as res itself changes a request (an auto-sized job killed at its
        limit, started again bigger: DESIGN §5.9), with tomlkit (comments and layout kept). True if
        the file changed; False when the entry is not there or already says so."""
        def edit(dfd: int) -> bool:
            q = self._full(dfd, self._load_queue(dfd))
            if not q.exists or q.data is None:
                return False
            where = next(((kind, i) for kind in KINDS for i, raw in enumerate(q.data.get(kind, []))
                          if raw.get("id") == job_id), None)
            if where is None:
                return False
            kind, i = where
            entry = {**q.data[kind][i], **changes}
            if entry == q.data[kind][i]:
                return False
            expected: dict[str, Any] = {**q.data, kind: [*q.data[kind][:i], entry, *q.data[kind][i + 1:]]}
            import tomlkit

            try:
                doc = tomlkit.parse(q.text)
                for key, value in changes.items():
                    doc[kind][i][key] = value
                new_text = tomlkit.dumps(doc)
            except Exception as e:
                raise DesiredError(f"{self.paths.queue}: could not edit it ({' '.join(str(e).split())}); nothing was changed") from None
            self._verify(new_text, expected)
            q.plain = _plain(new_text, q.counts)
            self._commit_queue(dfd, q, new_text, None, "update", [job_id])
            return True

        return self._retrying(edit)

    # ---------------------------------------------------------- restore

    def restore(self, requests: Iterable["Request"]) -> list[str]:
        """Write back entries that left queue.toml without a `res release` (the file deleted, laid
        down again by `res init --force`, or cut by hand) while the reconciler still holds them: each
        with its own id, the counter past them. Entries already present are left alone. Returns the
        ids written."""
        reqs = list(requests)
        if not reqs:
            return []

        def edit(dfd: int) -> list[str]:
            q = self._full(dfd, self._load_queue(dfd))
            assert q.data is not None
            present = {raw.get("id") for kind in KINDS for raw in q.data.get(kind, [])}
            missing = [r for r in reqs if r.id not in present]
            if not missing:
                return []
            highest = max(r.number for r in missing)
            q, text = self._appended(dfd, q, [(r.kind, {"id": r.id, **_entry_dict(r)}) for r in missing],
                                     self._next_free(q, past=highest))
            q.top = max(q.top, highest)
            self._commit_queue(dfd, q, text, None, "restore", [r.id for r in missing])
            return [r.id for r in missing]

        return self._retrying(edit)

    # ---------------------------------------------------------- game

    def set_game(self, on: bool, until: float | None = None, if_until: float | None = None) -> "Game":
        """Write game mode: `on`, and `until` (epoch seconds) or no `until`. Keeps the file's comments.
        `if_until`: only if the file still says on until exactly then (the reconciler ending game
        mode must not undo a `game on` that extended it meanwhile); else the file's game is returned."""
        import tomlkit
        import tomllib

        from pydantic import ValidationError

        from reconciler.core.models import Game, parse

        if until is not None and not (isinstance(until, (int, float)) and math.isfinite(until)):
            raise DesiredError(f"until {until!r}: must be a finite time")
        try:
            game = parse(Game, {"on": on, "until": None if until is None else float(until)})
        except ValidationError as e:
            raise DesiredError(f"game: {_first_error(e)[1]}; nothing was written") from None
        path = self.paths.game

        def edit(dfd: int) -> "Game":
            try:
                got = _read_file(dfd, path.name)
                raw, ident = got if got is not None else (None, None)
                text = _template("game.toml") if raw is None else _decode(raw)
                data, current = _parse_game(text)
            except _Bad as b:
                raise self._refuse(path, b) from None
            if if_until is not None and not (current.on and current.until == if_until):
                return current
            try:
                doc = tomlkit.parse(text)
                doc["on"] = game.on
                if game.until is None:
                    if "until" in doc:
                        del doc["until"]
                else:
                    doc["until"] = game.until
                new_text = tomlkit.dumps(doc)
            except Exception as e:
                raise DesiredError(f"{path}: could not edit it ({' '.join(str(e).split())}); nothing was changed") from None
            expected = {k: v for k, v in data.items() if k not in ("on", "until")}
            expected["on"] = game.on
            if game.until is not None:
                expected["until"] = game.until
            if tomllib.loads(new_text) != expected:
                raise DesiredError(f"{path}: the edit would not read back as intended; nothing was changed")
            self._outside_first(dfd, "game.toml", "missing" if raw is None else digest(raw))
            self._replace(dfd, path.name, ident, new_text.encode("utf-8"))
            self._log_change(dfd, "game.toml", "on" if game.on else "off", [], digest(new_text.encode("utf-8")))
            return game

        return self._retrying(edit, path)

    # ---------------------------------------------------------- init

    def init(self, force: bool = False) -> list[Path]:
        """Lay down the annotated templates (state/queue.toml, state/game.toml) where the files are
        missing, creating the state tree 0700. With `force`, existing files are replaced too; the old
        ones are kept beside them as `<name>.bak-<epoch>`, and the id counter carries on past every id
        the old queue or state.db has used. Returns the files written."""
        written: list[Path] = []
        with self._locked() as dfd:
            for name in ("queue.toml", "game.toml"):
                target = self.paths.desired / name
                try:
                    raw = _read_bytes(dfd, name)
                    exists, found = raw is not None, "missing" if raw is None else digest(raw)
                except _Bad:
                    exists, found = True, "unusable"  # present but unusable: only `force` replaces it
                if exists and not force:
                    continue
                self._outside_first(dfd, name, found)  # what is replaced or was removed: seen first
                text = _template(name)
                if name == "queue.toml":
                    note = _Note.load(dfd)
                    n = self._given_out(note)
                    if exists:
                        try:
                            n = self._next_free(self._load_queue(dfd), note, given_out=True)
                        except DesiredError:
                            pass
                    if n > 1:
                        edited = _set_next_id(text, n)
                        if edited is None:  # pragma: no cover - the shipped template is plain
                            raise DesiredError(f"template {name}: cannot set next_id")
                        text = edited
                if exists:
                    backup = f"{name}.bak-{int(time.time())}"
                    for i in range(1, 1000):
                        try:
                            os.stat(backup, dir_fd=dfd, follow_symlinks=False)
                        except FileNotFoundError:
                            break
                        backup = f"{name}.bak-{int(time.time())}-{i}"
                    try:
                        os.rename(name, backup, src_dir_fd=dfd, dst_dir_fd=dfd)
                    except OSError as e:
                        raise DesiredError(f"{target}: could not move it aside ({e.strerror}); nothing was changed") from None
                if name == "queue.toml":
                    counts = {k: 0 for k in KINDS}
                    fresh = _Queue(True, text, n, 0, counts, _plain(text, counts))
                    try:
                        self._commit_queue(dfd, fresh, text, None, "init", checked=True)
                    except _Changed:
                        raise DesiredError(f"{target}: appeared while it was being laid down; try again") from None
                else:
                    write_atomic(dfd, name, text.encode("utf-8"))
                    self._log_change(dfd, name, "init", [], digest(text.encode("utf-8")))
                written.append(target)
        return written


_KEY_ORDER = ("title", "project", "mem_gb", "cpus", "est_s", "created", "queue", "lock", "force", "on", "gated", "auto", "sized_from", "grown_from_gb", "cmd", "cwd", "agent", "env", "owner_pid", "owner_name", "by", "task", "batch", "reply_to")


def _entry_dict(req: "Request") -> dict[str, Any]:
    """The table for a request, without id and kind, in the documented key order: every field of a
    job; a note leaves out the job-only keys while they are empty; None is left out (TOML has no
    null); float fields are written as floats (`cpus = 1.0`, not `1`)."""
    from dataclasses import fields as fields_of

    from reconciler.core.models import FLOAT_FIELDS

    fields = [f.name for f in fields_of(req)]
    names = [n for n in _KEY_ORDER if n in fields] + [n for n in fields if n not in _KEY_ORDER]
    job_only = {"cmd": [], "cwd": "", "env": {}, "agent": "none"}
    out: dict[str, Any] = {}
    for name in names:
        if name in ("id", "kind"):
            continue
        value = getattr(req, name)
        if value is None:
            continue
        if req.kind == "note" and name in job_only and value == job_only[name]:
            continue
        if name in ("on", "gated", "auto") and not value:
            continue  # the default: not written
        if isinstance(value, list):
            value = list(value)
        elif isinstance(value, dict):
            value = dict(value)
        elif name in FLOAT_FIELDS and type(value) is int:
            value = float(value)
        out[name] = value
    return out


def _template(name: str) -> str:
    from reconciler.config.resources import shipped

    path = shipped("state") / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        if name == "queue.toml":
            return "# res: desired state, the request queue (the annotated template was not found)\nnext_id = 1\n"
        return "# res: desired state, game mode (the annotated template was not found)\non = false\n"
