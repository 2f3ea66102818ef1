"""The desired files' text as the writer writes it (DESIGN §2, §4): a request as the table that holds
it, in the documented key order (`entry_dict`), TOML text for new tables (`entry_text`) or tomlkit
items when tomlkit edits the file (`to_tomlkit`), and the plain text edits that keep the writer from
parsing and re-serialising the whole file on every `res run` (`set_next_id`, `remove_plain`, valid
only for text `is_plain` vouches for). Each caller checks that what it made reads back as intended.

Import-light (`res run` appends through it): tomllib, tomlkit and models are imported inside the
functions that need them, and tomlkit only when the file cannot be edited as plain text.
"""
from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Iterable

from reconciler.desired.toml_in import KINDS

if TYPE_CHECKING:
    from reconciler.core.models import Request

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


def entry_text(kind: str, entry: dict[str, Any]) -> str:
    """A new `[[kind]]` table holding `entry`, after a blank line: what the writer appends."""
    lines = ["", f"[[{kind}]]"] + [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in entry.items()]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- plain text edits

_NEXT_ID_LINE = r"(?m)^([ \t]*next_id[ \t]*=[ \t]*)([1-9][0-9]*|0)([ \t]*(?:#[^\n]*)?)$"
_NEXT_ID_ANY = r"""(?m)^[ \t]*(?:next_id|"next_id"|'next_id')[ \t]*[=.]"""
_HEADER_M = r"(?m)^[ \t]*\["


def set_next_id(text: str, n: int) -> str | None:
    """`text` with the top-level `next_id = n` (replaced in place, or added before the first table);
    None if that cannot be done as a plain text edit (the caller then uses tomlkit).
    Only for `plain` text (see is_plain): every line that looks like a header or a key is one."""
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


def head_of(text: str) -> str:
    """The part of `text` before its first table (in `plain` text: comments and next_id only)."""
    m = re.search(_HEADER_M, text)
    return text[: m.start()] if m else text


def _header_lines(text: str, kind: str) -> list[int]:
    """0-based indices of the lines that are a bare `[[kind]]` header (in `plain` text)."""
    out, pos, line = [], 0, 0
    for m in re.finditer(rf"(?m)^[ \t]*\[\[[ \t]*{kind}[ \t]*\]\][ \t]*(?:#.*)?$", text):
        line += text.count("\n", pos, m.start())
        pos = m.start()
        out.append(line)
    return out


def is_plain(text: str, counts: dict[str, int]) -> bool:
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


def remove_plain(text: str, ids: Iterable[str]) -> tuple[str, dict[str, str]] | None:
    """Plain text edit: remove the `[[job]]` / `[[note]]` tables with these ids from `plain` text
    (see is_plain) that has been validated. Returns (new text, {id: kind} of those removed), or None if
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


# ---------------------------------------------------------------- tomlkit items


def to_tomlkit(v: Any) -> Any:
    """`v` as a tomlkit item, tables inline (a value inside a new [[kind]] table)."""
    import tomlkit

    if isinstance(v, dict):
        t = tomlkit.inline_table()
        for k, x in v.items():
            t.append(k, to_tomlkit(x))
        return t
    if isinstance(v, list):
        a = tomlkit.array()
        for x in v:
            a.append(to_tomlkit(x))
        return a
    return tomlkit.item(v)


# ---------------------------------------------------------------- a request as a table


KEY_ORDER = ("title", "project", "mem_gb", "cpus", "est_s", "created", "since", "queue", "lock", "force", "on", "gated", "auto", "sized_from", "grown_from_gb", "book_gb", "booked_from", "node_requeues", "cmd", "cwd", "agent", "env", "owner_pid", "owner_name", "by", "task", "batch", "reply_to")


def entry_dict(req: "Request") -> dict[str, Any]:
    """The table for a request, without id and kind, in the documented key order: every field of a
    job; a note leaves out the job-only keys while they are empty; None is left out (TOML has no
    null); float fields are written as floats (`cpus = 1.0`, not `1`)."""
    from dataclasses import fields as fields_of

    from reconciler.core.models import FLOAT_FIELDS

    fields = [f.name for f in fields_of(req)]
    names = [n for n in KEY_ORDER if n in fields] + [n for n in fields if n not in KEY_ORDER]
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
