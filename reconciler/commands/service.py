"""`res service install|uninstall|status`: the reconciler loop (`res serve`) as a user service of the
systemd user manager (DESIGN §6, §8). See docs/service.md.

The unit is `<unit_prefix>-serve.service`, rendered from templates/units/res-serve.service.j2 into the
user's unit directory (`reconciler.render.unitfiles.user_unit_dir()`), then daemon-reload, enable and start,
all over D-Bus. It runs this installation's `res` with the environment that decides which state and
policy it serves: RES_STATE_DIR and RES_POLICY_FILE pinned to absolute paths, every other RES_*
variable of the installing environment, PATH (and PYTHONPATH only when this interpreter needs it to
import this copy of res).

The first half is pure (names, quoting, what the unit says); the second half talks to the manager.
dbus-fast and jinja2 are imported only inside the functions that use them.
"""
from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping, NamedTuple

from reconciler.config.environ import is_secret
from reconciler.config.paths import Paths

TEMPLATE = "res-serve.service.j2"
READY_S = 30.0  # how long install waits for the started loop to answer on its socket
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# RES_* names that are not the loop's to inherit: the exit record's path is set per job unit.
NOT_INHERITED = frozenset({"RES_EXIT_RECORD"})
# What the loop imports beyond the package itself (pyproject's dependencies the loop uses).
LOOP_IMPORTS = ("reconciler.cli", "pydantic", "pydantic_settings", "tomlkit", "jinja2", "dbus_fast", "apscheduler")
ENABLED = frozenset({"enabled", "enabled-runtime", "linked", "linked-runtime", "alias"})


# ---------------------------------------------------------------------------------- pure


def unit_name(unit_prefix: str) -> str:
    from reconciler.config.paths import loop_unit_stem

    return f"{loop_unit_stem(unit_prefix)}.service"


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t"}


def quote_word(text: str, dollar: bool = False) -> str:
    """One double-quoted word of a unit file line (systemd.syntax(7)): backslash, double quote and
    control characters as C escapes, `%` doubled (specifiers are expanded in ExecStart= and
    Environment=), `$` doubled when `dollar` (ExecStart= expands $VAR; Environment= does not)."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        elif ch == "%":
            out.append("%%")
        elif ch == "$" and dollar:
            out.append("$$")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def exec_line(argv: list[str]) -> str:
    """ExecStart= value that runs `argv` verbatim."""
    return " ".join(quote_word(a, dollar=True) for a in argv)


def env_assignment(name: str, value: str) -> str:
    """One Environment= word, `"NAME=value"` quoted: spaces, quotes, `%`, `$`, backslashes and
    newlines reach the service unchanged (checked against systemd 252 by tests/test_service.py)."""
    if not ENV_NAME.match(name):
        raise ValueError(f"not an environment variable name: {name!r}")
    return quote_word(f"{name}={value}")


def _usable_value(value: str) -> bool:
    """systemd takes any UTF-8 without NUL; os.environ holds undecodable bytes as surrogates."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\0" not in value


def service_environment(env: Mapping[str, str], state_dir: str, policy_file: str,
                        pythonpath: str | None = None) -> dict[str, str]:
    """What the service's `res serve` gets on top of the user manager's environment: every RES_*
    variable of `env` (valid names, nothing secret-looking: the unit file is world-readable), the
    state directory and policy file pinned, PATH, SLURM_CONF where set, and PYTHONPATH if given. Sorted by name."""
    out = {}
    for name, value in env.items():
        if (name.startswith("RES_") and ENV_NAME.match(name) and name not in NOT_INHERITED
                and not is_secret(name, value) and _usable_value(value)):
            out[name] = value
    out["RES_STATE_DIR"] = state_dir
    out["RES_POLICY_FILE"] = policy_file
    for name in ("PATH", "SLURM_CONF"):  # the Slurm tools' config: the cluster the service submits to
        if env.get(name) and _usable_value(env[name]):
            out[name] = env[name]
    if pythonpath:
        out["PYTHONPATH"] = pythonpath
    return dict(sorted(out.items()))


def render_unit(argv: list[str], environment: Mapping[str, str], state_dir: str) -> str:
    """The unit file's text (jinja2, templates/units/res-serve.service.j2)."""
    from reconciler.render.unitfiles import render

    return render(TEMPLATE, exec_start=exec_line(argv),
                  environment=[env_assignment(k, v) for k, v in environment.items()], state_dir=state_dir)


class UnitState(NamedTuple):
    load: str  # LoadState: loaded, not-found, ...
    active: str  # ActiveState
    sub: str  # SubState
    file_state: str  # UnitFileState: enabled, disabled, "" (no file)
    pid: int  # MainPID, 0 when none
    result: str  # Result of the last run: success, exit-code, signal, ...
    status: int  # ExecMainStatus
    reload: bool  # NeedDaemonReload
    env: tuple[str, ...]  # Environment= as loaded

    @property
    def running(self) -> bool:
        return self.active == "active" and self.pid > 0

    @property
    def stopped(self) -> bool:
        return self.active in ("inactive", "failed") and self.sub != "auto-restart"


NO_UNIT = UnitState("not-found", "inactive", "dead", "", 0, "", 0, False, ())


def serves(st: UnitState, text: str | None = None) -> str | None:
    """The state directory the service serves: from its unit file's text when given (what the next
    start will use), else from the loaded unit's environment; None if unknown."""
    for line in (text or "").splitlines():
        m = re.fullmatch(r'Environment="RES_STATE_DIR=(.*)"', line)
        if m:
            return unquote_word(m.group(1))
    return next((kv.split("=", 1)[1] for kv in st.env if kv.startswith("RES_STATE_DIR=")), None)


def unquote_word(quoted: str) -> str:
    """The inverse of quote_word for a word's inside (without its double quotes)."""
    out, i = [], 0
    while i < len(quoted):
        ch = quoted[i]
        if ch == "\\" and i + 1 < len(quoted):
            nxt = quoted[i + 1]
            if nxt == "x" and i + 3 < len(quoted):
                out.append(chr(int(quoted[i + 2:i + 4], 16)))
                i += 4
                continue
            out.append({"n": "\n", "t": "\t"}.get(nxt, nxt))
            i += 2
            continue
        if ch == "%" and quoted[i + 1:i + 2] == "%":
            out.append("%")
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def status_lines(name: str, path: Path, installed: bool, st: UnitState) -> list[str]:
    """`res service status`: one line per fact, `key value`."""
    serving = serves(st)
    lines = [f"unit       {name}",
             f"installed  {path if installed else 'no'}",
             f"enabled    {'yes' if st.file_state in ENABLED else 'no'}"
             + (f" ({st.file_state})" if st.file_state and st.file_state not in ("enabled", "disabled") else ""),
             f"active     {st.active} ({st.sub})" + (f", pid {st.pid}" if st.pid else "")]
    if installed and serving:
        lines.append(f"serves     {serving}")
    return lines


# ---------------------------------------------------------------------------------- shell


def res_command(python: str | None = None, here: Path | None = None) -> tuple[list[str], str | None]:
    """(argv that runs this installation's `res`, PYTHONPATH it needs or None).

    The console script next to the interpreter (what `pip install` made for it) when its shebang is
    this interpreter, else `python -m reconciler.cli` (there is no reconciler/__main__.py). Either way
    the interpreter must import *this* package, from anywhere: checked in a child process (cwd /,
    no PYTHONPATH); when it does not (a checkout run in place, a stale editable install) the
    checkout goes on PYTHONPATH. `here`: the package directory to run (tests)."""
    python = python or sys.executable
    here = here or Path(__file__).resolve().parent.parent  # the package directory
    script = Path(python).parent / "res"
    argv = [python, "-m", "reconciler.cli"]
    try:
        with open(script, "rb") as f:
            first = f.readline().decode(errors="replace")
        if first.startswith("#!") and os.access(script, os.X_OK) \
                and os.path.realpath(first[2:].strip()) == os.path.realpath(python):
            argv = [str(script)]
    except OSError:
        pass
    if _imports_here(python, here, None):
        return argv, None
    pythonpath = str(here.parent)
    if _imports_here(python, here, pythonpath):
        return argv, pythonpath
    raise RuntimeError(f"{python} cannot import this res ({here}) and what the loop needs "
                       f"({', '.join(LOOP_IMPORTS[1:])}) even with PYTHONPATH={pythonpath}")


def _imports_here(python: str, here: Path, pythonpath: str | None) -> bool:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    code = ("import importlib, sys\n"
            f"for m in {LOOP_IMPORTS!r}: importlib.import_module(m)\n"
            "import reconciler; sys.stdout.write(reconciler.__file__)")
    try:
        r = subprocess.run([python, "-c", code], cwd="/", env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and Path(r.stdout.strip()).resolve().parent == here


def serve_lock_holder(lock: Path) -> str | None:
    """The pid written in `res serve`'s lock if a process holds it ("?" if unreadable), else None.
    Tested with a shared, non-blocking flock held for an instant (never the exclusive one)."""
    import errno
    import fcntl

    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None  # a symlink: `res serve` refuses it too, so nobody serves through it
        raise
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.read(fd, 64).decode(errors="replace").strip() or "?"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


async def _state(rt, name: str) -> UnitState:
    from reconciler.runtime.managerbus import DBusCallError

    unit = await rt.unit_properties(name, "Unit")
    service: dict = {}
    try:
        service = await rt.unit_properties(name, "Service")
    except DBusCallError:
        pass  # not loaded: no Service properties
    return UnitState(load=str(unit.get("LoadState", "")), active=str(unit.get("ActiveState", "")),
                     sub=str(unit.get("SubState", "")), file_state=str(unit.get("UnitFileState", "")),
                     pid=int(service.get("MainPID", 0) or 0), result=str(service.get("Result", "")),
                     status=int(service.get("ExecMainStatus", 0) or 0),
                     reload=bool(unit.get("NeedDaemonReload", False)),
                     env=tuple(str(e) for e in service.get("Environment", []) or []))


def _journal_hint(name: str) -> str:
    return f"see: journalctl --user -u {name}"


async def _wait_ready(rt, name: str, paths: Paths) -> tuple[int | None, str]:
    """(MainPID, "") once the service's loop answers a ping on its socket, else (None, why)."""
    from reconciler.loop.client import NoDaemon, ask
    from reconciler.loop.protocol import Ping

    deadline = time.monotonic() + READY_S
    why = f"its loop did not answer on {paths.socket} in {READY_S:g} s"
    while time.monotonic() < deadline:
        st = await _state(rt, name)
        if st.active == "failed" or st.sub in ("auto-restart", "dead", "failed"):
            return None, f"it exited ({st.result or st.sub}, status {st.status})"
        if st.running:
            try:
                answer = await asyncio.to_thread(ask, paths.socket, Ping(), 2)
            except (NoDaemon, OSError, ValueError):
                answer = None
            except Exception:  # noqa: BLE001 - NoAnswer: the loop is still coming up
                answer = None
            if answer and answer.get("line") == f"pid {st.pid}":
                return st.pid, ""
            if answer and answer.get("line", "").startswith("pid "):
                why = f"another loop answers on {paths.socket} ({answer['line']})"
        await asyncio.sleep(0.1)
    return None, why


def _runs_older_code(paths: Paths) -> bool:
    """Whether the running loop started from other code than this installation has now (an upgrade,
    an edited checkout); a loop too old to say counts as older."""
    from reconciler import code_fingerprint
    from reconciler.loop.client import NoDaemon, ask
    from reconciler.loop.protocol import Ping

    try:
        answer = ask(paths.socket, Ping(), 5)
    except (NoDaemon, OSError, ValueError):
        return False  # nobody answers: the start below is what helps, not a restart
    return answer.get("code_id") != code_fingerprint()


async def _install(rt, name: str, unit_dir: Path, text: str, paths: Paths) -> tuple[int, list[str]]:
    """Install (or update) the unit file, enable it, and have it run this code: started if stopped,
    restarted if its file changed or the code it runs is older than this copy."""
    await rt.connect()
    before = await _state(rt, name)
    refused = await _install_refused(rt, name, unit_dir, paths, before)
    if refused is not None:
        return 1, [refused]
    changed, lines = await _write_and_enable(rt, name, unit_dir, text, before)
    stale = before.running and not changed and await asyncio.to_thread(_runs_older_code, paths)
    if before.running and not changed and not stale:
        if not lines:
            return 0, [f"{name} already installed and running (pid {before.pid})"]
        return 0, lines + [f"{name} running (pid {before.pid})"]
    verb = "started"
    if not before.stopped:
        await rt.stop_unit(name)
        verb = "restarted" if before.running else "started"
    result = await rt.start_unit(name)
    if result not in ("done", None):
        return 1, [f"res: {name} is installed and enabled but did not start (job {result}); {_journal_hint(name)}"]
    pid, why = await _wait_ready(rt, name, paths)
    if pid is None:
        return 1, [f"res: {name} is installed and enabled but {why}; {_journal_hint(name)}"]
    why = "; the code it ran had changed since it started" if stale else ""
    return 0, lines + [f"{verb} {name} (pid {pid}), serving {paths.root}{why}"]


async def _install_refused(rt, name: str, unit_dir: Path, paths: Paths, before) -> str | None:
    """Why installing here would be wrong (the one line to print), or None: the unit directory is not
    searched, the unit serves another state directory, or a `res serve` outside it already serves
    this one."""
    from reconciler.runtime.unitfiles import _current

    search = {os.path.normpath(str(p)) for p in await rt.manager_property("UnitPath")}
    if os.path.normpath(str(unit_dir)) not in search:
        return f"res: {unit_dir} is not in the user manager's unit search path (see: res doctor)"
    on_disk = _current(unit_dir / name, "use")
    other = serves(before, on_disk)
    if other is not None and os.path.normpath(other) != os.path.normpath(str(paths.root)) and on_disk is not None:
        return f"res: {name} serves {other}; to serve {paths.root} instead, first: RES_STATE_DIR={other} res service uninstall"
    holder = serve_lock_holder(paths.serve_lock)
    if holder is not None and not (before.running and str(before.pid) == holder):
        return (f"res: res serve already runs for {paths.root} outside {name} (pid {holder}); "
                "stop it, then run res service install again")
    return None


async def _write_and_enable(rt, name: str, unit_dir: Path, text: str, before) -> tuple[bool, list[str]]:
    """(whether the unit file changed, the lines saying what was done)."""
    from reconciler.runtime.unitfiles import install_unit

    path = unit_dir / name
    existed = path.exists()
    changed = await asyncio.to_thread(install_unit, unit_dir, name, text)
    lines = []
    if changed:
        lines.append(f"{'updated' if existed else 'installed'} {path}")
    if changed or before.reload:
        await rt.daemon_reload()
    if before.file_state not in ENABLED or not existed:
        await rt.enable_unit_files([name])
        await rt.daemon_reload()  # as `systemctl enable` does: the manager sees the new symlink
        lines.append(f"enabled {name} (starts with the user manager)")
    return changed, lines


async def _uninstall(rt, name: str, unit_dir: Path, paths: Paths) -> tuple[int, list[str]]:
    from reconciler.render.unitfiles import ours
    from reconciler.runtime.unitfiles import _current, remove_unit

    await rt.connect()
    st = await _state(rt, name)
    on_disk = _current(unit_dir / name, "use")  # refuses a symlink, before anything is stopped
    if on_disk is not None and not ours(on_disk):
        return 1, [f"res: {unit_dir / name} was not written by res; leaving it (and its service) alone"]
    other = serves(st, on_disk)
    if other is not None and os.path.normpath(other) != os.path.normpath(str(paths.root)):
        return 1, [f"res: {name} serves {other}, not {paths.root}; to remove it: RES_STATE_DIR={other} res service uninstall"]
    path = unit_dir / name
    lines = []
    if not st.stopped:
        await rt.stop_unit(name)
        lines.append(f"stopped {name}" + (f" (pid {st.pid})" if st.pid else ""))
    wants = [p for p in unit_dir.glob(f"*.wants/{name}") if p.is_symlink()]
    if st.file_state in ENABLED or wants:
        await rt.disable_unit_files([name])
        for p in wants:  # left if the file had gone before the link (disable finds links by target)
            if p.is_symlink():
                p.unlink()
        lines.append(f"disabled {name}")
    if remove_unit(unit_dir, name):
        lines.append(f"removed {path}")
    if lines:
        await rt.daemon_reload()
    if st.active == "failed" or st.sub == "failed":
        try:
            await rt.reset_failed_unit(name)
        except Exception:  # noqa: BLE001 - not loaded any more: nothing to reset
            pass
    return 0, lines or [f"{name} not installed"]


async def _status(rt, name: str, unit_dir: Path) -> tuple[int, list[str]]:
    await rt.connect()
    st = await _state(rt, name)
    path = unit_dir / name
    return 0, status_lines(name, path, path.exists(), st)


def cmd_service(action: str, paths: Paths, policy) -> tuple[int, list[str]]:
    """`res service install|uninstall|status` -> (exit code, lines)."""
    from reconciler.runtime import RuntimeUnavailable
    from reconciler.runtime.unitfiles import user_unit_dir

    name = unit_name(policy.unit_prefix)
    unit_dir = user_unit_dir()
    paths = Paths(Path(os.path.abspath(paths.root)))

    async def run(step, *args):
        from reconciler.loop.tick import make_runtime

        rt = make_runtime(paths, policy)
        try:
            return await step(rt, *args)
        finally:
            await rt.close()

    try:
        if action == "install":
            from reconciler.config.policy import user_policy_path

            argv, pythonpath = res_command()
            env = service_environment(os.environ, str(paths.root), os.path.abspath(user_policy_path()), pythonpath)
            text = render_unit(argv + ["serve"], env, str(paths.root))
            return asyncio.run(run(_install, name, unit_dir, text, paths))
        if action == "uninstall":
            return asyncio.run(run(_uninstall, name, unit_dir, paths))
        if action == "status":
            return asyncio.run(run(_status, name, unit_dir))
    except RuntimeUnavailable as e:
        return 1, [f"res: {e}"]
    except OSError as e:
        return 1, [f"res: {e.filename + ': ' if getattr(e, 'filename', None) else ''}{e.strerror or e}"]
    except (RuntimeError, ValueError) as e:
        return 1, [f"res: {' '.join(str(e).split())}"]
    return 2, [f"res: service: unknown action {action!r} (see: res service --help)"]
