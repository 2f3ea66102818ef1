"""`res hook install`: the gate's hook written into each agent CLI's own settings file (DESIGN §5.8),
and `--uninstall` taking out exactly what it wrote, for every CLI of core/agentclis.py (its record
holds its entries; config/agenthome.py says where its file is). These entries per file, all running
C (and after them each CLI's post-tool events: Claude Code PostToolUse and PostToolUseFailure, Codex
PostToolUse with its trust entry post_tool_use, Gemini CLI AfterTool, matched as the gate's, 10 s;
they release what a command admitted in place booked, docs/agent-hooks.md):

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

    opencode  $OPENCODE_CONFIG_DIR/plugins/res-gate.js, else $XDG_CONFIG_HOME/opencode/plugins/res-gate.js,
            else ~/.config/opencode/plugins/res-gate.js; project .opencode/plugins/res-gate.js
            a plugin of res's own (config/ownhookfiles.OPENCODE_PLUGIN, the res path in it): its tool.execute.before hands
            the bash tool's call to C and sets args.command or throws the refusal; its
            tool.execute.after hands C the post-tool event. Written whole; uninstall removes it only
            while it is byte for byte what res writes (another file there is left, and said so)
    copilot $COPILOT_HOME/hooks/res.json, else ~/.copilot/hooks/res.json; project .github/hooks/res.json
            a hooks file of res's own (config/ownhookfiles.copilot_hooks): {"version": 1, "hooks": {"preToolUse": [{"type":
            "command", "bash": C, "timeoutSec": 30}], "postToolUse": [… C, "timeoutSec": 10]}}. Written
            whole and removed as OpenCode's plugin is

C is `<absolute res> hook --agent <cli>`: before a shell command it gates it; at SessionStart (no
matcher: every source) it tells the loop, which adopts the new session at once (commands/hook.py).
An entry is "ours" when it has exactly that shape, whatever the res path in it (a new path is written
over the old one). A file that already runs `res hook` from an entry of its own is left alone: two
hooks would gate every command twice. An install over one that has only some of the entries adds the
others ("updated").

The settings files are edited as text, not re-serialized (config/jsonedit.py): each new entry goes
in at the end of its list (or its object) laid out as the file lays out what is around it, one event
after the other, and uninstall cuts out the same bytes in the reverse order, so a file that had no
entry of ours comes back byte for byte and comments are never touched. Each edit is checked: the
edited text, parsed again, must be the old data with exactly that change, else nothing is written.

Pure parts (text in, text out): `edit_settings` (on config/jsonedit.py), Codex's trust entries
(config/codextrust.py) and the whole files of res's own (config/ownhookfiles.py). The I/O around them: `install`, `installed` (for `res doctor`). Import-light:
json and os; shlex, tomllib and tomlkit only where used. Formats and sources: docs/agent-hooks.md.
"""
from __future__ import annotations

import json
import os
from typing import NamedTuple

from reconciler.config import jsonedit
from reconciler.config.agenthome import named_config_dir, settings_path
from reconciler.config.codextrust import codex_trust, hook_hash, project_trusted, trust_key
from reconciler.config.gitrepo import project_root
from reconciler.config.jsonedit import SettingsError
from reconciler.config.ownhookfiles import OWN_FILES, hook_command
from reconciler.core.agentclis import CLIS, HookEntry, behaviour

MAX_FILE = 4 << 20  # a settings file bigger than this is not one


def _entries(cli: str) -> tuple[HookEntry, ...]:
    """`cli`'s entries (its record in core/agentclis.py), in the order install adds them (uninstall
    takes them out in the reverse order); the first is the gate's. The post-tool events release what a
    command admitted in place booked (docs/agent-hooks.md)."""
    return CLIS[cli].entries


def _event_spec(cli: str, event: str | None) -> HookEntry:
    """`cli`'s entry for `event` (a key under "hooks"); None: the gate's (its first)."""
    specs = _entries(cli)
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


# ---------------------------------------------------------------- the edit of one settings file


class Change(NamedTuple):
    text: str  # the file's new text (the old text: nothing to write)
    outcome: str  # "installed", "updated", "already", "removed", "absent"
    ours: dict | None = None  # after the edit, per event: the positions in its list of our groups with this command
    removed: dict | None = None  # uninstall, per event: the positions taken out, highest first (each as the list was then)
    before: str | None = None  # "updated": the command an entry of ours had, where it had another
    added: tuple[str, ...] = ()  # "updated": the events whose entry was not there
    note: str = ""  # something the user should know about this file


def _groups(doc: jsonedit.Doc, spec: HookEntry, name: str) -> tuple[jsonedit.Item | None, jsonedit.Item | None, list]:
    """(the "hooks" member, its event member, the event's list) of a document; SettingsError where
    they are not an object and a list, or a key is there twice (which one the CLI reads is its call)."""
    hooks = jsonedit.member(doc.root, "hooks", name, "the file")
    if hooks is None:
        return None, None, []
    if hooks.value.kind != "{":
        raise SettingsError(f'{name}: "hooks" is not an object; nothing written')
    event = jsonedit.member(hooks.value, spec.event, name, '"hooks"')
    if event is None:
        return hooks, None, []
    if event.value.kind != "[":
        raise SettingsError(f"{name}: hooks.{spec.event} is not a list; nothing written")
    return hooks, event, doc.data["hooks"][spec.event]


def _ours(cli: str, spec: HookEntry, groups: list) -> list[int]:
    return [i for i, g in enumerate(groups) if is_ours(cli, g, spec.event)]


def edit_settings(cli: str, text: str | None, command: str, uninstall: bool = False, name: str = "settings") -> Change:
    """The settings file's new text with res's entries added (or taken out). `text` None: no file yet.
    `name` names the file in errors. SettingsError: the file is not what the CLI would read, has its
    own `res hook` entry (install), or the edit could not be made safely."""
    specs = _entries(cli)
    refusal = behaviour(cli).settings_refusal(command, name)  # (Gemini CLI expands $VAR in every settings string)
    if refusal:
        raise SettingsError(refusal)
    if text is None or not text.strip():
        if uninstall:
            return Change(text or "", "absent")
        data = {"hooks": {s.event: [entry(cli, command, s.event)] for s in specs}}
        return Change(json.dumps(data, ensure_ascii=False, indent=2) + "\n", "installed", {s.event: (0,) for s in specs})
    doc = jsonedit.parse(text, specs[0].comments, name)
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
            doc = jsonedit.parse(new, spec.comments, name)
    outcome = kinds[0] if len(set(kinds)) == 1 else "updated"
    if outcome != "updated":
        added = []
    return Change(doc.text, outcome, positions, before=before, added=tuple(added), note=note)


def _add(cli: str, spec: HookEntry, doc: jsonedit.Doc, command: str,
         name: str) -> tuple[str, str, tuple[int, ...], str | None]:
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
        node = jsonedit.value_of(jsonedit.value_of(event.value.items[i].value, "hooks").items[0].value, "command")
        new = jsonedit.replace(doc, node, command)
        want["hooks"][spec.event][i]["hooks"][0]["command"] = command
        _check(new, want, cli, spec, name, command)
        return new, "updated", (i,), groups[i]["hooks"][0]["command"]
    group = entry(cli, command, spec.event)
    if hooks is None:
        new = jsonedit.append(doc, doc.root, "hooks", {spec.event: [group]})
        want["hooks"] = {spec.event: [group]}
    elif event is None:
        new = jsonedit.append(doc, hooks.value, spec.event, [group])
        want["hooks"][spec.event] = [group]
    else:
        new = jsonedit.append(doc, event.value, None, group)
        want["hooks"][spec.event].append(group)
    _check(new, want, cli, spec, name, command)
    return new, "installed", (len(groups),), None


def _take_out(cli: str, spec: HookEntry, doc: jsonedit.Doc, ours: list[int], name: str) -> jsonedit.Doc:
    """Our groups out of the event's list, highest first (the lower positions stay put); then the list,
    and "hooks", if that left them empty with no comment inside (install added them so)."""
    want = json.loads(json.dumps(doc.data))
    for i in sorted(ours, reverse=True):
        _, event, _ = _groups(doc, spec, name)
        group = event.value.items[i]
        if jsonedit.has_comment(doc, group.start, group.value.end):
            raise SettingsError(f"{name}: res's entry in hooks.{spec.event} has a comment inside; remove it by hand; "
                                "nothing written")
        doc = _reparse(jsonedit.remove(doc, event.value, i), cli, spec, name)
        del want["hooks"][spec.event][i]
    hooks, event, groups = _groups(doc, spec, name)
    if not groups and not jsonedit.has_comment(doc, event.start, event.value.end):
        doc = _reparse(jsonedit.remove(doc, hooks.value, hooks.value.items.index(event)), cli, spec, name)
        del want["hooks"][spec.event]
        hooks, _, _ = _groups(doc, spec, name)
        if not hooks.value.items and not jsonedit.has_comment(doc, hooks.start, hooks.value.end):
            doc = _reparse(jsonedit.remove(doc, doc.root, doc.root.items.index(hooks)), cli, spec, name)
            del want["hooks"]
    _check(doc.text, want, cli, spec, name)
    return doc


def _reparse(text: str, cli: str, spec: HookEntry, name: str) -> jsonedit.Doc:
    """A step of an edit read back; one that does not read is refused as in _check."""
    try:
        return jsonedit.parse(text, spec.comments, name)
    except SettingsError:
        _check(text, {}, cli, spec, name)
        raise


def _check(text: str, want: dict, cli: str, spec: HookEntry, name: str, command: str | None = None) -> None:
    """The edited text must read back as exactly the intended data (in a file whose CLI allows no
    comments, as plain JSON), else nothing is written and the user is told what to do by hand."""
    try:
        got = jsonedit.parse(text, spec.comments, name).data
    except SettingsError:
        got = None
    if got != want:
        what = (f"add this to the list hooks.{spec.event} by hand: {json.dumps(entry(cli, command, spec.event))}"
                if command else f"take res's entry out of hooks.{spec.event} by hand")
        raise SettingsError(f"{name}: could not edit it safely; nothing written; {what}")


def _disabled_note(cli: str, data: dict) -> str:
    """A setting in the same file that keeps every hook, or this one, from running (its CLI's module says)."""
    return behaviour(cli).disabled_note(data)


# ---------------------------------------------------------------- OpenCode's plugin, Copilot's hooks file
# (their text: config/ownhookfiles.py)


def _install_own_file(cli: str, path: str, uninstall: bool, res: str) -> list[str]:
    """OpenCode's plugin, Copilot's hooks file: the file of res's own written (or removed), and the line
    saying what was done. Removed only while it is byte for byte what res wrote."""
    make, res_of, events, noun = OWN_FILES[cli]
    text, _ = _read(path)
    want = make(res)
    ours = res_of(text) if text is not None else None
    if uninstall:
        if text is None:
            return [f"{cli}: not installed in {path}"]
        if ours is None:
            return [f"{cli}: {path} is not the file res wrote (changed since, or someone else's); left as it is"]
        os.unlink(path)
        return [f"{cli}: removed {path}"]
    what = f"{events} -> {hook_command(res, cli)}"
    if text == want:
        return [f"{cli}: already installed in {path} ({what})"]
    if text is not None and ours is None:
        raise SettingsError(f"{path}: is not a {noun} res wrote (changed since, or someone else's); "
                            "move it away and run `res hook install` again; nothing written")
    _write(path, want, None)
    if ours is not None:
        return [f"{cli}: updated in {path} ({what}; was {hook_command(ours, cli)})"]
    return [f"{cli}: installed in {path} ({what})"]


# ---------------------------------------------------------------- Codex: hook trust


def codex_hash(spec: HookEntry, command: str) -> str:
    """The trusted_hash of our handler for `spec` (one of Codex's entries) running `command`. Only
    session_end has a timeout of its own (at most 3 s); session_start takes the handler's as it is."""
    return hook_hash(spec.label, spec.matcher, command, dict(spec.handler)["timeout"])


# ---------------------------------------------------------------- where the files are
# (config/agenthome.py: settings_path, and named_config_dir for Codex's config.toml beside its hooks.json)


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
    return ", ".join(f"{s.event} {s.matcher}" if s.matcher else s.event for s in _entries(cli)) + f" -> {command}"


def install_one(cli: str, scope: str, uninstall: bool, environ, cwd: str, res: str) -> list[str]:
    """Install (or uninstall) for one CLI: its line, and a note where the CLI needs more than the file.
    SettingsError (one line): nothing was written for this CLI."""
    command = hook_command(res, cli)
    path = settings_path(cli, scope, environ, cwd)
    if cli in OWN_FILES:
        return _install_own_file(cli, path, uninstall, res)
    text, mode = _read(path)
    change = edit_settings(cli, text, command, uninstall, name=path)
    config = config_text = new_config = None
    trust = behaviour(cli).TRUST_CONFIG  # Codex's config.toml: the trust of each hook written
    if trust:  # read and edited before anything is written: a broken config.toml stops both files
        config = os.path.join(named_config_dir(cli, environ), trust)
        config_text, config_mode = _read(config)
        new_config = config_text or ""
        for spec in _entries(cli):  # each event's keys on their own: positions count within one event's list
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
        note = behaviour(cli).project_note(path, root, config, project_trusted(config_text, root) if trust else None)
        if note:
            lines.append(note)
    return lines


def install(agent: str = "all", scope: str = "user", uninstall: bool = False, environ=None, cwd: str | None = None,
            res: str | None = None) -> tuple[int, list[str]]:
    """`res hook install [--agent claude|codex|gemini|opencode|copilot|all] [--user|--project] [--uninstall]`: (exit
    code, lines). One line per CLI; a CLI whose files cannot be edited gets one `res: …` line (nothing
    written for it) and the exit code 1, and the others are still done."""
    environ = os.environ if environ is None else environ
    cwd = cwd or os.getcwd()
    res = os.path.abspath(res or res_program())  # `ours` is an absolute path
    code, lines = 0, []
    for cli in CLIS if agent == "all" else (agent,):
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
    specs = _entries(agent)
    try:
        path = settings_path(agent, scope, environ, cwd)
        text, _ = _read(path)
        if agent in OWN_FILES:
            return text is not None and OWN_FILES[agent][1](text) is not None
        if text is None or not text.strip():
            return False
        doc = jsonedit.parse(text, specs[0].comments, path)
        found = []
        for spec in specs:
            groups = _groups(doc, spec, path)[2]
            ours = _ours(agent, spec, groups)
            if not ours:
                return False
            found.append((spec, [groups[i]["hooks"][0]["command"] for i in ours], ours))
        trust = behaviour(agent).TRUST_CONFIG  # Codex's: every entry trusted there too
        if not trust:
            return True
        import tomllib

        config, _ = _read(os.path.join(named_config_dir(agent, environ), trust))
        hooks = tomllib.loads(config or "").get("hooks")
        state = hooks.get("state") if isinstance(hooks, dict) else None
        state = state if isinstance(state, dict) else {}

        def trusted(spec: HookEntry, command: str, i: int) -> bool:
            got = state.get(trust_key(path, i, 0, spec.label))
            return isinstance(got, dict) and got.get("trusted_hash") == codex_hash(spec, command)

        return all(any(trusted(spec, c, i) for c, i in zip(commands, ours)) for spec, commands, ours in found)
    except (SettingsError, OSError, ValueError):  # tomllib's errors are ValueErrors
        return None
