"""The rules an agent CLI's session judges shell commands by, read from where each CLI keeps them
(its settings files, its rules files, its own command line), for the gate (core/hookrules.py: a
command is rewritten only where the session would have run it unasked). Read only when a command is
heavy, so a light command pays nothing for it.

A file that exists but cannot be read or parsed makes every command guarded (the gate then passes
the command unchanged): a rule we could not read may be a deny.

    Claude Code  permission_mode from the hook input; permissions.allow/deny/ask in the user's
                 settings ($CLAUDE_CONFIG_DIR or ~/.claude), the project's .claude/settings.json and
                 settings.local.json, the managed settings; --allowedTools / --disallowedTools /
                 --dangerously-skip-permissions on its command line
    Codex        permission_mode from the hook input ("bypassPermissions": approval never); the
                 execpolicy rules in $CODEX_HOME/rules/*.rules and the project's .codex/rules/
    Gemini CLI   --yolo / --approval-mode on its command line (the input does not say);
                 tools.allowed / tools.exclude in ~/.gemini/settings.json and the project's;
                 policy files ~/.gemini/policies/*.toml and the project's .gemini/policies/
"""
from __future__ import annotations

import json
import os

from reconciler.core.hookrules import ALL, Rules, codex_guarded, gemini_guarded, guarded_by, tool_pattern

MAX_FILE = 1 << 20
EVERYTHING_GUARDED = frozenset({ALL})


class _Unreadable(Exception):
    pass


def _read(path: str) -> str | None:
    """A file's text, None if it does not exist; _Unreadable if it exists and cannot be read whole."""
    from reconciler.config.files import FileProblem, read_text

    try:
        return read_text(path, MAX_FILE)
    except FileProblem as e:
        if not os.path.isdir(os.path.dirname(path) or "."):
            return None  # a directory on the way is a file: there is no such file
        raise _Unreadable(str(e)) from None


def _json(path: str, comments: bool = False) -> dict | None:
    text = _read(path)
    if text is None:
        return None
    try:
        if comments:
            from reconciler.config.jsonc import blanked, comment_spans

            text = blanked(text, comment_spans(text))
        data = json.loads(text)
    except ValueError:
        raise _Unreadable(path) from None
    if not isinstance(data, dict):
        raise _Unreadable(path)
    return data


def _roots(cwd: str | None) -> list[str]:
    """The directories whose project settings may apply: the command's directory and its checkout's root."""
    if not cwd:
        return []
    from reconciler.config.gitrepo import checkout

    repo = checkout(cwd)
    return list(dict.fromkeys([cwd, *([repo[0]] if repo else [])]))


def ancestors_argv(limit: int = 12) -> list[list[str]]:
    """The command lines of this process's ancestors, nearest first (the agent CLI is one of them)."""
    out, pid = [], os.getppid()
    for _ in range(limit):
        if pid <= 1:
            break
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out.append([a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a])
            with open(f"/proc/{pid}/stat", "rb") as f:
                pid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def _flag_values(argvs: list[list[str]], names: tuple[str, ...]) -> list[str]:
    """Every value given to these flags (`--f v1 v2`, `--f=v1,v2`), split on commas and spaces outside
    parentheses, from every ancestor's command line."""
    values = []
    for argv in argvs:
        i = 0
        while i < len(argv):
            a = argv[i]
            name, eq, v = a.partition("=")
            if name in names:
                if eq:
                    values.extend(_split_list(v))
                else:
                    j = i + 1
                    while j < len(argv) and not argv[j].startswith("-"):
                        values.extend(_split_list(argv[j]))
                        j += 1
                    i = j
                    continue
            i += 1
    return values


def _split_list(text: str) -> list[str]:
    out, depth, cur = [], 0, []
    for c in text:
        depth += c == "("
        depth -= c == ")"
        if depth == 0 and c in ", ":
            if cur:
                out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if cur:
        out.append("".join(cur))
    return out


# ---------------------------------------------------------------- each CLI


def claude_rules(mode: str | None, cwd: str | None, environ, argvs: list[list[str]]) -> Rules:
    try:
        home = environ.get("CLAUDE_CONFIG_DIR") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".claude")
        files = [os.path.join(home, "settings.json"), "/etc/claude-code/managed-settings.json"]
        for root in _roots(cwd):
            files += [os.path.join(root, ".claude", "settings.json"), os.path.join(root, ".claude", "settings.local.json")]
        allow, guard = [], []
        for path in files:
            perms = (_json(path) or {}).get("permissions") or {}
            if not isinstance(perms, dict):
                raise _Unreadable(path)
            for key, into in (("allow", allow), ("deny", guard), ("ask", guard)):
                rules = perms.get(key) or []
                if not isinstance(rules, list):
                    raise _Unreadable(path)
                into.extend(r for r in rules if isinstance(r, str))
        allow += _flag_values(argvs, ("--allowedTools", "--allowed-tools"))
        guard += _flag_values(argvs, ("--disallowedTools", "--disallowed-tools"))
    except _Unreadable:
        return Rules(False, (), EVERYTHING_GUARDED)
    skip = any("--dangerously-skip-permissions" in argv for argv in argvs)
    patterns = [p for p in (tool_pattern(r, "Bash") for r in allow) if p is not None]
    guarded = guarded_by(p for p in (tool_pattern(r, "Bash") for r in guard) if p is not None)
    return Rules(mode == "bypassPermissions" or skip, tuple(patterns), guarded)


def codex_rules(mode: str | None, cwd: str | None, environ) -> Rules:
    home = environ.get("CODEX_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".codex")
    texts = []
    try:
        for d in [os.path.join(home, "rules"), *(os.path.join(r, ".codex", "rules") for r in _roots(cwd))]:
            try:
                names = sorted(os.listdir(d))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as e:
                raise _Unreadable(str(e)) from None
            texts += [t for t in (_read(os.path.join(d, n)) for n in names if n.endswith(".rules")) if t is not None]
    except _Unreadable:
        return Rules(False, (), EVERYTHING_GUARDED)
    return Rules(mode == "bypassPermissions", (), codex_guarded(texts))


def gemini_rules(cwd: str | None, environ, argvs: list[list[str]]) -> Rules:
    import tomllib

    home = environ.get("GEMINI_CLI_HOME") or environ.get("HOME") or os.path.expanduser("~")
    gem = os.path.join(home, ".gemini")
    dirs = list(dict.fromkeys([gem, *(os.path.join(r, ".gemini") for r in _roots(cwd))]))
    allow, exclude, policies, yolo = [], [], [], False
    try:
        for d in dirs:
            data = _json(os.path.join(d, "settings.json"), comments=True) or {}
            tools = data.get("tools") or {}
            general = data.get("general") or {}
            if not isinstance(tools, dict) or not isinstance(general, dict):
                raise _Unreadable(d)
            allow += [r for r in tools.get("allowed") or [] if isinstance(r, str)]
            exclude += [r for r in tools.get("exclude") or [] if isinstance(r, str)]
            yolo = yolo or general.get("defaultApprovalMode") == "yolo"
            try:
                names = sorted(os.listdir(os.path.join(d, "policies")))
            except (FileNotFoundError, NotADirectoryError):
                names = []
            for n in names:
                if n.endswith(".toml"):
                    text = _read(os.path.join(d, "policies", n))
                    try:
                        policies.append(tomllib.loads(text or ""))
                    except tomllib.TOMLDecodeError:
                        raise _Unreadable(n) from None
    except (_Unreadable, OSError):
        return Rules(False, (), EVERYTHING_GUARDED)
    allow += _flag_values(argvs, ("--allowed-tools",))
    modes = _flag_values(argvs, ("--approval-mode",))
    yolo = (yolo and not modes) or "yolo" in modes or any(a in ("--yolo", "-y") for argv in argvs for a in argv)
    # Gemini's run_shell_command(PREFIX) is a prefix of words: as Claude's `PREFIX:*`.
    patterns = [p if p == "*" else p + ":*" for p in (tool_pattern(r, "run_shell_command") for r in allow) if p is not None]
    guarded = gemini_guarded(policies) | guarded_by(
        p for p in (tool_pattern(r, "run_shell_command") for r in exclude) if p is not None)
    return Rules(yolo, tuple(patterns), guarded)


def rules_for(call, environ) -> Rules:
    """The rules of the session that sent this hook call (core.hooks.Call). A shim's call ("shell"):
    the program was already going to run; running it through res asks nobody anything."""
    if call.cli == "shell":
        return Rules(True, (), frozenset())
    if call.cli == "codex":
        return codex_rules(call.permission_mode, call.cwd, environ)
    argvs = ancestors_argv()
    if call.cli == "gemini":
        return gemini_rules(call.cwd, environ, argvs)
    return claude_rules(call.permission_mode, call.cwd, environ, argvs)
