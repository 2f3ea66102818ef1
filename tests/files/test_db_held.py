"""state.db held by another process's exclusive transaction (issue 40 item 2): every wait res asks
for is kept, and the held database is said once, in res's words, naming what holds it. A real
SQLite lock held by a real process; `res` itself for the command lines (no loop: each decides here).
No wall-clock assertion: each call is bounded by a generous subprocess timeout far below the 30 s
SQLite's busy timeout used to take, and its exit code and line are what is checked."""
from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from reconciler.config.locks import describe_pid, lock_holders
from reconciler.config.paths import Paths
from reconciler.core.lifecycle import transition
from reconciler.config.deadline import clear_deadline, wait_limits
from reconciler.recorded.errors import StoreBusy
from reconciler.recorded.store import Store

ROOT = Path(__file__).resolve().parents[2]
SQLITE_WORDS = re.compile(r"database is locked|database is busy|sqlite3\.|OperationalError|Traceback")

HOLD = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('held', 'yes')")
print("holding", flush=True)
sys.stdin.read()  # until the test closes our stdin
conn.execute("ROLLBACK")
"""


@pytest.fixture
def state(tmp_path):
    """A state directory with state.db set up and one queued record, r-1."""
    from reconciler.core.models import Request

    paths = Paths(tmp_path / "state")
    with Store.open(paths) as store:
        req = Request(id="r-1", title="t", mem_gb=0.1, est_s=60, created=1.0, cmd=["true"], queue=True)
        store.put(transition(None, "enqueue", time.time(), request=req))
    return paths


@contextmanager
def holding(db: Path, tmp_path: Path, script_text: str = None, name: str = "holder.py"):
    """`db` held in an exclusive transaction by another process (its Popen) until the block ends."""
    script = tmp_path / name
    script.write_text(script_text or HOLD)
    p = subprocess.Popen([sys.executable, str(script), str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "holding"
        yield p
    finally:
        p.stdin.close()
        p.wait(30)


@pytest.fixture
def held(state, tmp_path):
    with holding(state.db, tmp_path) as p:
        yield p


def test_the_holder_is_found_in_proc_locks(state, held):
    assert lock_holders(state.db) == [held.pid]
    said = describe_pid(held.pid)
    # its command line as `ps` names it (the program's own name), cut at 80 characters where the
    # temporary directory makes it longer
    whole = " ".join([Path(sys.executable).name, *held.args[1:]])
    shown = said.removeprefix(f"pid {held.pid} (").removesuffix(")")
    assert shown == whole or (len(shown) == 81 and shown.endswith("…") and whole.startswith(shown[:-1])), said


def test_a_write_waits_no_longer_than_this_process_may_and_names_the_holder(state, held):
    wait_limits(deadline=time.monotonic() + 0.3)
    try:
        with Store.open(state) as store:  # opened without a write: it is set up already
            assert store.get("r-1") is not None  # reads go on (WAL)
            with pytest.raises(StoreBusy) as e:
                store.set_meta("x", "y")
    finally:
        clear_deadline()
    line = str(e.value)
    assert line.startswith(f"{state.db}: held by pid {held.pid} (python") and "in a write transaction" in line, line
    assert not SQLITE_WORDS.search(line), line


def _res(state: Paths, *args: str, timeout: float, **env) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), "RES_STATE_DIR": str(state.root), "RES_LOOP_AUTOSTART": "false",
         "DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent", **env}
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], env=e, capture_output=True, text=True,
                          timeout=timeout, cwd=str(state.root))


def _one_line(r) -> str:
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert not SQLITE_WORDS.search(lines[0]), lines[0]
    return lines[0]


def test_wait_with_a_timeout_answers_124_naming_the_holder(state, held):
    r = _res(state, "wait", "r-1", "--timeout", "2s", timeout=20)  # (it took 30-34 s before)
    assert r.returncode == 124, r
    line = _one_line(r) if r.stderr else r.stdout.strip()
    assert line.startswith("res: r-1 still queued after 2 s; no pass could run: ") and f"pid {held.pid}" in line, line


def test_run_answers_within_its_wait_and_starts_nothing(state, held):
    r = _res(state, "run", "--mem", "64M", "--for", "1m", "--", "true", timeout=30, RES_ANSWER_WAIT_S="1.5")
    assert r.returncode == 1, r
    line = _one_line(r)
    assert f"pid {held.pid}" in line and ("never starts" in line or "nothing was changed" in line), line


def test_release_says_the_database_is_held_and_changes_nothing(state, held):
    r = _res(state, "release", "r-1", timeout=30, RES_ANSWER_WAIT_S="1.5")
    assert r.returncode == 1 and f"pid {held.pid}" in _one_line(r), r


def test_status_still_answers_while_it_is_held(state, held):
    r = _res(state, "status", "r-1", timeout=30)
    assert r.returncode == 0 and "r-1" in r.stdout, r


def test_a_sqlite_error_that_reaches_the_command_line_is_said_in_our_words(tmp_path):
    paths = Paths(tmp_path / "state")
    paths.ensure()
    paths.db.write_bytes(b"this is not a database" * 100)
    r = _res(paths, "status", timeout=30)
    assert r.returncode == 1, r
    line = _one_line(r)
    assert line.startswith(f"res: {paths.db}: it is not a SQLite database"), line


def test_the_loop_says_a_held_database_once_and_answers_meanwhile(state, held, caplog):
    """The loop's own passes meet the held database: each fails at once (its statements wait 0.25 s at
    most), the loop goes on answering, and its log says so once, not every pass."""
    import logging

    from reconciler.loop.serve import LOOP_BUSY_S, Ticker
    from reconciler.config.deadline import BUSY_TIMEOUT_S

    store = Store.open(state)

    class Engine:
        adder = None

        async def tick(self):
            store.set_meta("x", "y")  # a pass's first write

    wait_limits(busy_s=LOOP_BUSY_S)
    try:
        ticker = Ticker(Engine())

        async def passes():
            for _ in range(5):
                await ticker.pass_after_now()

        with caplog.at_level(logging.WARNING, logger="res"):
            asyncio.run(passes())
    finally:
        wait_limits(busy_s=BUSY_TIMEOUT_S)
        store.close()
    said = [r.getMessage() for r in caplog.records if r.name.startswith("res")]
    assert len(said) == 1 and said[0].startswith("pass failed: ") and f"pid {held.pid}" in said[0], said
    assert isinstance(ticker.failure, StoreBusy)


@pytest.mark.parametrize("args", [("reconcile",), ("game", "on"), ("adopt",)])
def test_commands_that_run_a_pass_here_answer_within_the_answer_wait(state, held, args):
    r = _res(state, *args, timeout=30, RES_ANSWER_WAIT_S="2")
    assert r.returncode == 1, r
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("res: ")]
    assert lines and any(f"pid {held.pid}" in ln for ln in lines), r.stderr
    assert not SQLITE_WORDS.search(r.stderr) and not SQLITE_WORDS.search(r.stdout), r


HOLD_ALL = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA locking_mode = EXCLUSIVE")
conn.execute("BEGIN EXCLUSIVE")
conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('held', 'yes')")
print("holding", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


def test_a_holder_that_keeps_even_readers_out_still_gets_a_timeout_answered_124(state, tmp_path):
    with holding(state.db, tmp_path, HOLD_ALL, "holder-all.py"):
        r = _res(state, "wait", "r-1", "--timeout", "2s", timeout=20)
        assert r.returncode == 124, r
        line = _one_line(r)
        assert line.startswith("res: r-1 not known to be done after 2 s: ") and "held by" in line, line
        r = _res(state, "status", timeout=30, RES_ANSWER_WAIT_S="2")
        assert r.returncode == 1 and "held by" in _one_line(r), r


HOLD_TICK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)  # a pass that does not end (a loop stopped in the middle of one)
print("holding", flush=True)
sys.stdin.read()
"""


def test_a_pass_that_does_not_end_elsewhere_keeps_no_caller_past_its_wait(state, tmp_path):
    with holding(state.root / "tick.lock", tmp_path, HOLD_TICK, "tick-holder.py") as p:
        r = _res(state, "run", "--mem", "64M", "--for", "1m", "--", "true", timeout=30, RES_ANSWER_WAIT_S="2")
        assert r.returncode == 1, r
        line = _one_line(r)
        assert "held the tick lock past this call's deadline" in line and f"pid {p.pid}" in line, line
        assert line.endswith("withdrawn: it never starts (ask again)"), line
        r = _res(state, "wait", "r-1", "--timeout", "2s", timeout=20)
        assert r.returncode == 124 and "tick lock" in _one_line(r), r
