"""The hot paths' imports, held to a listed budget (issue 38 item 2): `res hook` (a light command, and
a heavy one the loop is asked about), `res status` and `res run` (a running loop answers: here a
socket server of the test's own, so that only the client's imports are counted). Each is run as a
user runs it (`python3 -X importtime` on the console script's entry point, a fresh process) and
every module it imports beyond what the same interpreter imports for `python3 -c pass` (its site
packages' own start-up) must be in its list below. A module that is not names itself and the path:
adding one to a hot path is a decision (its cost: bench h, i and a), made here on purpose.

Module sets, not times: what a process imports is the same on every machine; how long it takes is
not (bench/run.py prints the times as ratios)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

# What each hot path may import beyond the interpreter's own start-up (measured in a fresh venv on
# Python 3.11 with a regular install, where that start-up is smallest: an editable install's finder
# brings pathlib, fnmatch and urllib in at start-up, so there they are never counted). A C accelerator (`_json`, `_sre`, …) comes with its
# module, and `nt`/`ntpath` are pathlib's probes: not listed.
BUDGET: dict[str, set[str]] = {
    "hook, a light command": {
        "collections", "copyreg", "enum", "functools", "itertools", "json", "json.decoder", "json.encoder",
        "json.scanner", "keyword", "operator", "re", "re._casefix", "re._compiler", "re._constants",
        "re._parser", "reconciler", "reconciler.commands", "reconciler.commands.hook", "reconciler.config",
        "reconciler.config.gatefile", "reconciler.config.gitrepo", "reconciler.config.stateroot",
        "reconciler.core", "reconciler.core.agentclis", "reconciler.core.clis", "reconciler.core.clis.claude",
        "reconciler.core.gate", "reconciler.core.hooks", "reconciler.core.shellline", "reconciler.core.sizing",
        "reconciler.entry",
        "reprlib", "select", "shlex", "types"
    },
    "hook, a heavy command the loop is asked about": {
        "array", "hashlib", "collections", "collections.abc", "contextlib", "copyreg", "enum", "errno",
        "functools", "itertools", "json", "json.decoder", "json.encoder", "json.scanner",
        "keyword", "math", "operator", "re", "re._casefix", "re._compiler", "re._constants",
        "re._parser", "reconciler", "reconciler.commands", "reconciler.commands.hook", "reconciler.commands.hookloop",
        "reconciler.config", "reconciler.config.agenthome", "reconciler.config.agentsettings", "reconciler.config.files",
        "reconciler.config.gatefile",
        "reconciler.config.gitrepo", "reconciler.config.stateroot", "reconciler.core", "reconciler.core.agentclis",
        "reconciler.core.clis", "reconciler.core.clis.claude", "reconciler.core.gate", "reconciler.core.hookrules",
        "reconciler.core.hooks", "reconciler.core.shellline", "reconciler.core.shellrules", "reconciler.core.sizing",
        "reconciler.entry", "reconciler.loop",
        "reconciler.loop.client", "reconciler.loop.protocol", "reprlib", "select", "selectors", "shlex", "socket", "types",
        "typing",
        "warnings"
    },
    "status, the loop running": {  # answered from entry.py: no argparse, pathlib or typing
        "array", "collections", "collections.abc", "copyreg", "enum", "errno", "functools", "itertools", "json",
        "json.decoder", "json.encoder", "json.scanner", "keyword", "math", "operator", "re", "re._casefix",
        "re._compiler", "re._constants", "re._parser", "reconciler", "reconciler.commands",
        "reconciler.commands.status", "reconciler.config", "reconciler.config.stateroot", "reconciler.entry",
        "reconciler.loop", "reconciler.loop.client", "reconciler.loop.protocol", "reprlib", "select", "selectors",
        "socket", "types"
    },
    "run, the loop running, it fits": {
        "argparse", "array", "collections", "collections.abc", "contextlib", "copyreg", "enum", "errno",
        "fnmatch", "functools", "gettext", "importlib", "ipaddress", "itertools", "json", "json.decoder",
        "json.encoder", "json.scanner", "keyword", "locale", "math", "operator", "pathlib", "pwd", "re",
        "re._casefix", "re._compiler", "re._constants", "re._parser", "reconciler", "reconciler.cli",
        "reconciler.commands", "reconciler.commands.base", "reconciler.config",
        "reconciler.config.deadline", "reconciler.config.environ", "reconciler.config.gitrepo",
        "reconciler.config.paths", "reconciler.config.stateroot", "reconciler.core", "reconciler.core.agentclis", "reconciler.core.clis",
        "reconciler.core.agents", "reconciler.core.quantities", "reconciler.entry", "reconciler.loop", "reconciler.loop.client",
        "reconciler.loop.protocol", "reconciler.observed", "reconciler.observed.asker", "reconciler.observed.procs", "reprlib",
        "select", "selectors", "socket", "types", "typing", "urllib", "urllib.parse", "warnings"
    },
}

ANSWERS = {
    "submit": {"code": 0, "line": "r-1 started; log /x/r-1.log; ETA ~12:00", "data": {"id": "r-1", "state": "running"}},
    "status": {"code": 0, "line": "no entries"},
    "gate": {"fits": "now", "start": None, "mem_gb": 1.0, "cpus": 1.0},
}


def _event(command: str) -> str:
    return json.dumps({"session_id": "s-1", "hook_event_name": "PreToolUse", "tool_name": "Bash", "cwd": "/tmp",
                       "permission_mode": "default", "tool_input": {"command": command, "description": "x"}})


@pytest.fixture
def loop_socket(tmp_path):
    """A socket server answering each request as a running loop would, in one line, until the test ends."""
    state = tmp_path / "state"
    state.mkdir()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(state / "serve.sock"))
    server.listen(8)
    done = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                buf = b""
                while b"\n" not in buf:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                try:
                    op = json.loads(buf.split(b"\n")[0]).get("op")
                except ValueError:
                    op = None
                conn.sendall(json.dumps(ANSWERS.get(op, {"code": 0, "line": "ok"})).encode() + b"\n")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield state
    done.set()
    t.join(5)
    server.close()


def _imported(argv: list[str], env: dict, stdin: str | None = None) -> tuple[set[str], subprocess.CompletedProcess]:
    p = subprocess.run([sys.executable, "-X", "importtime", *argv], input=stdin, capture_output=True, text=True,
                       env=env, cwd="/tmp", timeout=60)
    mods = {ln.rsplit("|", 1)[-1].strip() for ln in p.stderr.splitlines() if ln.startswith("import time:")}
    return mods - {"package"}, p


ROOT = Path(__file__).resolve().parents[2]
ENTRY = "import sys; sys.argv[0] = 'res'; from reconciler.entry import main; main()"


@pytest.mark.parametrize("path", sorted(BUDGET))
def test_each_hot_path_imports_only_its_listed_modules(path, loop_socket, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RES_")}
    env.update(RES_STATE_DIR=str(loop_socket), RES_LOOP_AUTOSTART="false", CLAUDE_CONFIG_DIR=str(tmp_path / "claude"))
    (tmp_path / "claude").mkdir()
    (loop_socket / "gate.json").write_text(json.dumps({"v": 1, "wait_s": 30, "learned": {},
                                                       "table": {"pytest": {"mem_gb": 1, "cpus": 1, "minutes": 5}}}))
    base, _ = _imported(["-c", "pass"], env)
    call = {
        "hook, a light command": (["hook"], _event("ls -la")),
        "hook, a heavy command the loop is asked about": (["hook"], _event("pytest -q tests")),
        "status, the loop running": (["status"], None),
        "run, the loop running, it fits": (["run", "--mem", "1G", "--for", "1m", "--", "true"], None),
    }[path]
    mods, p = _imported(["-c", ENTRY, *call[0]], env, call[1])
    assert p.returncode == 0, p.stderr[-2000:]
    beyond = sorted(m for m in mods - base - BUDGET[path] if not m.startswith(("encodings.", "_")) and m not in ("nt", "ntpath"))
    assert not beyond, f"{path}: imports {', '.join(beyond)}, not in its budget (tests/files/test_import_budget.py)"
    # and a budget that outgrew its path is cut back: a module it no longer imports is not kept listed
    unused = sorted(m for m in BUDGET[path] - mods if m not in base)
    assert not unused, f"{path}: no longer imports {', '.join(unused)}: take it out of its budget"
    # the budget is a budget, not a wish: the path does import what makes it a path of res's
    assert {"reconciler.entry"} <= mods, sorted(mods)


def test_the_budget_names_no_heavy_library():
    heavy = ("pydantic", "pydantic_core", "pydantic_settings", "tomlkit", "jinja2", "dbus_fast", "apscheduler",
             "sqlite3", "asyncio")
    for path, allowed in BUDGET.items():
        assert not [m for m in allowed if m.split(".")[0] in heavy], path


def test_a_module_beyond_the_budget_is_named(loop_socket, tmp_path, monkeypatch):
    """The check fails as it should: a light hook path with `sqlite3` loaded names it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RES_")}
    env.update(RES_STATE_DIR=str(loop_socket), RES_LOOP_AUTOSTART="false")
    base, _ = _imported(["-c", "pass"], env)
    mods, p = _imported(["-c", "import sqlite3; " + ENTRY, "hook"], env, _event("ls -la"))
    beyond = sorted(m for m in mods - base - BUDGET["hook, a light command"] if not m.startswith(("encodings.", "_")))
    assert p.returncode == 0 and "sqlite3" in beyond, beyond
