"""The first `res` call starts the loop (policy loop_autostart, issue 12 item 2), on a real user
manager: the loop runs as a transient user unit of its own, later calls use it, and queued work moves
on with no further `res` call at all."""
from __future__ import annotations

import os
import re
import signal

import pytest

from clihelp import res, wait_for  # noqa: F401 - res is the fixture

pytestmark = pytest.mark.systemd

BLOCK = "until [ -e \"$0\" ]; do sleep 0.05; done"


def _listening(res) -> bool:
    from reconciler.config.paths import Paths
    from reconciler.loop.start import listening

    return listening(Paths(res.state))


def _loop_pid(res) -> int:
    return int((res.state / "serve.lock").read_text().split()[0])


def _phase(res, job_id: str) -> str | None:
    """The entry's phase in state.db, read here: no `res` call, so nothing but the loop acts."""
    from reconciler.config.paths import Paths
    from reconciler.recorded.store import Store

    with Store.open(Paths(res.state), readonly=True) as store:
        rec = store.get(job_id)
    return rec.phase.value if rec is not None else None


def _stop_loop(res, pid: int) -> None:
    os.kill(pid, signal.SIGTERM)  # the loop this test's first call started, by its pid
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), "the started loop to end", 30)


def test_the_first_call_starts_the_loop_and_the_queue_moves_on_by_itself(res):
    res.env["RES_LOOP_AUTOSTART"] = "true"
    go = res.tmp / "go"
    first = res("run", "--queue", "--mem", "128M", "--for", "5m", "--cpus", "0.1", "--lock", "gate", "--",
                "sh", "-c", BLOCK, str(go))
    assert first.code == 0 and first.one_line().startswith("r-1 started"), str(first)
    m = re.fullmatch(rf"res: no reconciler loop was running for {re.escape(str(res.state))}: started one "
                     rf"\(user unit ({re.escape(res.prefix)}-serve-[0-9a-f]+\.service); "
                     r"`res service install` runs one from boot\)", first.err.strip())
    assert m, str(first)
    wait_for(lambda: _listening(res), "the started loop to listen", 30, step=0.05)
    pid = _loop_pid(res)
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            assert m.group(1) in f.read()  # its own unit: not a child of the agent's shell
        second = res("run", "--queue", "--mem", "128M", "--for", "5m", "--cpus", "0.1", "--lock", "gate", "--",
                     "sh", "-c", "echo second ran")
        assert second.code == 0 and second.one_line().startswith("r-2 queued"), str(second)
        assert second.err == "" and _loop_pid(res) == pid  # asked the running loop; started none
        go.touch()
        # No `res` call from here on: the loop sees r-1 end, and starts and settles r-2 itself.
        log = res.state / "logs" / "r-2.log"
        wait_for(lambda: log.exists() and "second ran" in log.read_text(), "r-2 to run by itself", 60)
        wait_for(lambda: _phase(res, "r-2") == "done", "r-2 settled by the loop", 60)
        done = res("wait", "r-2", "--timeout", "30s")
        assert done.code == 0 and done.one_line().startswith("r-2 done rc=0"), str(done)
    finally:
        _stop_loop(res, pid)


def test_with_autostart_off_a_call_decides_by_itself(res):
    res.env["RES_LOOP_AUTOSTART"] = "false"
    r = res("run", "--mem", "128M", "--for", "1m", "--cpus", "0.1", "--", "true")
    assert r.code == 0 and r.err == "", str(r)
    assert not (res.state / "serve.sock").exists() and not (res.state / "serve.lock").exists()


def test_run_wait_that_starts_the_loop_says_so_once_and_exits_with_the_jobs_code(res):
    """`res run --wait` starts the loop (the run), then waits through it (the wait finds it not yet
    listening): one line about the start, not two; the job's own exit code."""
    res.env["RES_LOOP_AUTOSTART"] = "true"
    r = res("run", "--wait", "--mem", "128M", "--for", "1m", "--cpus", "0.1", "--", "sh", "-c", "exit 3")
    pid = None
    try:
        assert r.code == 3, str(r)
        assert r.err.count("no reconciler loop was running") == 1, str(r)
        wait_for(lambda: _listening(res), "the started loop to listen", 30, step=0.05)
        pid = _loop_pid(res)
    finally:
        if pid is not None:
            _stop_loop(res, pid)
