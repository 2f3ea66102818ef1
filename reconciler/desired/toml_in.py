"""The desired files' text and what it must say (DESIGN §2, §4), for the reader and the writer:
queue.toml and game.toml parsed and validated, and the line to blame when they are wrong.

queue.toml holds `next_id` and `[[job]]` / `[[note]]` tables; each table is one `models.Request` whose
`kind` is the array it is in (`kind` itself is not stored). game.toml holds `on` and an optional
`until` (`models.Game`). The shipped annotated templates are `state/queue.toml` and `state/game.toml`.

A file that is not TOML or has the wrong shape raises `disk.Bad` naming the line to blame; one queue
entry with a bad value is set aside instead (`SetAside`), so that one hostile or mistyped entry never
stops everyone else's work.

Import-light (the hook and `res run` read these files): tomllib and pydantic (via models) are
imported inside the functions that need them.
"""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconciler.config.memo import ByIdentity
from reconciler.desired.disk import Bad

if TYPE_CHECKING:
    from reconciler.core.models import Game, Request

KINDS = ("job", "note")
MAX_ID = 9_999_999_999  # models.Request: r-[1-9][0-9]{0,9}
_TOP_KEYS = ("next_id",) + KINDS


# ---------------------------------------------------------------- finding the line to blame

_TOML_AT = r"(?s)^(.*?)\s*\(at line (\d+), column (\d+)\)\s*$"
_TOML_AT_END = r"(?s)^(.*?)\s*\(at end of document\)\s*$"
_ANY_HEADER = r"^[ \t]*\["


def _toml_bad(e: Exception, text: str) -> Bad:
    msg = str(e)
    m = re.match(_TOML_AT, msg)
    if m:
        return Bad(f"not valid TOML: {m.group(1)} (column {m.group(3)})", int(m.group(2)))
    m = re.match(_TOML_AT_END, msg)
    if m:
        return Bad(f"not valid TOML: {m.group(1)} at the end of the file (cut off?)", text.count("\n") + 1)
    return Bad(f"not valid TOML: {msg}")


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


def first_error(e: Any, model: Any = None) -> tuple[str | None, str]:
    """(top-level field, `field = value: what is wrong; allowed: …`) of a pydantic ValidationError of
    `model` (a Request when not said), on one line, in res's words (core/invalid.py)."""
    from reconciler.core.invalid import first

    if model is None:
        from reconciler.core.models import Request as model
    return first(e.errors(), model)


# ---------------------------------------------------------------- parsing (the reader's rules)


class SetAside:
    """A queue entry that cannot be used: its id (when it has a usable one) and the line saying why."""

    __slots__ = ("id", "why", "line")

    def __init__(self, rid: str | None, why: str, line: int | None):
        self.id, self.why, self.line = rid, why, line

    def at(self, path: Path) -> str:
        return Bad(self.why, self.line).at(path)


# Tables of queue.toml already parsed, by their text: a pass re-reads the whole queue every time, and
# tomllib takes ~80 ms for 1,000 entries; with this, only entries not seen before are parsed. Bounded:
# dropped whole when it outgrows a big queue.
_TABLES: dict[str, tuple[str, dict[str, Any]]] = {}
_TABLES_LIMIT = 50_000
_VALID = ByIdentity(_TABLES_LIMIT)  # a shared table -> its Request
_HEADER = re.compile(r"(?m)^[ \t]*\[[^\n]*")
_BARE = re.compile(r"[ \t]*\[\[[ \t]*(job|note)[ \t]*\]\][ \t]*(?:#.*)?")


def loads_queue(text: str) -> dict[str, Any]:
    """`tomllib.loads(text)` for queue.toml, each `[[job]]` / `[[note]]` table parsed once per
    process. When the text has no multi-line string and every header is a bare `[[job]]` or
    `[[note]]`, the document is its head (top-level keys) followed by independent tables, so parsing
    them one by one gives exactly the whole parse; any other text, or a piece that does not parse as
    one table, is parsed whole (tomllib then judges it, errors and their lines included). The tables
    returned may be shared: read them, never change them."""
    import tomllib

    first = _HEADER.search(text)
    if first is None or '"""' in text or "'''" in text:
        return tomllib.loads(text)
    start = first.start()
    try:
        data = tomllib.loads(text[:start])
    except tomllib.TOMLDecodeError:
        return tomllib.loads(text)
    if any(kind in data for kind in KINDS):
        return tomllib.loads(text)
    tables = _tables(text, start)
    if tables is None:
        return tomllib.loads(text)
    for kind, table in tables:
        data.setdefault(kind, []).append(table)
    return data


# The body (from the first header on) last split, where its last block began, and its tables: the
# writer appends, so the next text usually starts with the same body and only its tail is new.
_LAST_BODY: list = [None, 0, []]


def _tables(text: str, start: int) -> "list[tuple[str, dict[str, Any]]] | None":
    """The (kind, table) of every block of the body `text[start:]`, or None if one is not a bare
    `[[job]]` / `[[note]]` table that parses alone."""
    import tomllib

    body = text[start:]
    old_body, old_last, old_tables = _LAST_BODY
    if old_body is not None and old_tables and body.startswith(old_body):
        # The blocks before the old last one are the same text: only the last (it may have grown)
        # and what follows it are split and looked up.
        tables, pos = old_tables[:-1], old_last
    else:
        tables, pos = [], 0
    if len(_TABLES) > _TABLES_LIMIT:
        _TABLES.clear()
    heads = list(_HEADER.finditer(body, pos))
    ends = [m.start() for m in heads[1:]] + [len(body)]
    for m, end in zip(heads, ends):
        block = body[m.start():end]
        known = _TABLES.get(block)
        if known is None:
            bare = _BARE.fullmatch(m.group())
            if bare is None:
                return None  # a sub-table or another kind of table: the whole parse
            kind = bare.group(1)
            try:
                got = tomllib.loads(block)
            except tomllib.TOMLDecodeError:
                return None
            if list(got) != [kind] or len(got[kind]) != 1:
                return None
            known = _TABLES[block] = (kind, got[kind][0])
        tables.append(known)
    if heads:
        _LAST_BODY[:] = [body, heads[-1].start(), tables]
    return tables


def known_table(block: str, kind: str, table: dict[str, Any]) -> None:
    """The writer's word for a table it appended as `block` (a blank line, then `[[kind]]` and its
    keys) and read back as `table`: the reader's split gives that block without its leading line
    end, followed by the blank line before the next table or by nothing."""
    if len(_TABLES) < _TABLES_LIMIT and block.startswith("\n"):
        _TABLES[block[1:]] = _TABLES[block[1:] + "\n"] = (kind, table)


def parse_queue(text: str) -> tuple[dict[str, Any], list["Request"], list[SetAside]]:
    """Parse and validate queue.toml text: (the TOML data, the requests sorted by id number, the
    entries set aside). A file that is not TOML, or whose shape is wrong (unknown top-level keys, a
    bad next_id, duplicate ids), raises Bad naming the line to blame; one entry with a bad value is
    set aside instead, so that one hostile or mistyped entry never stops everyone else's work."""
    import tomllib

    from pydantic import ValidationError

    from reconciler.core.models import Request, parse

    try:
        data = loads_queue(text)
    except tomllib.TOMLDecodeError as e:
        raise _toml_bad(e, text) from None

    for key in data:
        if key not in _TOP_KEYS:
            raise Bad(f"unknown key {_short(key)} (this file holds next_id, [[job]] and [[note]])", _top_key_line(text, key))
    nid = data.get("next_id")
    if nid is not None and (type(nid) is not int or not 1 <= nid <= MAX_ID + 1):
        raise Bad(f"next_id: must be a whole number from 1 to {MAX_ID + 1}, not {_short(nid)}", _top_key_line(text, "next_id"))

    requests: list[Request] = []
    aside: list[SetAside] = []
    seen: set[str] = set()
    for kind in KINDS:
        entries = data.get(kind, [])
        if not isinstance(entries, list) or not all(isinstance(x, dict) for x in entries):
            raise Bad(f"{kind}: must be [[{kind}]] tables", _top_key_line(text, kind))
        for i, raw in enumerate(entries):
            known = _VALID.peek(raw)
            if known is not None and known.kind == kind:
                # A table read and validated before: the same Request (only duplicates to check).
                if known.id in seen:
                    lines = _id_lines(text, known.id)
                    raise Bad(f"duplicate id {known.id!r} (ids are unique)", lines[1] if len(lines) > 1 else None)
                seen.add(known.id)
                requests.append(known)
                continue
            rid = raw.get("id")
            good_id = rid if isinstance(rid, str) and re.fullmatch(r"r-[1-9][0-9]{0,9}", rid) else None
            if good_id is not None:
                if good_id in seen:
                    lines = _id_lines(text, good_id)
                    raise Bad(f"duplicate id {good_id!r} (ids are unique)", lines[1] if len(lines) > 1 else None)
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
                    requests.append(_VALID.get(raw, lambda r: parse(Request, {**r, "kind": kind})))
                    continue
                except ValidationError as e:
                    key, what = first_error(e)
                    problem = (f"{label}: {what}", _entry_line(text, kind, i, key, rid))
            aside.append(SetAside(good_id, problem[0], problem[1]))
    requests.sort(key=lambda r: r.number)
    return data, requests, aside


def parse_game(text: str) -> tuple[dict[str, Any], "Game"]:
    import tomllib

    from pydantic import ValidationError

    from reconciler.core.models import Game, parse

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise _toml_bad(e, text) from None
    until = data.get("until")
    if isinstance(until, float) and not math.isfinite(until):
        raise Bad("until: must be a finite number", _top_key_line(text, "until"))
    try:
        game = parse(Game, data)
    except ValidationError as e:
        key, what = first_error(e, Game)
        raise Bad(what, _top_key_line(text, key) if key else None) from None
    return data, game
