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
    Codex        permission_mode from the hook input ("bypassPermissions": approval never); its
                 sandbox from its command line or config.toml; the execpolicy rules in
                 $CODEX_HOME/rules/*.rules, the project's .codex/rules/ and /etc/codex/rules
    Gemini CLI   --yolo / --approval-mode on its command line (the input does not say); folder trust;
                 tools.* in /etc/gemini-cli, ~/.gemini and the project's settings.json; policy files
                 in their policies/ folders; its sandbox (--sandbox, GEMINI_SANDBOX, tools.sandbox)
    OpenCode     `permission` of each config source in its order (the user's opencode.json{,c} and
                 config.json, $OPENCODE_CONFIG, the project's files from the checkout's root down to
                 the command's directory and their .opencode/, $OPENCODE_CONFIG_DIR's,
                 $OPENCODE_CONFIG_CONTENT, /etc/opencode, $OPENCODE_PERMISSION); --auto on its command
                 line. Agent-level rules (`agent.<name>.permission`, agent files): every line guarded
                 (1.18 tells a plugin no agent)
    Copilot CLI  --allow-all-tools / --allow-all / --yolo and COPILOT_ALLOW_ALL, --allow-tool and
                 --deny-tool `shell(…)` rules on its command line (`copilot help permissions`; its config
                 files hold no shell rules, permissions-config.json only saved approvals: not read, the
                 cautious side)
"""
from __future__ import annotations

import json
import os

from reconciler.config.agenthome import config_dir, user_home
from reconciler.core.agentclis import CLIS
from reconciler.core.shellrules import (ALL, Rules, codex_guarded, gemini_guarded, guarded_by, opencode_ordered,
                                        tool_pattern)

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


_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish"})
_RUNTIMES = frozenset({"node", "nodejs", "bun", "deno"})


def _is_cli(argv: list[str], cli: str) -> bool:
    """Is this command line the CLI's own process: the program (or the script a runtime runs) by its
    name, or a path inside its npm package (Claude Code's older `…/claude-code/cli.js`)."""
    if cli not in CLIS or not argv:
        return False
    name, package = cli, CLIS[cli].package
    words = argv[:1]
    if os.path.basename(argv[0]) in _RUNTIMES:  # node [its options] SCRIPT …
        words = [next((a for a in argv[1:] if not a.startswith("-")), "")]
    return any(os.path.basename(w).removesuffix(".js") == name or package in w for w in words if w)


def cli_argvs(argvs: list[list[str]], cli: str) -> list[list[str]]:
    """The command lines of the agent CLI's own processes among this hook's ancestors (nearest first):
    past the shells that ran the hook, the consecutive ancestors that are that CLI (Gemini CLI relaunches
    itself, Codex's launcher runs its binary). Nothing beyond them: a flag on the line of whatever started
    the CLI (a test runner's `-s`, a script's `--yolo`) says nothing about the session. None found:
    nothing, and every rule read from flags is taken as absent (the cautious side)."""
    i = 0
    while i < len(argvs) and argvs[i] and os.path.basename(argvs[i][0]) in _SHELLS:
        i += 1
    out = []
    while i < len(argvs) and _is_cli(argvs[i], cli):
        out.append(argvs[i])
        i += 1
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


def _flag_value(argvs: list[list[str]], names: tuple[str, ...]) -> str | None:
    """The value of a flag that takes one (`-s v`, `--sandbox=v`): its last on the nearest command line
    that has it; None where none does."""
    for argv in argvs:
        found = None
        for i, a in enumerate(argv):
            name, eq, v = a.partition("=")
            if name in names:
                found = v if eq else (argv[i + 1] if i + 1 < len(argv) else None)
        if found is not None:
            return found
    return None


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


def _claude_trusted(home: str, environ, root: str) -> bool:
    """Has the user accepted Claude Code's workspace trust dialog for `root`? (`projects[root]
    .hasTrustDialogAccepted` in its .claude.json). Project allow rules count only then."""
    for path in (os.path.join(home, ".claude.json"),
                 os.path.join(user_home(environ), ".claude.json")):
        try:
            data = _json(path)
        except _Unreadable:
            return False
        if data is None:
            continue
        project = (data.get("projects") or {}).get(root) if isinstance(data.get("projects"), dict) else None
        return isinstance(project, dict) and project.get("hasTrustDialogAccepted") is True
    return False


def _settings_flag(argvs: list[list[str]]) -> list[dict]:
    """`--settings FILE|JSON` on Claude Code's command line, read."""
    out = []
    for value in _flag_values(argvs, ("--settings",)):
        if value.lstrip().startswith("{"):
            try:
                data = json.loads(value)
            except ValueError:
                raise _Unreadable("--settings") from None
        else:
            data = _json(value)
        if data is not None:
            if not isinstance(data, dict):
                raise _Unreadable("--settings")
            out.append(data)
    return out


def _permissions(data: dict | None, where: str) -> dict[str, list[str]]:
    """A settings file's allow, deny and ask rules (the text ones), checked to be lists."""
    perms = (data or {}).get("permissions") or {}
    if not isinstance(perms, dict):
        raise _Unreadable(where)
    out = {}
    for key in ("allow", "deny", "ask"):
        rules = perms.get(key) or []
        if not isinstance(rules, list):
            raise _Unreadable(where)
        out[key] = [r for r in rules if isinstance(r, str)]
    return out


def claude_rules(mode: str | None, cwd: str | None, environ, argvs: list[list[str]]) -> Rules:
    """Allow rules only from where Claude Code takes them (the user's settings, the managed ones, its
    command line, and a project's only once its folder is trusted; only the managed ones under
    allowManagedPermissionRulesOnly); deny and ask rules from everywhere they might be (more guards
    only pass more lines unchanged). Any settings file with a sandbox on: sandboxed."""
    try:
        home = config_dir("claude", environ)
        managed_dir = "/etc/claude-code"
        managed = [_json(os.path.join(managed_dir, "managed-settings.json"))]
        try:
            drop_ins = sorted(n for n in os.listdir(os.path.join(managed_dir, "managed-settings.d")) if n.endswith(".json"))
        except OSError:
            drop_ins = []
        managed += [_json(os.path.join(managed_dir, "managed-settings.d", n)) for n in drop_ins]
        user = [_json(os.path.join(home, "settings.json")), *_settings_flag(argvs)]
        start = environ.get("CLAUDE_PROJECT_DIR") or None
        project_roots = list(dict.fromkeys([*([start] if start else []), *_roots(cwd)]))
        project = [(root, _json(os.path.join(root, ".claude", name)))
                   for root in project_roots for name in ("settings.json", "settings.local.json")]
        allow, guard, sandboxed = [], [], False
        managed_only = any((m or {}).get("allowManagedPermissionRulesOnly") is True for m in managed)
        for data in managed:
            allow += _permissions(data, "managed settings")["allow"]
        for data in [*managed, *user, *(d for _, d in project)]:
            perms = _permissions(data, "settings")
            guard += perms["deny"] + perms["ask"]
            sandbox = (data or {}).get("sandbox")
            sandboxed = sandboxed or (isinstance(sandbox, dict) and sandbox.get("enabled") is True)
        if not managed_only:
            for data in user:
                allow += _permissions(data, "settings")["allow"]
            allow += _flag_values(argvs, ("--allowedTools", "--allowed-tools"))
            # a project's allow rules: its start folder's, only once the user trusted it
            trusted_root = start if start and _claude_trusted(home, environ, start) else None
            for root, data in project:
                if root == trusted_root:
                    allow += _permissions(data, "settings")["allow"]
        guard += _flag_values(argvs, ("--disallowedTools", "--disallowed-tools"))
    except _Unreadable:
        return Rules(False, (), EVERYTHING_GUARDED)
    skip = any("--dangerously-skip-permissions" in argv for argv in argvs)
    patterns = [p for p in (tool_pattern(r, "Bash") for r in allow) if p is not None]
    guarded = guarded_by(p for p in (tool_pattern(r, "Bash") for r in guard) if p is not None)
    return Rules(mode == "bypassPermissions" or skip, tuple(patterns), guarded, sandboxed)


def _codex_unsandboxed(home: str, argvs: list[list[str]]) -> bool:
    """Does this Codex session run its commands outside any sandbox? Known only from its command line
    (--dangerously-bypass-approvals-and-sandbox, --yolo, --sandbox danger-full-access) or its config's
    `sandbox_mode = "danger-full-access"` (with no profile or sandbox flag that could say otherwise)."""
    for argv in argvs:
        if any(a in ("--dangerously-bypass-approvals-and-sandbox", "--yolo") for a in argv):
            return True
    mode = _flag_value(argvs, ("--sandbox", "-s"))
    if mode is not None:
        return mode == "danger-full-access"
    if _flag_value(argvs, ("--profile", "-p", "-c", "--config")) is not None or any("--full-auto" in a for a in argvs):
        return False
    import tomllib

    try:
        text = _read(os.path.join(home, "config.toml"))
        return tomllib.loads(text or "").get("sandbox_mode") == "danger-full-access"
    except (_Unreadable, tomllib.TOMLDecodeError):
        return False


def codex_rules(mode: str | None, cwd: str | None, environ, argvs: list[list[str]] | None = None) -> Rules:
    home = config_dir("codex", environ)
    texts = []
    try:
        for d in [os.path.join(home, "rules"), *(os.path.join(r, ".codex", "rules") for r in _roots(cwd)), "/etc/codex/rules"]:
            try:
                names = sorted(os.listdir(d))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as e:
                raise _Unreadable(str(e)) from None
            texts += [t for t in (_read(os.path.join(d, n)) for n in names if n.endswith(".rules")) if t is not None]
    except _Unreadable:
        return Rules(False, (), EVERYTHING_GUARDED)
    sandboxed = not _codex_unsandboxed(home, argvs or [])
    return Rules(mode == "bypassPermissions", (), codex_guarded(texts), sandboxed)


def _gemini_trusted(gem: str, settings: list[dict], cwd: str | None, environ) -> bool:
    """Does Gemini CLI trust this folder (else it forces its default mode, --yolo or not)? Trusted
    unless folder trust is on (`security.folderTrust.enabled`), then only a folder (or one under a
    parent) trustedFolders.json trusts, and a GEMINI_CLI_TRUST_WORKSPACE override."""
    on = any(((s.get("security") or {}).get("folderTrust") or {}).get("enabled") is True
             for s in settings if isinstance(s.get("security"), dict))
    if not on:
        return True
    if environ.get("GEMINI_CLI_TRUST_WORKSPACE") == "true":
        return True
    try:
        trusted = _json(os.path.join(gem, "trustedFolders.json")) or {}
    except _Unreadable:
        return False
    path = os.path.realpath(cwd or "/")
    for folder, how in trusted.items():
        folder = os.path.realpath(folder)
        if how == "TRUST_FOLDER" and (path == folder or path.startswith(folder + "/")):
            return True
        if how == "TRUST_PARENT" and path.startswith(os.path.dirname(folder) + "/"):
            return True
    return False


def gemini_rules(cwd: str | None, environ, argvs: list[list[str]]) -> Rules:
    """YOLO only from the command line (Gemini CLI ignores `defaultApprovalMode = "yolo"` in settings),
    in a folder it trusts, and not disabled; every rule that outranks YOLO's catch-all allow for the
    shell (a `run_shell_command(…)` entry in tools.allowed narrows the shell to it and denies the rest,
    tools.core, tools.exclude, tools.confirmationRequired, a policy rule on the shell) guards. A
    sandbox (--sandbox, GEMINI_SANDBOX, tools.sandbox): sandboxed."""
    import tomllib

    gem = config_dir("gemini", environ)
    dirs = list(dict.fromkeys([gem, *(os.path.join(r, ".gemini") for r in _roots(cwd))]))
    settings, exclude, policies, outranked, sandboxed, no_yolo = [], [], [], False, False, False
    allow_lists: list[list[str]] = []  # each file's run_shell_command(…) entries in tools.allowed
    try:
        for path in ["/etc/gemini-cli/settings.json", *(os.path.join(d, "settings.json") for d in dirs)]:
            data = _json(path, comments=True) or {}
            tools = data.get("tools") or {}
            security = data.get("security") or {}
            if not isinstance(tools, dict) or not isinstance(security, dict):
                raise _Unreadable(path)
            settings.append(data)
            exclude += [r for r in tools.get("exclude") or [] if isinstance(r, str)]
            shell = [r for key in ("core", "confirmationRequired") for r in tools.get(key) or []
                     if isinstance(r, str) and r.startswith("run_shell_command")]
            outranked = outranked or bool(shell)
            allowed = [r for r in tools.get("allowed") or [] if isinstance(r, str) and r.startswith("run_shell_command")]
            if allowed:
                allow_lists.append(allowed)
            sandboxed = sandboxed or tools.get("sandbox") not in (None, False, "")
            no_yolo = no_yolo or security.get("disableYoloMode") is True
        for d in [*dirs, "/etc/gemini-cli"]:
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
    allowed_flag = [r for r in _flag_values(argvs, ("--allowed-tools",)) if r.startswith("run_shell_command")]
    if allowed_flag:
        allow_lists.append(allowed_flag)
    # A run_shell_command(PREFIX) entry narrows the shell to the entries (the rest is denied, YOLO or
    # not). Which list is in force depends on precedence (the flag replaces the files, a later file an
    # earlier one): one list, or lists that agree, are read; lists that differ, or a bare entry (every
    # command, by heuristics), keep every line ungated.
    prefixes = [tool_pattern(r, "run_shell_command") for r in (allow_lists[0] if allow_lists else [])]
    if any(sorted(x) != sorted(allow_lists[0]) for x in allow_lists) or "*" in prefixes or None in prefixes:
        outranked = True
    mode = _flag_value(argvs, ("--approval-mode",))
    yolo = mode == "yolo" if mode is not None else any(a in ("--yolo", "-y") for argv in argvs for a in argv)
    yolo = yolo and not no_yolo and _gemini_trusted(gem, settings, cwd, environ)
    sandboxed = sandboxed or bool(environ.get("GEMINI_SANDBOX")) or any(
        a in ("--sandbox", "-s") or a.startswith("--sandbox=") for argv in argvs for a in argv)
    guarded = gemini_guarded(policies) | guarded_by(
        p for p in (tool_pattern(r, "run_shell_command") for r in exclude) if p is not None)
    if outranked:
        guarded = EVERYTHING_GUARDED
    return Rules(yolo, tuple(p for p in prefixes if p), guarded, sandboxed, narrowed=bool(allow_lists))


_OPENCODE_FILES = ("config.json", "opencode.json", "opencode.jsonc")


def _opencode_dirs(cwd: str | None) -> list[str]:
    """The project directories whose opencode.json{,c} apply, the checkout's root first, down to the
    command's directory (OpenCode walks up from where it runs to the worktree's root)."""
    if not cwd:
        return []
    from reconciler.config.gitrepo import checkout

    repo = checkout(cwd)
    top = repo[0] if repo else cwd
    out, d = [], os.path.abspath(cwd)
    while True:
        out.append(d)
        if d == top or os.path.dirname(d) == d:
            break
        d = os.path.dirname(d)
    return out[::-1] if out[-1] == top else [os.path.abspath(cwd)]


def opencode_rules(cwd: str | None, environ, argvs: list[list[str]]) -> Rules:
    """OpenCode's bash rules in force (core/shellrules.opencode_ordered), from every config source in
    its order; --auto from its command line. A file that cannot be read, a value not read, or any
    agent-level permission: nothing runs unasked as far as the gate knows."""
    nothing = Rules(False, (), EVERYTHING_GUARDED)
    try:
        files = [os.path.join(config_dir("opencode", environ), n) for n in _OPENCODE_FILES]
        files += [environ["OPENCODE_CONFIG"]] if environ.get("OPENCODE_CONFIG") else []
        for d in _opencode_dirs(cwd):
            files += [os.path.join(d, n) for n in _OPENCODE_FILES[1:]]
            files += [os.path.join(d, ".opencode", n) for n in _OPENCODE_FILES[1:]]
        given = environ.get("OPENCODE_CONFIG_DIR")
        files += [os.path.join(given, n) for n in _OPENCODE_FILES[1:]] if given else []
        datas = [_json(f, comments=True) for f in files]
        for inline in ("OPENCODE_CONFIG_CONTENT",):
            if environ.get(inline):
                datas.append(json.loads(environ[inline]))
        datas += [_json(os.path.join("/etc/opencode", n), comments=True) for n in _OPENCODE_FILES[1:]]
        permissions = []
        for data in datas:
            if data is None:
                continue
            if not isinstance(data, dict):
                return nothing
            agents = data.get("agent") or data.get("mode") or {}
            if not isinstance(agents, dict) or any(not isinstance(a, dict) or "permission" in a or "tools" in a
                                                   for a in agents.values()):
                return nothing  # a plugin is told no agent: whose rules apply is not known
            if isinstance(data.get("tools"), dict) and data["tools"].get("bash") is False:
                return nothing
            permissions.append(data.get("permission"))
        if environ.get("OPENCODE_PERMISSION"):
            permissions.append(json.loads(environ["OPENCODE_PERMISSION"]))
        for d in [config_dir("opencode", environ), *(os.path.join(r, ".opencode") for r in _opencode_dirs(cwd)),
                  *([given] if given else [])]:
            for sub in ("agent", "agents"):
                try:
                    if any(n.endswith(".md") for n in os.listdir(os.path.join(d, sub))):
                        return nothing  # agent files may carry rules of their own
                except OSError:
                    pass
    except (_Unreadable, ValueError):
        return nothing
    auto = any("--auto" in argv for argv in argvs)
    ordered = opencode_ordered(permissions, auto)
    if ordered is None:
        return nothing
    return Rules(False, (), frozenset(), ordered=ordered)


def copilot_rules(environ, argvs: list[list[str]]) -> Rules:
    """Copilot CLI's shell rules: every command unasked under --allow-all-tools, --allow-all, --yolo,
    COPILOT_ALLOW_ALL or a bare `shell` allow; `shell(P)` allows; `shell(…)` denies (a bare `shell`
    deny: every line) guard their programs; any path only under --allow-all-paths, --allow-all, --yolo
    or COPILOT_ALLOW_ALL."""
    allow = [p for p in (tool_pattern(v, "shell") for v in _flag_values(argvs, ("--allow-tool",))) if p]
    deny = [p for p in (tool_pattern(v, "shell") for v in _flag_values(argvs, ("--deny-tool",))) if p]
    words = {a for argv in argvs for a in argv}
    every = bool(words & {"--allow-all", "--yolo"}) or (environ.get("COPILOT_ALLOW_ALL") or "").lower() in ("true", "1")
    unasked = every or "--allow-all-tools" in words or "*" in allow
    return Rules(unasked, tuple(allow), guarded_by(deny), any_path=every or "--allow-all-paths" in words)


# Each CLI's reader as its record names it (rules_reader): the session's rules from the hook call, the
# environment and the CLI's own command lines.
def claude_session_rules(call, environ, argvs: list[list[str]]) -> Rules:
    return claude_rules(call.permission_mode, call.cwd, environ, argvs)


def codex_session_rules(call, environ, argvs: list[list[str]]) -> Rules:
    return codex_rules(call.permission_mode, call.cwd, environ, argvs)


def gemini_session_rules(call, environ, argvs: list[list[str]]) -> Rules:
    return gemini_rules(call.cwd, environ, argvs)


def opencode_session_rules(call, environ, argvs: list[list[str]]) -> Rules:
    return opencode_rules(call.cwd, environ, argvs)


def copilot_session_rules(call, environ, argvs: list[list[str]]) -> Rules:
    return copilot_rules(environ, argvs)


def rules_for(call, environ) -> Rules:
    """The rules of the session that sent this hook call (core.hooks.Call), read by the reader its
    CLI's record names. A shim's call ("shell"): the program was already going to run; running it
    through res asks nobody anything."""
    if call.cli == "shell":
        return Rules(True, (), frozenset())
    argvs = cli_argvs(ancestors_argv(), call.cli)
    return globals()[CLIS[call.cli].rules_reader](call, environ, argvs)
