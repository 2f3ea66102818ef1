"""Codex's trust in a hook, kept in its user config.toml under [hooks.state]: Codex skips a hook it
has no trust entry for, silently, so `res hook install` (commands/hookinstall.py) writes one for each
entry it adds and moves or takes them out with it. Here the key that names a hook (its file, event
and position), the hash Codex checks, and the edit of config.toml's text that brings one event's
entries in line keeping everything else, comments included; and whether Codex trusts a project.
Pure (text in, text out); hashlib, tomllib and tomlkit imported only where used. Formats and sources:
docs/agent-hooks.md.
"""
from __future__ import annotations

import json

from reconciler.config.jsonedit import SettingsError

CODEX_EVENT = "pre_tool_use"  # Codex's label for PreToolUse in a trust key


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


def _key_position(key: str, hooks_path: str, label: str = CODEX_EVENT) -> tuple[int, int] | None:
    path, sep, rest = key.rpartition(f":{label}:")
    group, _, handler = rest.partition(":")
    if not sep or path != hooks_path or not group.isdigit() or not handler.isdigit():
        return None
    return int(group), int(handler)


def codex_trust(config_text: str | None, hooks_path: str, trusted: dict[int, str], removed: tuple[int, ...] = (),
                name: str = "config.toml", label: str = CODEX_EVENT) -> str:
    """Codex's user config.toml with the trust entries of `hooks_path`'s groups of one event (its
    trust-key `label`: pre_tool_use, session_start) brought in line. The key is positional, so for
    each position in `removed` (highest first, as commands/hookinstall.py's Change.removed) its
    entries go and those of the groups after it move down one; then `trusted` {group: hash} is
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


def project_trusted(config_text: str | None, root: str) -> bool:
    """Whether config.toml trusts the project at `root`: Codex reads a project's hooks only then."""
    import tomllib

    try:
        data = tomllib.loads(config_text or "")
    except tomllib.TOMLDecodeError:
        return False
    project = data.get("projects", {}).get(root) if isinstance(data.get("projects"), dict) else None
    return isinstance(project, dict) and project.get("trust_level") == "trusted"
