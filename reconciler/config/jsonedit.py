"""A JSON document (or JSONC, with // and /* */ comments: config/jsonc.py) edited as text, not
re-serialized: the span of each value and member, and the text with one item added at the end of a
list or an object, one taken out, or one value replaced. Everything else stays byte for byte, the
comments too. A new item is laid out as the file lays out what is around it (its indentation and
newlines; its neighbour's levels on one line or one item a line, its separators; a block written on
one line in a laid-out file gets the new items each on a line below it), and only bytes are added,
so taking the item out again gives the old text back.

Its one user is `res hook install` (commands/hookinstall.py), which edits the agent CLIs' settings
files this way so that a user's file keeps its comments and layout. Pure (text in, text out) and
import-light: json and re.
"""
from __future__ import annotations

import json
import re  # json imports it already: free
from typing import NamedTuple

from reconciler.config.jsonc import blanked, comment_spans


class SettingsError(Exception):
    """One line, naming the file; nothing was written."""


class Node:
    """A value in the text: `kind` "{", "[" or "" (a scalar); [start, end) its span; `items` of a container."""

    __slots__ = ("kind", "start", "end", "items")

    def __init__(self, kind: str, start: int):
        self.kind, self.start, self.end, self.items = kind, start, start, []


class Item:
    """A member (key set) or element of a container: [start, value.end) its span; `comma` the index of
    the comma after it, or -1."""

    __slots__ = ("key", "start", "value", "comma")

    def __init__(self, key: str | None, start: int, value: Node):
        self.key, self.start, self.value, self.comma = key, start, value, -1


class Doc(NamedTuple):
    text: str
    data: dict
    root: Node
    comments: list  # [(start, end)] of every comment


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


_WS = " \t\n\r"


def _skip(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def _tree(s: str, i: int) -> Node:
    """The spans of the JSON value at `i` of `s` (valid JSON: json.loads has already read it)."""
    c = s[i]
    if c in "{[":
        node, close = Node(c, i), "}" if c == "{" else "]"
        i = _skip(s, i + 1)
        if s[i] == close:
            node.end = i + 1
            return node
        while True:
            key, start = None, i
            if c == "{":
                end = _STRING.match(s, i).end()
                key = json.loads(s[i:end])
                i = _skip(s, _skip(s, end) + 1)  # past the colon
            value = _tree(s, i)
            item = Item(key, start, value)
            node.items.append(item)
            i = _skip(s, value.end)
            if s[i] == ",":
                item.comma = i
                i = _skip(s, i + 1)
                continue
            node.end = i + 1
            return node
    node = Node("", i)
    node.end = (_STRING if c == '"' else _SCALAR).match(s, i).end()
    return node


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SCALAR = re.compile(r"[-+0-9.eEa-z]+")  # a number, true, false, null


def parse(text: str, comments_ok: bool, name: str) -> Doc:
    """The document, or SettingsError: not JSON (with comments if `comments_ok`), not an object."""
    try:
        comments = comment_spans(text) if comments_ok else []
        plain = blanked(text, comments)
        data = json.loads(plain, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise SettingsError(f"{name}: not valid JSON (line {e.lineno} column {e.colno}: {e.msg}); "
                            "nothing written") from None
    except (ValueError, RecursionError) as e:
        raise SettingsError(f"{name}: not valid JSON ({e}); nothing written") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{name}: not a JSON object; nothing written")
    try:
        root = _tree(plain, _skip(plain, 0))
    except RecursionError:
        raise SettingsError(f"{name}: nested too deeply; nothing written") from None
    return Doc(text, data, root, comments)


def member(node: Node, key: str, name: str, where: str) -> Item | None:
    found = [it for it in node.items if it.key == key]
    if len(found) > 1:
        raise SettingsError(f"{name}: {where} has the key {key!r} twice; nothing written")
    return found[0] if found else None


def value_of(node: Node, key: str) -> Node:
    """The value of the last member `key` of an object node (the one JSON readers keep)."""
    return [it for it in node.items if it.key == key][-1].value


def has_comment(doc: Doc, start: int, end: int) -> bool:
    return any(start <= s and e <= end for s, e in doc.comments)


def _line_indent(text: str, pos: int) -> str:
    """The leading whitespace of the line `pos` is on."""
    start = text.rfind("\n", 0, pos) + 1
    end = start
    while end < len(text) and text[end] in " \t":
        end += 1
    return text[start:end]


def _starts_line(text: str, pos: int) -> bool:
    return text[text.rfind("\n", 0, pos) + 1:pos].strip(" \t") == ""


class _Style(NamedTuple):
    unit: str  # one level of indentation
    compact: bool  # the whole document on one line
    comma: str  # "," or ", " between items on one line
    colon: str  # ":" or ": "
    newline: str  # "\n" or "\r\n"
    inline_at: float  # how deep below a new value its containers go on one line (0: all of it; inf: none)
    pad_object: str = ""  # " " inside the braces of an object on one line, as `{ "a": 1 }`
    pad_list: str = ""  # likewise for a list's brackets


_NEVER = float("inf")  # no level of a value on one line: one item a line all the way down


def _separators(text: str, node: Node) -> dict:
    """How the file writes things on one line under `node`, breadth first: the first comma between
    items on a line (with or without a space after), the first colon, and whether a non-empty object
    and a list written on one line have a space inside their brackets (`{ "a": 1 }`). Only what is
    found is in the answer."""
    found: dict = {}
    todo = [node]
    while todo and len(found) < 4:
        node = todo.pop(0)
        if node.kind and node.items and "\n" not in text[node.start:node.end]:
            found.setdefault(node.kind, " " if text[node.start + 1] in " \t" else "")
        for it in node.items:
            if it.key is not None:
                found.setdefault(":", ": " if text[it.start:it.value.start].endswith((" ", "\t")) else ":")
            after = text[it.comma + 1:it.comma + 2] if it.comma >= 0 else "\n"
            if after not in ("\n", "\r"):  # a comma that ends a line says nothing
                found.setdefault(",", ", " if after in (" ", "\t") else ",")
            todo.append(it.value)
    return found


def _inline_depth(text: str, node: Node) -> float:
    """How deep below `node` (0: `node` itself) the file first writes a non-empty container on one line."""
    if not node.kind or not node.items:
        return _NEVER
    if "\n" not in text[node.start:node.end]:
        return 0
    return 1 + min(_inline_depth(text, it.value) for it in node.items)


def _style(doc: Doc, node: Node) -> _Style:
    """How the file lays out what goes into `node`: its indentation unit and newline, and the layout of
    `node`'s last item that holds something (its neighbour): which of its levels are on one line, and
    its separators there (else the file's, else ", " and ": ")."""
    text, root = doc.text, doc.root
    unit = "  "
    for line in text[root.start:root.end].split("\n")[1:]:
        lead = line[: len(line) - len(line.lstrip(" \t"))]
        if lead and line.strip():
            unit = "\t" if lead[0] == "\t" else " " * min(len(lead), 8)
            break
    model = next((it.value for it in reversed(node.items) if it.value.kind and it.value.items), None)
    seps = {",": ", ", ":": ": ", "{": "", "[": ""} | _separators(text, root) | (_separators(text, model) if model else {})
    inline_at = _inline_depth(text, model) if model else _NEVER
    newline = "\r\n" if "\r\n" in text else "\n"
    return _Style(unit, "\n" not in text[root.start:root.end], seps[","], seps[":"], newline, inline_at,
                  seps["{"], seps["["])


def _render(value: object, indent: str, style: _Style, depth: float = 0) -> str:
    """`value` as JSON laid out as its neighbour is: a container `style.inline_at` levels down (or
    deeper) on one line, those above one item a line, indented by the file's unit, every line after
    the first starting at `indent`."""
    if not isinstance(value, (dict, list)) or not value:
        return json.dumps(value, ensure_ascii=False)
    if depth >= style.inline_at:
        return _dump_one_line(value, style)
    inner = indent + style.unit
    if isinstance(value, dict):
        items = [json.dumps(k, ensure_ascii=False) + style.colon + _render(v, inner, style, depth + 1)
                 for k, v in value.items()]
    else:
        items = [_render(v, inner, style, depth + 1) for v in value]
    brackets = "{}" if isinstance(value, dict) else "[]"
    between = "," + style.newline + inner
    return brackets[0] + style.newline + inner + between.join(items) + style.newline + indent + brackets[1]


def _dump_one_line(value: object, style: _Style) -> str:
    if not isinstance(value, (dict, list)) or not value:
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        body = style.comma.join(json.dumps(k, ensure_ascii=False) + style.colon + _dump_one_line(v, style)
                                for k, v in value.items())
        return "{" + style.pad_object + body + style.pad_object + "}"
    body = style.comma.join(_dump_one_line(v, style) for v in value)
    return "[" + style.pad_list + body + style.pad_list + "]"


def _item(key: str | None, value: object, indent: str, style: _Style) -> str:
    body = _render(value, indent, style)
    return body if key is None else json.dumps(key, ensure_ascii=False) + style.colon + body


def _parent(doc: Doc, node: Node) -> Node | None:
    """The container that holds `node` (None: the root)."""
    todo = [doc.root]
    while todo:
        parent = todo.pop()
        for it in parent.items:
            if it.value is node:
                return parent
            if it.value.start <= node.start < it.value.end:
                todo.append(it.value)
    return None


def _on_one_line(doc: Doc, node: Node) -> bool:
    return "\n" not in doc.text[node.start:node.end]


def _stays_on_its_line(doc: Doc, node: Node) -> bool:
    """Whether what goes into `node`, a block written on one line, stays on that line: the block is
    inside another one-line block, or its neighbours that hold something are one-line blocks too (the
    file writes them one a line). Else the block is the odd one out in a laid-out file, and what goes
    into it goes on lines of its own below it."""
    parent = _parent(doc, node)
    if parent is None:
        return False
    if _on_one_line(doc, parent):
        return True
    others = [it.value for it in parent.items if it.value is not node and it.value.kind and it.value.items]
    return bool(others) and all(_on_one_line(doc, o) for o in others)


def append(doc: Doc, node: Node, key: str | None, value: object) -> str:
    """The text with `value` (a member `key` of an object node, else an element) added at the end of
    `node`, after any comment there, laid out as the items around it (_style): on a line of its own
    unless the whole document is one line; a block written on one line inside a laid-out file gets
    its new items each on a line below it (inside such a block, they stay on its line). A comma goes
    right after the last item (never after a comment). Only bytes are added, so uninstall can take
    out exactly them."""
    text, style = doc.text, _style(doc, node)
    nl = style.newline
    inline = style._replace(inline_at=0)  # a one-line document: all of it on one line
    if node.items:
        after_last = node.items[-1].value.end
        tail = [c for c in doc.comments if after_last <= c[0] and c[1] <= node.end]
        anchor = tail[-1][1] if tail else after_last
        last_line_comment = bool(tail) and text.startswith("//", tail[-1][0])
        if not style.compact and (_starts_line(text, node.items[-1].start) or last_line_comment):
            indent = _line_indent(text, node.items[-1].start)
            item = nl + indent + _item(key, value, indent, style)
        elif not style.compact and not _stays_on_its_line(doc, node):  # a block on one line: below it
            indent = _line_indent(text, node.start) + style.unit
            item = nl + indent + _item(key, value, indent, style)
        elif last_line_comment:  # a one-line document ending in a // comment: the item goes on a new line
            item = nl + _item(key, value, "", inline)
        else:
            item = style.comma[1:] + _item(key, value, "", inline)
        return text[:after_last] + "," + text[after_last:anchor] + item + text[anchor:]
    inside = [c for c in doc.comments if node.start < c[0] and c[1] <= node.end]
    if (style.compact or _stays_on_its_line(doc, node)) and not inside:
        return text[:node.start + 1] + _item(key, value, "", inline) + text[node.end - 1:]
    outer = _line_indent(text, node.start)
    indent = outer + style.unit
    item = _item(key, value, indent, style)
    if not inside:
        return text[:node.start + 1] + nl + indent + item + nl + outer + text[node.end - 1:]
    anchor = inside[-1][1]
    return text[:anchor] + nl + indent + item + text[anchor:]


def remove(doc: Doc, node: Node, index: int) -> str:
    """The text without item `index` of `node` and its comma; the comments around it stay."""
    text, items = doc.text, node.items
    it = items[index]
    start, end = it.start, it.value.end
    if len(items) == 1:
        if not has_comment(doc, node.start, node.end):
            return text[:node.start + 1] + text[node.end - 1:]
        before = [c[1] for c in doc.comments if node.start < c[0] and c[1] <= start]
        cut = max(before, default=node.start + 1)
        return text[:cut] + text[end:]
    if index > 0:
        comma = items[index - 1].comma
        before = [c[1] for c in doc.comments if comma < c[0] and c[1] <= start]
        cut = max(before, default=comma + 1)
        return text[:comma] + text[comma + 1:cut] + text[end:]
    comma = it.comma
    if not has_comment(doc, end, comma):
        return text[:start] + text[_skip(text, comma + 1):]
    return text[:start] + text[end:comma] + text[comma + 1:]


def replace(doc: Doc, node: Node, value: object) -> str:
    return doc.text[:node.start] + json.dumps(value, ensure_ascii=False) + doc.text[node.end:]
