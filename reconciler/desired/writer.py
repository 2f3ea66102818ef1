"""The desired-state files (DESIGN §2, §4): `desired/queue.toml` (requests) and `desired/game.toml`.

Two halves:

* the reader, `read_desired()`, used by every reconcile pass. A missing file is a real empty state; a
  file that cannot be read or validated is never read as empty: the pass gets the last good version
  and one line `<path>:<line>: <error>` naming the file, the line and what is wrong;
* the small writer, `Writer`, the only code that edits the desired files (`res run`, `res note`,
  `res release`, `res game`, `res init`, and the reconciler retiring finished entries). It edits under
  an exclusive lock, keeps the user's comments and formatting, validates before it writes, never
  overwrites a file it could not read, and replaces files atomically (temp file, fsync, rename, fsync
  of the directory).

queue.toml holds `next_id` and `[[job]]` / `[[note]]` tables; each table is one `models.Request` whose
`kind` is the array it is in (`kind` itself is not stored). game.toml holds `on` and an optional
`until` (`models.Game`). The shipped annotated templates are `state/queue.toml` and `state/game.toml`.

Import-light (the writer is on `res run`'s hot path): tomllib, pydantic (via models) and tomlkit are
imported inside the functions that need them, and tomlkit only when an edit cannot be made as a plain
text edit (see `Writer.add`).
"""
from __future__ import annotations

import errno
import json
import math
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, NamedTuple

from reconciler.config.locks import LockBusy, acquire, release
from reconciler.config.paths import Paths

if TYPE_CHECKING:
    from reconciler.core.models import Desired, Game, Request

KINDS = ("job", "note")
MAX_FILE_BYTES = 8 << 20  # a desired file bigger than this is a mistake (thousands of entries), not a queue
# game.toml holds two keys: a big one is an attack on the writer (tomlkit takes seconds a megabyte).
MAX_BYTES = {"game.toml": 64 << 10}
CHANGES_NAME = ".changes.jsonl"  # the writer's log of its own changes (reconciler/desired/changes.py reads it)
CHANGES_LIMIT = 1 << 20
MAX_ID = 9_999_999_999  # models.Request: r-[1-9][0-9]{0,9}
_TOP_KEYS = ("next_id",) + KINDS
_CACHE_NAME = ".queue.toml.ok"  # the writer's note about the last queue.toml it wrote (see _Note)


class DesiredError(Exception):
    """The writer could not make a change; the message is one line and nothing was changed."""


class DesiredRead(NamedTuple):
    """What `read_desired` returns: the desired state, and the game file's error line (None if good).

    The queue file's state is in `desired.queue_ok` / `desired.queue_error`."""

    desired: "Desired"
    game_error: str | None


class _Changed(Exception):
    """queue.toml changed between the writer reading and replacing it."""


class _Bad(Exception):
    """A desired file that cannot be used: what is wrong, and the line if one is to blame."""

    def __init__(self, msg: str, line: int | None = None):
        super().__init__(msg)
        self.msg = " ".join(str(msg).split()) or "unreadable"  # always one line
        self.line = line

    def at(self, path: Path) -> str:
        return f"{path}:{self.line}: {self.msg}" if self.line else f"{path}: {self.msg}"


# ---------------------------------------------------------------- reading files


def _open_dir(d: Path) -> int:
    """An fd of the directory `d`, refusing a symlink. FileNotFoundError if it does not exist."""
    try:
        return os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        if os.path.islink(d):
            raise _Bad(f"{d} is a symlink; refusing to use it") from None
        raise _Bad(f"{d}: {e.strerror}") from None


def _read_bytes(dfd: int, name: str) -> bytes | None:
    """The file `name` in the directory `dfd`, or None if it does not exist. Never follows a symlink,
    never blocks on a FIFO, refuses anything but a regular file of sane size."""
    got = _read_file(dfd, name)
    return None if got is None else got[0]


def _ident(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _read_file(dfd: int, name: str) -> tuple[bytes, tuple[int, int, int, int]] | None:
    """_read_bytes, and the file's identity (device, inode, size, mtime) when it was read."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _Bad("is a symlink; refusing to read it") from None
        raise _Bad(e.strerror or str(e)) from None
    from reconciler.config.files import FileProblem, read_fd

    try:
        data, st = read_fd(fd, MAX_BYTES.get(name, MAX_FILE_BYTES))
    except FileProblem as e:
        raise _Bad(str(e)) from None
    finally:
        os.close(fd)
    if not data:
        # The writer never writes an empty file: zero bytes is what a crash or a cut-off save leaves.
        raise _Bad("the file is empty (cut off?); delete it if nothing is wanted, or restore it", 1)
    return data, _ident(st)


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _Bad("not valid UTF-8", data[: e.start].count(b"\n") + 1) from None


# ---------------------------------------------------------------- finding the line to blame

_TOML_AT = r"(?s)^(.*?)\s*\(at line (\d+), column (\d+)\)\s*$"
_TOML_AT_END = r"(?s)^(.*?)\s*\(at end of document\)\s*$"
_ANY_HEADER = r"^[ \t]*\["


def _toml_bad(e: Exception, text: str) -> _Bad:
    msg = str(e)
    m = re.match(_TOML_AT, msg)
    if m:
        return _Bad(f"not valid TOML: {m.group(1)} (column {m.group(3)})", int(m.group(2)))
    m = re.match(_TOML_AT_END, msg)
    if m:
        return _Bad(f"not valid TOML: {m.group(1)} at the end of the file (cut off?)", text.count("\n") + 1)
    return _Bad(f"not valid TOML: {msg}")


def _key_re(key: str) -> str:
    k = re.escape(key)
    return rf"""(?:{k}|"{k}"|'{k}')"""


def _first_line(text: str, pattern: str, start: int = 0, end: int | None = None) -> int | None:
    """1-based number of the first line in [start, end) (0-based line indices) matching `pattern`."""
    rx = re.compile(pattern)
    for i, line in enumerate(text.splitlines()[start:end], start):
        if rx.match(line):
            return i + 1
    return None


def _top_key_line(text: str, key: str) -> int | None:
    return _first_line(text, rf"^[ \t]*(?:\[\[?[ \t]*)?{_key_re(key)}[ \t]*(?:=|\]|\.)")


def _entry_line(text: str, kind: str, index: int, key: str | None, id_value: Any) -> int | None:
    """Best effort: the line of `key` in the `index`-th [[kind]] table, else that table's header,
    else the line that gives its id."""
    lines = text.splitlines()
    header = re.compile(rf"^[ \t]*\[\[[ \t]*{_key_re(kind)}[ \t]*\]\]")
    starts = [i for i, line in enumerate(lines) if header.match(line)]
    if index < len(starts):
        start = starts[index]
        end = next((j for j in range(start + 1, len(lines)) if re.match(_ANY_HEADER, lines[j])), len(lines))
        if key:
            found = _first_line(text, rf"^[ \t]*{_key_re(key)}[ \t]*[=.]", start + 1, end)
            if found:
                return found
        return start + 1
    if isinstance(id_value, str) and id_value:
        return _first_line(text, rf"""^.*\bid[ \t]*=[ \t]*["']{re.escape(id_value)}["']""")
    return None


def _id_lines(text: str, id_value: str) -> list[int]:
    rx = re.compile(rf"""^[ \t]*(?:id|"id"|'id')[ \t]*=[ \t]*["']{re.escape(id_value)}["']""")
    return [i + 1 for i, line in enumerate(text.splitlines()) if rx.match(line)]


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "..."


def _first_error(e: Any) -> tuple[str | None, str]:
    """(top-level field, 'field: message (got value)') of a pydantic ValidationError, on one line."""
    err = e.errors()[0]
    loc = [str(x) for x in err.get("loc", ())]
    where = ".".join(loc) or "entry"
    msg = err.get("msg", "invalid")
    if loc == ["id"] and err.get("type") == "string_pattern_mismatch":
        msg = 'must look like "r-12" (r- and a number from 1)'
    if err.get("type") != "missing" and "input" in err and not isinstance(err["input"], dict):
        msg += f" (got {_short(err['input'])})"
    return (loc[0] if loc else None), f"{where}: {msg}"


# ---------------------------------------------------------------- parsing (the reader's rules)


class _SetAside:
    """A queue entry that cannot be used: its id (when it has a usable one) and the line saying why."""

    __slots__ = ("id", "why", "line")

    def __init__(self, rid: str | None, why: str, line: int | None):
        self.id, self.why, self.line = rid, why, line

    def at(self, path: Path) -> str:
        return _Bad(self.why, self.line).at(path)


def _parse_queue(text: str) -> tuple[dict[str, Any], list["Request"], list[_SetAside]]:
    """Parse and validate queue.toml text: (the TOML data, the requests sorted by id number, the
    entries set aside). A file that is not TOML, or whose shape is wrong (unknown top-level keys, a
    bad next_id, duplicate ids), raises _Bad naming the line to blame; one entry with a bad value is
    set aside instead, so that one hostile or mistyped entry never stops everyone else's work."""
    import tomllib

    from pydantic import ValidationError

    from reconciler.core.models import Request

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _toml_bad(e, text) from None

    for key in data:
        if key not in _TOP_KEYS:
            raise _Bad(f"unknown key {_short(key)} (this file holds next_id, [[job]] and [[note]])", _top_key_line(text, key))
    nid = data.get("next_id")
    if nid is not None and (type(nid) is not int or not 1 <= nid <= MAX_ID + 1):
        raise _Bad(f"next_id: must be a whole number from 1 to {MAX_ID + 1}, not {_short(nid)}", _top_key_line(text, "next_id"))

    requests: list[Request] = []
    aside: list[_SetAside] = []
    seen: set[str] = set()
    for kind in KINDS:
        entries = data.get(kind, [])
        if not isinstance(entries, list) or not all(isinstance(x, dict) for x in entries):
            raise _Bad(f"{kind}: must be [[{kind}]] tables", _top_key_line(text, kind))
        for i, raw in enumerate(entries):
            rid = raw.get("id")
            good_id = rid if isinstance(rid, str) and re.fullmatch(r"r-[1-9][0-9]{0,9}", rid) else None
            if good_id is not None:
                if good_id in seen:
                    lines = _id_lines(text, good_id)
                    raise _Bad(f"duplicate id {good_id!r} (ids are unique)", lines[1] if len(lines) > 1 else None)
                seen.add(good_id)
            label = f"{kind} {good_id}" if good_id else f"{kind} #{i + 1}"
            problem = None
            if "kind" in raw and raw["kind"] != kind:
                problem = (f"{label}: kind {_short(raw['kind'])} in a [[{kind}]] table (leave kind out)",
                           _entry_line(text, kind, i, "kind", rid))
            for key, value in raw.items():
                if problem is None and isinstance(value, float) and not math.isfinite(value):
                    problem = (f"{label}: {key}: must be a finite number", _entry_line(text, kind, i, key, rid))
            if problem is None:
                try:
                    requests.append(Request.model_validate({**raw, "kind": kind}, strict=True))
                    continue
                except ValidationError as e:
                    key, what = _first_error(e)
                    problem = (f"{label}: {what}", _entry_line(text, kind, i, key, rid))
            aside.append(_SetAside(good_id, problem[0], problem[1]))
    requests.sort(key=lambda r: r.number)
    return data, requests, aside


def _parse_game(text: str) -> tuple[dict[str, Any], "Game"]:
    import tomllib

    from pydantic import ValidationError

    from reconciler.core.models import Game

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _toml_bad(e, text) from None
    until = data.get("until")
    if isinstance(until, float) and not math.isfinite(until):
        raise _Bad("until: must be a finite number", _top_key_line(text, "until"))
    try:
        game = Game.model_validate(data, strict=True)
    except ValidationError as e:
        key, what = _first_error(e)
        raise _Bad(what, _top_key_line(text, key) if key else None) from None
    return data, game


# ---------------------------------------------------------------- the reader


def _read_text(paths: Paths, target: Path) -> str | None:
    """The text of a desired file, None if it (or the state tree) does not exist. Raises _Bad."""
    for d in (paths.root, paths.desired):
        if os.path.islink(d):
            raise _Bad(f"{d} is a symlink; refusing to use it")
    try:
        dfd = _open_dir(paths.desired)
    except FileNotFoundError:
        return None
    try:
        data = _read_bytes(dfd, target.name)
    finally:
        os.close(dfd)
    return None if data is None else _decode(data)


def read_queue(paths: Paths) -> list["Request"]:
    """The usable requests in queue.toml (sorted by id number); [] if the file does not exist.
    Raises DesiredError (one line `<path>:<line>: <error>`) if it cannot be read at all."""
    return read_queue_set_aside(paths)[0]


def read_queue_set_aside(paths: Paths) -> tuple[list["Request"], list[str]]:
    """(the usable requests, one line per entry set aside). Raises DesiredError like read_queue."""
    try:
        text = _read_text(paths, paths.queue)
        if text is None:
            return [], []
        _, requests, aside = _parse_queue(text)
        return requests, [a.at(paths.queue) for a in aside]
    except _Bad as b:
        raise DesiredError(b.at(paths.queue)) from None


def read_game(paths: Paths, last_good: "Game | None" = None) -> tuple["Game", str | None]:
    """(game, error line). A missing game.toml is game mode off; a broken one gives `last_good`
    (or off if there is none) and its error line."""
    from reconciler.core.models import Game

    try:
        text = _read_text(paths, paths.game)
        return (Game() if text is None else _parse_game(text)[1]), None
    except _Bad as b:
        return (last_good if last_good is not None else Game()), b.at(paths.game)


def read_desired(paths: Paths, last_good: "list[Request] | None" = None, last_good_game: "Game | None" = None) -> DesiredRead:
    """Read both desired files for one reconcile pass.

    read_desired(paths, last_good=None, last_good_game=None) -> DesiredRead(desired, game_error)

    * queue.toml missing: no requests, `queue_ok` True (a real empty state).
    * queue.toml unusable (bad TOML, cut off, empty, a wrong type, an unknown key, a duplicate or
      invalid id, a value the model rejects, a symlink, not a regular file, unreadable): never read as
      empty. `desired.requests` is `last_good` (or []), `queue_ok` False, and `queue_error` one line
      `<path>:<line>: <error>` (`<path>: <error>` when no line is to blame).
    * game.toml missing: game mode off. Unusable: `desired.game` is `last_good_game` (or off) and
      `game_error` is its one-line error; nothing is raised.

    Requests come sorted by id number: the order they were asked in (ids are allocated in order under
    the writer's lock), which is the FIFO order of the queue. Nothing here takes a lock: the writer
    replaces files atomically, so a reader sees a whole old file or a whole new one.
    """
    from reconciler.core.models import Desired

    game, game_error = read_game(paths, last_good_game)
    try:
        text = _read_text(paths, paths.queue)
        requests, aside = ([], []) if text is None else _parse_queue(text)[1:]
    except _Bad as b:
        desired = Desired(requests=list(last_good or []), queue_ok=False, queue_error=b.at(paths.queue), game=game,
                          game_ok=game_error is None)
        return DesiredRead(desired, game_error)
    return DesiredRead(Desired(requests=requests, game=game, game_ok=game_error is None,
                               set_aside=[a.at(paths.queue) for a in aside], held=[a.id for a in aside if a.id]),
                       game_error)


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


def _write_atomic(dfd: int, name: str, data: bytes, durable: bool = True) -> None:
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


def _digest(data: bytes) -> str:
    try:
        from _blake2 import blake2b  # cheap to import; hashlib pulls in OpenSSL (~15 ms)
    except ImportError:  # pragma: no cover
        from hashlib import blake2b
    return blake2b(data, digest_size=20).hexdigest()


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

    def queue(self, data: bytes) -> _Queue | None:
        """The queue as noted, if `data` is exactly the file noted and plain text edits work on it."""
        if not self.plain or self.digest != _digest(data):
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return _Queue(True, text, self.next_id, self.top, dict(self.counts), plain=True)

    @staticmethod
    def save(dfd: int, data: bytes, q: _Queue, floor: int) -> None:
        c = q.counts
        line = f"v1 {_digest(data)} {max(q.next_id, floor)} {q.top} {c.get('job', 0)} {c.get('note', 0)} {int(q.plain)}\n"
        try:
            _write_atomic(dfd, _CACHE_NAME, line.encode(), durable=False)
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
        if note is not None:
            known = note.queue(raw)
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
        return _Queue(True, text, data.get("next_id", 1), top, counts, _plain(text, counts), data, ident)

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

    def _floor(self, q: _Queue, note: _Note | None) -> int:
        """The lowest id number that may be given out besides the file's own counter."""
        if q.data is None:
            return 1  # the writer's own last file: its counter already covers both floors
        return max(self._store_top() + 1, note.next_id if note else 1)

    def _commit_queue(self, dfd: int, q: _Queue, new_text: str, note: _Note | None, op: str = "edit",
                      ids: Iterable[str] = ()) -> None:
        """Write the edited queue, unless the file changed since it was read (an editor saving
        meanwhile does not take the writer's lock): then _Changed, and the caller starts over."""
        data = new_text.encode("utf-8")
        self._replace(dfd, self.paths.queue.name, q.ident, data)
        _Note.save(dfd, data, q, note.next_id if note else 1)
        self._log_change(dfd, "queue.toml", op, list(ids), data)

    def _log_change(self, dfd: int, file: str, op: str, ids: list[str], data: bytes) -> None:
        """One line in `.changes.jsonl` per change the writer made: when, which file, what, who asked,
        and the digest of the file it left (a pass tells changes made outside res by it)."""
        from reconciler.observed.procs import process_chain

        who = self.who or process_chain(os.getpid())
        line = json.dumps({"at": time.time(), "file": file, "op": op, "ids": ids, "who": who,
                           "digest": _digest(data)}, separators=(",", ":")) + "\n"
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
        _write_atomic(dfd, name, data)

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
        [[note]] table. Returns the Request as written (and as the reader will read it back).

        The common case is a plain text edit (the new table appended, the counter's digits
        replaced), checked by reading the new pieces back; a file the plain edit cannot handle
        exactly (multi-line strings, inline arrays of tables, ...) is edited with tomlkit and the
        whole result checked against the intended data."""
        from pydantic import ValidationError

        from reconciler.core.models import Request

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
            req = Request.model_validate({**fields, "id": "r-1", "kind": kind})
        except ValidationError as e:
            raise DesiredError(f"{kind}: {_first_error(e)[1]}; nothing was written") from None
        _check_text("title", req.title)
        _check_text("project", req.project)
        _check_text("cwd", req.cwd)
        for i, arg in enumerate(req.cmd):
            _check_text(f"cmd[{i}]", arg)
        for k, v in req.env.items():
            _check_text(f"env {k!r}", k)
            _check_text(f"env {k}", v)
            if "=" in k or not k:
                raise DesiredError(f"env {k!r}: not a variable name")
        if req.lock is not None:
            _check_text("lock", req.lock)
        if req.owner_name is not None:
            _check_text("owner_name", req.owner_name)

        base = _entry_dict(req)

        def edit(dfd: int) -> "Request":
            note = _Note.load(dfd)
            q = self._load_queue(dfd, note)
            n = max(q.next_id, q.top + 1, self._floor(q, note))
            if n > MAX_ID:
                raise DesiredError(f"{self.paths.queue}: no ids left (next would be r-{n}); nothing was changed")
            entry = {"id": f"r-{n}", **base}
            # exactly what the reader will make of the new table
            try:
                made = Request.model_validate({**entry, "kind": kind}, strict=True)
            except ValidationError as e:
                raise DesiredError(f"{kind}: {_first_error(e)[1]}; nothing was written") from None
            new_text = self._added_plain(q, kind, entry, n + 1) if q.plain else None
            q.counts = {**q.counts, kind: q.counts.get(kind, 0) + 1}
            if new_text is None:
                q = self._full(dfd, q)
                new_text = self._added_tomlkit(q, kind, entry, n + 1)
                q.counts = {k: len(q.data.get(k, [])) + (k == kind) for k in KINDS}
                q.plain = _plain(new_text, q.counts)
            # (a plain edit of plain text stays plain: the block has one bare header, no multi-line string)
            q.next_id, q.top = n + 1, n
            self._commit_queue(dfd, q, new_text, note, "add", [made.id])
            return made

        return self._retrying(edit)

    def _added_plain(self, q: _Queue, kind: str, entry: dict[str, Any], next_id: int) -> str | None:
        import tomllib

        block = _entry_text(kind, entry)
        text = _set_next_id(q.text, next_id)
        if text is None:
            return None
        # Read the pieces back: the new table alone, and the part before the first table (which in
        # plain text holds nothing but comments and next_id).
        if tomllib.loads(block) != {kind: [entry]}:
            raise DesiredError(f"{self.paths.queue}: the new entry would not read back as written; nothing was changed")
        cut = re.search(_HEADER_M, text)
        head = text[: cut.start()] if cut else text
        if tomllib.loads(head) != {"next_id": next_id}:
            return None
        if text and not text.endswith("\n"):
            text += "\n"
        return text + block

    def _added_tomlkit(self, q: _Queue, kind: str, entry: dict[str, Any], next_id: int) -> str:
        import tomlkit

        assert q.data is not None
        try:
            doc = tomlkit.parse(q.text)
            doc["next_id"] = next_id
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
        expected[kind] = list(q.data.get(kind, [])) + [entry]
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
                # The writer's own last file, validated and plain: a plain text edit, each removed
                # table checked on its own. (Its counter is already past every id in it.)
                done = _remove_plain(q.text, wanted)
                if done is not None:
                    new_text, removed = done
                    if not removed:
                        return []
                    for kind in removed.values():
                        q.counts[kind] -= 1
                    self._commit_queue(dfd, q, new_text, note, "remove", list(removed))
                    return [i for i in wanted if i in removed]
                q = self._full(dfd, q)
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
            next_id = max(q.next_id, q.top + 1)
            expected: dict[str, Any] = dict(q.data)
            expected["next_id"] = next_id
            for kind, idx in doomed.items():
                expected[kind] = [e for i, e in enumerate(q.data[kind]) if i not in idx]
            counts = {k: len(expected.get(k, [])) for k in KINDS}

            new_text = None
            if q.plain:
                done = _remove_plain(q.text, found)
                text = done[0] if done is not None else None
                if text is not None and next_id != q.data.get("next_id"):
                    text = _set_next_id(text, next_id)
                if text is not None:
                    try:
                        self._verify(text, expected)
                        new_text = text
                    except DesiredError:
                        pass
            if new_text is None:
                new_text = self._removed_tomlkit(q, doomed, next_id, expected)
            q.next_id, q.counts = next_id, counts
            q.plain = _plain(new_text, counts)
            self._commit_queue(dfd, q, new_text, note, "remove", sorted(found))
            return [i for i in wanted if i in found]

        return self._retrying(edit)

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
            next_id = max(q.next_id, q.top + 1, max(r.number for r in missing) + 1)
            text = _set_next_id(q.text, next_id) if q.plain else None
            if text is not None:
                blocks = "".join(_entry_text(r.kind, {"id": r.id, **_entry_dict(r)}) for r in missing)
                text = (text if text.endswith("\n") or not text else text + "\n") + blocks
            expected: dict[str, Any] = dict(q.data)
            expected["next_id"] = next_id
            for kind in KINDS:
                added = [{"id": r.id, **_entry_dict(r)} for r in missing if r.kind == kind]
                if added:
                    expected[kind] = list(q.data.get(kind, [])) + added
            if text is not None:
                try:
                    self._verify(text, expected)
                except DesiredError:
                    text = None
            if text is None:
                import tomlkit

                try:
                    doc = tomlkit.parse(q.text)
                    doc["next_id"] = next_id
                    for r in missing:
                        table = tomlkit.table()
                        for k, v in {"id": r.id, **_entry_dict(r)}.items():
                            table.append(k, _to_tomlkit(v))
                        if r.kind not in doc:
                            doc.append(r.kind, tomlkit.aot())
                        doc[r.kind].append(table)
                    text = tomlkit.dumps(doc)
                except Exception as e:
                    raise DesiredError(f"{self.paths.queue}: could not write entries back ({' '.join(str(e).split())})") from None
                self._verify(text, expected)
            q.next_id, q.top = next_id, max(q.top, max(r.number for r in missing))
            q.counts = {k: len(expected.get(k, [])) for k in KINDS}
            q.plain = _plain(text, q.counts)
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

        from reconciler.core.models import Game

        if until is not None and not (isinstance(until, (int, float)) and math.isfinite(until)):
            raise DesiredError(f"until {until!r}: must be a finite time")
        try:
            game = Game.model_validate({"on": on, "until": None if until is None else float(until)}, strict=True)
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
            self._replace(dfd, path.name, ident, new_text.encode("utf-8"))
            self._log_change(dfd, "game.toml", "on" if game.on else "off", [], new_text.encode("utf-8"))
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
                    exists = _read_bytes(dfd, name) is not None
                except _Bad:
                    exists = True  # present but unusable: only `force` replaces it
                if exists and not force:
                    continue
                text = _template(name)
                if name == "queue.toml":
                    note = _Note.load(dfd)
                    n = max(self._store_top() + 1, note.next_id if note else 1)
                    if exists:
                        try:
                            q = self._load_queue(dfd)
                            n = max(n, q.next_id, q.top + 1)
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
                        self._commit_queue(dfd, fresh, text, None, "init")
                    except _Changed:
                        raise DesiredError(f"{target}: appeared while it was being laid down; try again") from None
                else:
                    _write_atomic(dfd, name, text.encode("utf-8"))
                    self._log_change(dfd, name, "init", [], text.encode("utf-8"))
                written.append(target)
        return written


_KEY_ORDER = ("title", "project", "mem_gb", "cpus", "est_s", "created", "queue", "lock", "force", "cmd", "cwd", "agent", "env", "owner_pid", "owner_name")


def _entry_dict(req: "Request") -> dict[str, Any]:
    """The table for a request, without id and kind, in the documented key order: every field of a
    job; a note leaves out the job-only keys while they are empty; None is left out (TOML has no
    null); float fields are written as floats (`cpus = 1.0`, not `1`)."""
    fields = type(req).model_fields
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
        if isinstance(value, list):
            value = list(value)
        elif isinstance(value, dict):
            value = dict(value)
        elif fields[name].annotation is float and type(value) is int:
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
