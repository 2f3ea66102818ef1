"""`res hook install`: the gate's hook written into each agent CLI's own settings file (DESIGN §5.8),
and `--uninstall` taking out exactly what it wrote. These entries per file, all running C (and after
them each CLI's post-tool events: Claude Code PostToolUse and PostToolUseFailure, Codex PostToolUse
with its trust entry post_tool_use, Gemini CLI AfterTool, matched as the gate's, 10 s; they release
what a command admitted in place booked, docs/agent-hooks.md):

    claude  $CLAUDE_CONFIG_DIR/settings.json, else ~/.claude/settings.json; project .claude/settings.json
            hooks.PreToolUse += {"matcher": "Bash", "hooks": [{"type": "command", "command": C, "timeout": 30}]}
            hooks.SessionStart += {"hooks": [{"type": "command", "command": C, "timeout": 10}]}
    codex   $CODEX_HOME/hooks.json, else ~/.codex/hooks.json; project .codex/hooks.json
            the same entries, and their trust in the user's config.toml (Codex skips an untrusted hook
            silently): one per entry, labels pre_tool_use and session_start
    gemini  $GEMINI_CLI_HOME/.gemini/settings.json, else ~/.gemini/settings.json; project .gemini/settings.json
            hooks.BeforeTool += {"matcher": "^run_shell_command$", "hooks": [{"type": "command",
            "name": "res gate", "command": C, "timeout": 30000}]}       (milliseconds; // and /* */ allowed)
            hooks.SessionStart += {"hooks": [{"type": "command", "name": "res gate", "command": C,
            "timeout": 10000}]}

C is `<absolute res> hook --agent <cli>`: before a shell command it gates it; at SessionStart (no
matcher: every source) it tells the loop, which adopts the new session at once (commands/hook.py).
An entry is "ours" when it has exactly that shape, whatever the res path in it (a new path is written
over the old one). A file that already runs `res hook` from an entry of its own is left alone: two
hooks would gate every command twice. An install over one that has only some of the entries adds the
others ("updated").

The settings files are edited as text, not re-serialized: each new entry goes in at the end of its list
(or its object) laid out as the file lays out what is around it (its indentation and newlines; its
neighbour's levels on one line or one item a line, its separators; a block written on one line in a
laid-out file gets the new entries each on a line below it), one event after the other, and
uninstall cuts out the same bytes in the reverse order, so a file that had no entry of ours comes back byte for byte and
comments are never touched. Each edit is checked: the edited text, parsed again, must be the old data
with exactly that change, else nothing is written.

Pure parts (text in, text out): `edit_settings`, `codex_trust`, `hook_hash`. The I/O around them:
`install`, `installed` (for `res doctor`). Import-light: json, os and re (which json loads anyway);
shlex, tomllib and tomlkit only where used. Formats and sources: docs/agent-hooks.md.
"""
from __future__ import annotations

import json
import os
import re  # json imports it already: free
from typing import NamedTuple

from reconciler.config.jsonc import blanked, comment_spans
from reconciler.core.hooks import GATE_HOOK_TIMEOUT_S

AGENTS = ("claude", "codex", "gemini")
TIMEOUT_S = GATE_HOOK_TIMEOUT_S  # the gate's: a shell command waits for it
SESSION_TIMEOUT_S = 10  # SessionStart's: one note to the loop (a 1 s wait at most, commands/hook.py)
POST_TIMEOUT_S = 10  # a post-tool event's: one release to the loop (a 1 s wait at most, commands/hook.py)
MAX_FILE = 4 << 20  # a settings file bigger than this is not one
CODEX_EVENT = "pre_tool_use"  # Codex's label for PreToolUse in a trust key


class SettingsError(Exception):
    """One line, naming the file; nothing was written."""


class Spec(NamedTuple):
    event: str  # the key under "hooks"
    matcher: str | None  # None: the group has no "matcher" (every tool, every source)
    handler: tuple  # the handler's fields in order, "command" standing for the command
    comments: bool  # the CLI reads the file with // and /* */ comments
    label: str = ""  # Codex: the event's label in a trust key and its hash


def _plain(timeout: int) -> tuple:
    return ("type", "command"), ("command", None), ("timeout", timeout)


def _named(timeout_ms: int) -> tuple:
    return ("type", "command"), ("name", "res gate"), ("command", None), ("timeout", timeout_ms)


# Per CLI its entries, in the order install adds them (uninstall takes them out in the reverse order).
# The post-tool events release what a command admitted in place booked (docs/agent-hooks.md).
SPECS = {
    "claude": (Spec("PreToolUse", "Bash", _plain(TIMEOUT_S), False),
               Spec("SessionStart", None, _plain(SESSION_TIMEOUT_S), False),
               Spec("PostToolUse", "Bash", _plain(POST_TIMEOUT_S), False),
               Spec("PostToolUseFailure", "Bash", _plain(POST_TIMEOUT_S), False)),
    "codex": (Spec("PreToolUse", "Bash", _plain(TIMEOUT_S), False, CODEX_EVENT),
              Spec("SessionStart", None, _plain(SESSION_TIMEOUT_S), False, "session_start"),
              Spec("PostToolUse", "Bash", _plain(POST_TIMEOUT_S), False, "post_tool_use")),
    "gemini": (Spec("BeforeTool", "^run_shell_command$", _named(TIMEOUT_S * 1000), True),
               Spec("SessionStart", None, _named(SESSION_TIMEOUT_S * 1000), True),
               Spec("AfterTool", "^run_shell_command$", _named(POST_TIMEOUT_S * 1000), True)),
}


def hook_command(res: str, cli: str) -> str:
    """The command a CLI runs: `<res> hook --agent <cli>`, the path quoted for the shell if it must be."""
    import shlex

    return f"{shlex.quote(res)} hook --agent {cli}"


def _event_spec(cli: str, event: str | None) -> Spec:
    """`cli`'s entry for `event` (a key under "hooks"); None: the gate's (its first)."""
    specs = SPECS[cli]
    if event is None:
        return specs[0]
    found = [s for s in specs if s.event == event]
    if not found:
        raise ValueError(f"{cli} has no entry of res's for {event}")
    return found[0]


def entry(cli: str, command: str, event: str | None = None) -> dict:
    """The matcher group install adds for `event` (None: the gate's)."""
    spec = _event_spec(cli, event)
    group: dict = {} if spec.matcher is None else {"matcher": spec.matcher}
    group["hooks"] = [{k: (command if k == "command" else v) for k, v in spec.handler}]
    return group


def _words(command: object) -> list[str] | None:
    if not isinstance(command, str):
        return None
    import shlex

    try:
        return shlex.split(command)
    except ValueError:
        return None


def is_ours(cli: str, group: object, event: str | None = None) -> bool:
    """A group install writes for `event` (None: the gate's), with any absolute res path: matcher (or
    none) and handler exactly as `entry`."""
    want = _event_spec(cli, event)
    keys = {"hooks"} if want.matcher is None else {"matcher", "hooks"}
    if not isinstance(group, dict) or set(group) != keys or group.get("matcher") != want.matcher:
        return False
    hooks = group["hooks"]
    if not isinstance(hooks, list) or len(hooks) != 1 or not isinstance(hooks[0], dict):
        return False
    handler = hooks[0]
    spec = dict(want.handler)
    if set(handler) != set(spec) or any(handler[k] != v for k, v in spec.items() if k != "command"):
        return False
    if any(type(handler[k]) is not type(v) for k, v in spec.items() if k != "command"):  # 30 is not 30.0 or True
        return False
    words = _words(handler["command"])
    return words is not None and len(words) == 4 and os.path.isabs(words[0]) and words[1:] == ["hook", "--agent", cli]


def _runs_res_hook(handler: object) -> bool:
    """A handler of someone else's that runs `res hook …` (the snippet of `res hook --print-config`)."""
    words = _words(handler.get("command")) if isinstance(handler, dict) else None
    return bool(words) and os.path.basename(words[0]) == "res" and words[1:2] == ["hook"]


# ---------------------------------------------------------------- JSON (and JSONC) as text


class _Node:
    """A value in the text: `kind` "{", "[" or "" (a scalar); [start, end) its span; `items` of a container."""

    __slots__ = ("kind", "start", "end", "items")

    def __init__(self, kind: str, start: int):
        self.kind, self.start, self.end, self.items = kind, start, start, []


class _Item:
    """A member (key set) or element of a container: [start, value.end) its span; `comma` the index of
    the comma after it, or -1."""

    __slots__ = ("key", "start", "value", "comma")

    def __init__(self, key: str | None, start: int, value: _Node):
        self.key, self.start, self.value, self.comma = key, start, value, -1


class _Doc(NamedTuple):
    text: str
    data: dict
    root: _Node
    comments: list  # [(start, end)] of every comment


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


_WS = " \t\n\r"


def _skip(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def _tree(s: str, i: int) -> _Node:
    """The spans of the JSON value at `i` of `s` (valid JSON: json.loads has already read it)."""
    c = s[i]
    if c in "{[":
        node, close = _Node(c, i), "}" if c == "{" else "]"
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
            item = _Item(key, start, value)
            node.items.append(item)
            i = _skip(s, value.end)
            if s[i] == ",":
                item.comma = i
                i = _skip(s, i + 1)
                continue
            node.end = i + 1
            return node
    node = _Node("", i)
    node.end = (_STRING if c == '"' else _SCALAR).match(s, i).end()
    return node


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_SCALAR = re.compile(r"[-+0-9.eEa-z]+")  # a number, true, false, null


def _parse(text: str, comments_ok: bool, name: str) -> _Doc:
    """The document, or SettingsError: not JSON (with comments where the CLI allows them), not an object."""
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
    return _Doc(text, data, root, comments)


def _member(node: _Node, key: str, name: str, where: str) -> _Item | None:
    found = [it for it in node.items if it.key == key]
    if len(found) > 1:
        raise SettingsError(f"{name}: {where} has the key {key!r} twice; nothing written")
    return found[0] if found else None


def _has_comment(doc: _Doc, start: int, end: int) -> bool:
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


def _separators(text: str, node: _Node) -> dict:
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


def _inline_depth(text: str, node: _Node) -> float:
    """How deep below `node` (0: `node` itself) the file first writes a non-empty container on one line."""
    if not node.kind or not node.items:
        return _NEVER
    if "\n" not in text[node.start:node.end]:
        return 0
    return 1 + min(_inline_depth(text, it.value) for it in node.items)


def _style(doc: _Doc, node: _Node) -> _Style:
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


def _parent(doc: _Doc, node: _Node) -> _Node | None:
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


def _on_one_line(doc: _Doc, node: _Node) -> bool:
    return "\n" not in doc.text[node.start:node.end]


def _stays_on_its_line(doc: _Doc, node: _Node) -> bool:
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


def _append(doc: _Doc, node: _Node, key: str | None, value: object) -> str:
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


def _remove(doc: _Doc, node: _Node, index: int) -> str:
    """The text without item `index` of `node` and its comma; the comments around it stay."""
    text, items = doc.text, node.items
    it = items[index]
    start, end = it.start, it.value.end
    if len(items) == 1:
        if not _has_comment(doc, node.start, node.end):
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
    if not _has_comment(doc, end, comma):
        return text[:start] + text[_skip(text, comma + 1):]
    return text[:start] + text[end:comma] + text[comma + 1:]


def _replace(doc: _Doc, node: _Node, value: object) -> str:
    return doc.text[:node.start] + json.dumps(value, ensure_ascii=False) + doc.text[node.end:]


# ---------------------------------------------------------------- the edit of one settings file


class Change(NamedTuple):
    text: str  # the file's new text (the old text: nothing to write)
    outcome: str  # "installed", "updated", "already", "removed", "absent"
    ours: dict | None = None  # after the edit, per event: the positions in its list of our groups with this command
    removed: dict | None = None  # uninstall, per event: the positions taken out, highest first (each as the list was then)
    before: str | None = None  # "updated": the command an entry of ours had, where it had another
    added: tuple[str, ...] = ()  # "updated": the events whose entry was not there
    note: str = ""  # something the user should know about this file


def _groups(doc: _Doc, spec: Spec, name: str) -> tuple[_Item | None, _Item | None, list]:
    """(the "hooks" member, its event member, the event's list) of a document; SettingsError where
    they are not an object and a list, or a key is there twice (which one the CLI reads is its call)."""
    hooks = _member(doc.root, "hooks", name, "the file")
    if hooks is None:
        return None, None, []
    if hooks.value.kind != "{":
        raise SettingsError(f'{name}: "hooks" is not an object; nothing written')
    event = _member(hooks.value, spec.event, name, '"hooks"')
    if event is None:
        return hooks, None, []
    if event.value.kind != "[":
        raise SettingsError(f"{name}: hooks.{spec.event} is not a list; nothing written")
    return hooks, event, doc.data["hooks"][spec.event]


def _ours(cli: str, spec: Spec, groups: list) -> list[int]:
    return [i for i, g in enumerate(groups) if is_ours(cli, g, spec.event)]


def edit_settings(cli: str, text: str | None, command: str, uninstall: bool = False, name: str = "settings") -> Change:
    """The settings file's new text with res's entries added (or taken out). `text` None: no file yet.
    `name` names the file in errors. SettingsError: the file is not what the CLI would read, has its
    own `res hook` entry (install), or the edit could not be made safely."""
    specs = SPECS[cli]
    if cli == "gemini" and "$" in command:  # Gemini CLI expands $VAR in every settings string
        raise SettingsError(f"{name}: the res path in {command!r} has a '$', which Gemini CLI would expand; "
                            "nothing written")
    if text is None or not text.strip():
        if uninstall:
            return Change(text or "", "absent")
        data = {"hooks": {s.event: [entry(cli, command, s.event)] for s in specs}}
        return Change(json.dumps(data, ensure_ascii=False, indent=2) + "\n", "installed", {s.event: (0,) for s in specs})
    doc = _parse(text, specs[0].comments, name)
    ours, theirs = {}, {}
    for spec in specs:
        groups = _groups(doc, spec, name)[2]
        ours[spec.event] = _ours(cli, spec, groups)
        theirs[spec.event] = [h.get("command") for i, g in enumerate(groups) if i not in ours[spec.event]
                              and isinstance(g, dict) and isinstance(g.get("hooks"), list)
                              for h in g["hooks"] if _runs_res_hook(h)]
    if uninstall:
        if not any(ours.values()):
            found = [c for s in specs for c in theirs[s.event]]
            note = f"it runs `res hook` from an entry of its own ({found[0]!r}), left as it is" if found else ""
            return Change(text, "absent", note=note)
        removed = {}
        for spec in reversed(specs):  # the reverse of install's order: the bytes come back as they were
            at = _ours(cli, spec, _groups(doc, spec, name)[2])
            if at:
                doc = _take_out(cli, spec, doc, at, name)
                removed[spec.event] = tuple(sorted(at, reverse=True))
        return Change(doc.text, "removed", removed=removed)
    for spec in specs:
        if not ours[spec.event] and theirs[spec.event]:
            raise SettingsError(f"{name}: already runs `res hook` from an entry of its own ({theirs[spec.event][0]!r} "
                                f"in hooks.{spec.event}); remove that entry and run `res hook install` again, or keep "
                                "it; nothing written")
    note = _disabled_note(cli, doc.data)
    kinds, positions, before, added = [], {}, None, []
    for spec in specs:
        new, kind, at, was = _add(cli, spec, doc, command, name)
        kinds.append(kind)
        positions[spec.event] = at
        before = before or was
        if kind == "installed":
            added.append(spec.event)
        if new != doc.text:
            doc = _parse(new, spec.comments, name)
    outcome = kinds[0] if len(set(kinds)) == 1 else "updated"
    if outcome != "updated":
        added = []
    return Change(doc.text, outcome, positions, before=before, added=tuple(added), note=note)


def _add(cli: str, spec: Spec, doc: _Doc, command: str, name: str) -> tuple[str, str, tuple[int, ...], str | None]:
    """(the text with our group for `spec.event` in it, "installed" | "updated" | "already", the
    positions of ours with `command` in the event's list, the command an updated group had)."""
    hooks, event, groups = _groups(doc, spec, name)
    ours = _ours(cli, spec, groups)
    exact = tuple(i for i in ours if groups[i]["hooks"][0]["command"] == command)
    if exact:
        return doc.text, "already", exact, None
    want = json.loads(json.dumps(doc.data))
    if ours:  # ours, from a res at another path: the new command is written over the old one
        i = ours[0]
        node = _path(_path(event.value.items[i].value, "hooks").items[0].value, "command")
        new = _replace(doc, node, command)
        want["hooks"][spec.event][i]["hooks"][0]["command"] = command
        _check(new, want, cli, spec, name, command)
        return new, "updated", (i,), groups[i]["hooks"][0]["command"]
    group = entry(cli, command, spec.event)
    if hooks is None:
        new = _append(doc, doc.root, "hooks", {spec.event: [group]})
        want["hooks"] = {spec.event: [group]}
    elif event is None:
        new = _append(doc, hooks.value, spec.event, [group])
        want["hooks"][spec.event] = [group]
    else:
        new = _append(doc, event.value, None, group)
        want["hooks"][spec.event].append(group)
    _check(new, want, cli, spec, name, command)
    return new, "installed", (len(groups),), None


def _path(node: _Node, key: str) -> _Node:
    """The value of the last member `key` of an object node (the one JSON readers keep)."""
    return [it for it in node.items if it.key == key][-1].value


def _take_out(cli: str, spec: Spec, doc: _Doc, ours: list[int], name: str) -> _Doc:
    """Our groups out of the event's list, highest first (the lower positions stay put); then the list,
    and "hooks", if that left them empty with no comment inside (install added them so)."""
    want = json.loads(json.dumps(doc.data))
    for i in sorted(ours, reverse=True):
        _, event, _ = _groups(doc, spec, name)
        group = event.value.items[i]
        if _has_comment(doc, group.start, group.value.end):
            raise SettingsError(f"{name}: res's entry in hooks.{spec.event} has a comment inside; remove it by hand; "
                                "nothing written")
        doc = _reparse(_remove(doc, event.value, i), cli, spec, name)
        del want["hooks"][spec.event][i]
    hooks, event, groups = _groups(doc, spec, name)
    if not groups and not _has_comment(doc, event.start, event.value.end):
        doc = _reparse(_remove(doc, hooks.value, hooks.value.items.index(event)), cli, spec, name)
        del want["hooks"][spec.event]
        hooks, _, _ = _groups(doc, spec, name)
        if not hooks.value.items and not _has_comment(doc, hooks.start, hooks.value.end):
            doc = _reparse(_remove(doc, doc.root, doc.root.items.index(hooks)), cli, spec, name)
            del want["hooks"]
    _check(doc.text, want, cli, spec, name)
    return doc


def _reparse(text: str, cli: str, spec: Spec, name: str) -> _Doc:
    """A step of an edit read back; one that does not read is refused as in _check."""
    try:
        return _parse(text, spec.comments, name)
    except SettingsError:
        _check(text, {}, cli, spec, name)
        raise


def _check(text: str, want: dict, cli: str, spec: Spec, name: str, command: str | None = None) -> None:
    """The edited text must read back as exactly the intended data (in a file whose CLI allows no
    comments, as plain JSON), else nothing is written and the user is told what to do by hand."""
    try:
        got = _parse(text, spec.comments, name).data
    except SettingsError:
        got = None
    if got != want:
        what = (f"add this to the list hooks.{spec.event} by hand: {json.dumps(entry(cli, command, spec.event))}"
                if command else f"take res's entry out of hooks.{spec.event} by hand")
        raise SettingsError(f"{name}: could not edit it safely; nothing written; {what}")


def _disabled_note(cli: str, data: dict) -> str:
    """A setting in the same file that keeps every hook, or this one, from running."""
    if cli == "claude" and data.get("disableAllHooks") is True:
        return 'but "disableAllHooks": true in this file turns every hook off'
    conf = data.get("hooksConfig")
    if cli == "gemini" and isinstance(conf, dict):
        if conf.get("enabled") is False:
            return 'but "hooksConfig.enabled": false in this file turns every hook off'
        if isinstance(conf.get("disabled"), list) and "res gate" in conf["disabled"]:
            return 'but "hooksConfig.disabled" in this file lists "res gate"'
    return ""


# ---------------------------------------------------------------- Codex: hook trust


def hook_hash(event_label: str, matcher: str | None, command: str, timeout: int | None = 600,
              is_async: bool = False, status_message: str | None = None) -> str:
    """The `trusted_hash` Codex 0.171.0 keeps for one command handler: sha256 of the key-sorted compact
    JSON of {event_name, matcher, hooks: [the handler with its effective timeout and async]}."""
    import hashlib

    handler = {"type": "command", "command": command, "timeout": max(1, timeout or 600), "async": is_async}
    if status_message is not None:
        handler["statusMessage"] = status_message
    ident: dict = {"event_name": event_label, "hooks": [handler]}
    if matcher is not None:
        ident["matcher"] = matcher
    data = json.dumps(ident, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return "sha256:" + hashlib.sha256(data).hexdigest()


def trust_key(hooks_path: str, group: int, handler: int = 0, label: str = CODEX_EVENT) -> str:
    return f"{hooks_path}:{label}:{group}:{handler}"


def codex_hash(spec: Spec, command: str) -> str:
    """The trusted_hash of our handler for `spec` (one of SPECS["codex"]) running `command`. Only
    session_end has a timeout of its own (at most 3 s); session_start takes the handler's as it is."""
    return hook_hash(spec.label, spec.matcher, command, dict(spec.handler)["timeout"])


def _key_position(key: str, hooks_path: str, label: str = CODEX_EVENT) -> tuple[int, int] | None:
    path, sep, rest = key.rpartition(f":{label}:")
    group, _, handler = rest.partition(":")
    if not sep or path != hooks_path or not group.isdigit() or not handler.isdigit():
        return None
    return int(group), int(handler)


def codex_trust(config_text: str | None, hooks_path: str, trusted: dict[int, str], removed: tuple[int, ...] = (),
                name: str = "config.toml", label: str = CODEX_EVENT) -> str:
    """Codex's user config.toml with the trust entries of `hooks_path`'s groups of one event (its
    trust-key `label`: pre_tool_use, session_start) brought in line. The key is positional, so for each position in `removed` (highest first, as Change.removed)
    its entries go and those of the groups after it move down one; then `trusted` {group: hash} is
    written for handler 0. Everything else in the file stays, comments included (tomlkit); an edit
    that does not read back as intended is refused (SettingsError, one line)."""
    import tomllib

    text = config_text or ""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SettingsError(f"{name}: not valid TOML ({e}); nothing written") from None
    hooks = data.get("hooks", {})
    state = hooks.get("state", {}) if isinstance(hooks, dict) else None
    if not isinstance(state, dict):
        raise SettingsError(f"{name}: hooks.state is not a table; nothing written")
    keys = dict(state)
    steps: list[tuple[str, object]] = []  # (key, None: delete it | the value to set)
    for r in removed:
        moved = {}
        for key in list(keys):
            pos = _key_position(key, hooks_path, label)
            if pos is not None and pos[0] >= r:
                value = keys.pop(key)
                steps.append((key, None))
                if pos[0] > r:
                    moved[trust_key(hooks_path, pos[0] - 1, pos[1], label)] = value
        keys.update(moved)
        steps += list(moved.items())
    for group, digest in trusted.items():
        key = trust_key(hooks_path, group, 0, label)
        old = keys.get(key) if isinstance(keys.get(key), dict) else {}
        if old.get("trusted_hash") != digest:
            keys[key] = {**old, "trusted_hash": digest}
            steps.append((key, keys[key]))
    if keys == state:
        return text
    new = _toml_steps(text, steps)
    want = dict(data)
    want["hooks"] = {**(hooks if isinstance(hooks, dict) else {}), "state": keys}
    try:
        got = tomllib.loads(new)
    except tomllib.TOMLDecodeError:
        got = None
    if got is None or _no_empty_hooks(got) != _no_empty_hooks(want):
        by_hand = "; ".join(f'[hooks.state."{trust_key(hooks_path, g, 0, label)}"] trusted_hash = "{h}"'
                            for g, h in trusted.items())
        raise SettingsError(f"{name}: could not edit it safely; nothing written"
                            + (f"; add by hand: {by_hand}" if by_hand else ""))
    return new


def _no_empty_hooks(data: dict) -> dict:
    """An empty hooks.state, and then an empty hooks, are as good as none to Codex."""
    hooks = data.get("hooks")
    if not isinstance(hooks, dict):
        return data
    hooks = {k: v for k, v in hooks.items() if not (k == "state" and v == {})}
    return {**{k: v for k, v in data.items() if k != "hooks"}, **({"hooks": hooks} if hooks else {})}


def _toml_steps(text: str, steps: list[tuple[str, object]]) -> str:
    """`steps` done on the document with tomlkit: a key of hooks.state deleted (value None) or set (a
    table, written as `[hooks.state."KEY"]`, or its keys updated where it is already there). Tables
    that only held what was taken out (no header of their own) go too."""
    import tomlkit
    from tomlkit.items import Table

    doc = tomlkit.parse(text)
    for key, value in steps:
        if value is None:
            del doc["hooks"]["state"][key]
            continue
        if "hooks" not in doc:
            doc.append("hooks", tomlkit.table(is_super_table=True))
        if "state" not in doc["hooks"]:
            doc["hooks"].append("state", tomlkit.table(is_super_table=True))
        state = doc["hooks"]["state"]
        if key in state and isinstance(state[key], dict):
            for k, v in value.items():
                if state[key].get(k) != v:
                    state[key][k] = v
            continue
        if isinstance(state, Table):
            table = tomlkit.table()
            table.update(value)
            table.add(tomlkit.nl())  # a blank line before whatever table follows
        else:
            table = tomlkit.inline_table()
            table.update(value)
        state[key] = table
    hooks = doc.get("hooks")
    if isinstance(hooks, Table):
        state = hooks.get("state")
        if isinstance(state, Table) and len(state) == 0 and state.is_super_table():
            del hooks["state"]
        if len(hooks) == 0 and hooks.is_super_table():
            del doc["hooks"]
    new = tomlkit.dumps(doc)
    if new.endswith("\n\n") and not text.endswith("\n\n"):  # a blank line before or after a table, at the end
        new = new.rstrip("\n") + "\n"
    return new


def _project_trusted(config_text: str | None, root: str) -> bool:
    import tomllib

    try:
        data = tomllib.loads(config_text or "")
    except tomllib.TOMLDecodeError:
        return False
    project = data.get("projects", {}).get(root) if isinstance(data.get("projects"), dict) else None
    return isinstance(project, dict) and project.get("trust_level") == "trusted"


# ---------------------------------------------------------------- where the files are


def _home(environ) -> str:
    return environ.get("HOME") or os.path.expanduser("~")


def codex_home(environ) -> str:
    """$CODEX_HOME as Codex resolves it (canonical: the trust keys name files by it), else ~/.codex."""
    if environ.get("CODEX_HOME"):
        return os.path.realpath(environ["CODEX_HOME"])
    return os.path.join(_home(environ), ".codex")


def project_root(cwd: str) -> str:
    """The checkout root of `cwd`, else `cwd`."""
    from reconciler.config.gitrepo import checkout

    found = checkout(cwd)
    return found[0] if found else os.path.abspath(cwd)


def settings_path(cli: str, scope: str, environ, cwd: str | None = None) -> str:
    if scope == "project":
        root = project_root(cwd or os.getcwd())
        return os.path.join(root, {"claude": ".claude/settings.json", "codex": ".codex/hooks.json",
                                   "gemini": ".gemini/settings.json"}[cli])
    if cli == "claude":
        base = environ.get("CLAUDE_CONFIG_DIR") or os.path.join(_home(environ), ".claude")
        return os.path.join(os.path.abspath(base), "settings.json")
    if cli == "codex":
        return os.path.join(codex_home(environ), "hooks.json")
    return os.path.join(os.path.abspath(environ.get("GEMINI_CLI_HOME") or _home(environ)), ".gemini", "settings.json")


def res_program() -> str:
    """The absolute path of the `res` the hooks run: the gate's own rule (commands/hook.py), which may
    only name an interpreter and the package when no console script is found: then the running one."""
    import sys

    from reconciler.commands.hook import res_program as running

    words = running()
    return os.path.abspath(words[0] if len(words) == 1 else (sys.argv[0] if sys.argv and sys.argv[0] else "res"))


# ---------------------------------------------------------------- files


def _read(path: str) -> tuple[str | None, int | None]:
    """(the file's text, its mode), (None, None) if it does not exist. SettingsError: a symlink, not a
    regular file, too big, not UTF-8, unreadable."""
    from reconciler.config.files import FileProblem, read_fd

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except OSError as e:
        if os.path.islink(path):
            raise SettingsError(f"{path}: is a symlink; not following it (edit the file it points to); "
                                "nothing written") from None
        raise SettingsError(f"{path}: {e.strerror}; nothing written") from None
    try:
        data, st = read_fd(fd, MAX_FILE)
    except FileProblem as e:
        raise SettingsError(f"{path}: {e}; nothing written") from None
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8"), st.st_mode & 0o7777
    except UnicodeDecodeError:
        raise SettingsError(f"{path}: not UTF-8; nothing written") from None


def _mkdirs(path: str) -> None:
    """Create `path` and its missing parents, each 0700."""
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            if not os.path.isdir(d):
                raise


def _write(path: str, text: str, mode: int | None) -> None:
    """Replace `path` with `text`: a temp file in the same directory, fsync, rename over it (a reader
    sees the old file or the new one). Mode: the old file's, else 0600."""
    import time

    directory = os.path.dirname(path)
    _mkdirs(directory)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.res-{os.getpid()}-{time.monotonic_ns()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600 if mode is None else mode)
        view = memoryview(text.encode("utf-8"))
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        if os.path.islink(path):  # appeared since we read it
            raise SettingsError(f"{path}: is a symlink; not following it; nothing written")
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


# ---------------------------------------------------------------- the command


def _what(cli: str, command: str) -> str:
    """`PreToolUse Bash, SessionStart -> C`: each event (with its matcher) and the command."""
    return ", ".join(f"{s.event} {s.matcher}" if s.matcher else s.event for s in SPECS[cli]) + f" -> {command}"


def install_one(cli: str, scope: str, uninstall: bool, environ, cwd: str, res: str) -> list[str]:
    """Install (or uninstall) for one CLI: its line, and a note where the CLI needs more than the file.
    SettingsError (one line): nothing was written for this CLI."""
    command = hook_command(res, cli)
    path = settings_path(cli, scope, environ, cwd)
    text, mode = _read(path)
    change = edit_settings(cli, text, command, uninstall, name=path)
    config = config_text = new_config = None
    if cli == "codex":  # read and edited before anything is written: a broken config.toml stops both files
        config = os.path.join(codex_home(environ), "config.toml")
        config_text, config_mode = _read(config)
        new_config = config_text or ""
        for spec in SPECS[cli]:  # each event's keys on their own: positions count within one event's list
            digest = codex_hash(spec, command)
            new_config = codex_trust(new_config, path, {i: digest for i in (change.ours or {}).get(spec.event, ())},
                                     (change.removed or {}).get(spec.event, ()), name=config, label=spec.label)
        if new_config == (config_text or ""):
            new_config = None
    if change.text != (text or "") and change.outcome != "absent":
        _write(path, change.text, mode)
    if new_config is not None:
        _write(config, new_config, config_mode)
    what = _what(cli, command)
    how = ([f"was {change.before}"] if change.before else []) + ([f"added {', '.join(change.added)}"]
                                                                 if change.added else [])
    line = {"installed": f"{cli}: installed in {path} ({what})",
            "updated": f"{cli}: updated in {path} ({'; '.join([what, *how])})",
            "already": f"{cli}: already installed in {path} ({what})",
            "removed": f"{cli}: removed from {path}",
            "absent": f"{cli}: not installed in {path}"}[change.outcome]
    if new_config is not None:
        line += f"; trusted in {config}" if change.ours else f"; its trust entries brought in line in {config}"
    if change.note:
        line += f"; {change.note}"
    lines = [line]
    if not uninstall and scope == "project":
        root = project_root(cwd)
        if cli == "codex" and not _project_trusted(config_text, root):
            lines.append(f"codex: note: Codex reads {path} only in a trusted project (say yes when codex asks, or set "
                         f'[projects."{root}"] trust_level = "trusted" in {config})')
        if cli == "gemini":
            lines.append(f"gemini: note: Gemini CLI reads {path} only when started in {root}, in a trusted folder")
    return lines


def install(agent: str = "all", scope: str = "user", uninstall: bool = False, environ=None, cwd: str | None = None,
            res: str | None = None) -> tuple[int, list[str]]:
    """`res hook install [--agent claude|codex|gemini|all] [--user|--project] [--uninstall]`: (exit
    code, lines). One line per CLI; a CLI whose files cannot be edited gets one `res: …` line (nothing
    written for it) and the exit code 1, and the others are still done."""
    environ = os.environ if environ is None else environ
    cwd = cwd or os.getcwd()
    res = os.path.abspath(res or res_program())  # `ours` is an absolute path
    code, lines = 0, []
    for cli in AGENTS if agent == "all" else (agent,):
        try:
            lines += install_one(cli, scope, uninstall, environ, cwd, res)
        except SettingsError as e:
            code = 1
            lines.append(f"res: {cli}: {e}")
        except OSError as e:
            code = 1
            where = f"{e.filename}: " if e.filename else ""
            lines.append(f"res: {cli}: {where}{e.strerror or e}")
    return code, lines


def installed(agent: str, scope: str = "user", home_env=None, cwd: str | None = None) -> bool | None:
    """Whether `agent`'s settings file has both of res's entries (from any res path: the gate's and
    SessionStart's) and, for Codex, the trust entry of each in config.toml (an untrusted hook never
    runs): True or False; None when a file cannot be read."""
    environ = os.environ if home_env is None else home_env
    specs = SPECS[agent]
    try:
        path = settings_path(agent, scope, environ, cwd)
        text, _ = _read(path)
        if text is None or not text.strip():
            return False
        doc = _parse(text, specs[0].comments, path)
        found = []
        for spec in specs:
            groups = _groups(doc, spec, path)[2]
            ours = _ours(agent, spec, groups)
            if not ours:
                return False
            found.append((spec, [groups[i]["hooks"][0]["command"] for i in ours], ours))
        if agent != "codex":
            return True
        import tomllib

        config, _ = _read(os.path.join(codex_home(environ), "config.toml"))
        hooks = tomllib.loads(config or "").get("hooks")
        state = hooks.get("state") if isinstance(hooks, dict) else None
        state = state if isinstance(state, dict) else {}

        def trusted(spec: Spec, command: str, i: int) -> bool:
            got = state.get(trust_key(path, i, 0, spec.label))
            return isinstance(got, dict) and got.get("trusted_hash") == codex_hash(spec, command)

        return all(any(trusted(spec, c, i) for c, i in zip(commands, ours)) for spec, commands, ours in found)
    except (SettingsError, OSError, ValueError):  # tomllib's errors are ValueErrors
        return None
