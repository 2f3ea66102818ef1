"""The first calls of a crowd, on a real user manager: eight agents' `res run` at once find no loop
running, one loop starts, and only the call that started it says so; and the loop a call starts gets
no secret of the caller's environment, RES_* or not (its Environment is in a 0644 unit file)."""
from __future__ import annotations

import os
import re
import signal

import pytest

from clihelp import PY, res, unit_props, wait_for  # noqa: F401 - res is the fixture
from test_autostart import _listening, _loop_pid

pytestmark = pytest.mark.systemd

STARTED = "no reconciler loop was running"


def _stop_loop(res) -> None:
    wait_for(lambda: _listening(res), "the started loop to listen", 30, step=0.05)
    pid = _loop_pid(res)
    os.kill(pid, signal.SIGTERM)  # the loop this test's calls started, by its pid
    wait_for(lambda: not os.path.exists(f"/proc/{pid}"), "the started loop to end", 30)


def test_eight_first_calls_at_once_start_one_loop_and_only_its_starter_says_so(res):
    res.env["RES_LOOP_AUTOSTART"] = "true"
    go = res.tmp / "go"
    # Each call is a real process; all are let go at once, after their interpreter is up.
    wait_go = f"import os, runpy, sys, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.002)\n" \
              "sys.argv[0] = 'res'\nrunpy.run_module('reconciler.cli', run_name='__main__')\n"
    calls = [res.popen([PY, "-c", wait_go, "run", "--mem", "64M", "--for", "1m", "--cpus", "0.1",
                        "--title", f"agent {i}", "--", "true"], stdout=-1, stderr=-1, text=True) for i in range(8)]
    go.touch()
    outs = [(*p.communicate(timeout=120), p.returncode) for p in calls]
    try:
        for out, err, code in outs:
            assert code == 0 and re.fullmatch(r"r-\d+ (started|queued|done)\b.*\n", out), (code, out, err)
        starters = [err for _, err, _ in outs if STARTED in err]
        assert len(starters) == 1, outs  # one loop started, by one call, which says so
        assert re.fullmatch(rf"res: {STARTED} for {re.escape(str(res.state))}: started one \(user unit "
                            rf"{re.escape(res.prefix)}-serve-[0-9a-f]+\.service; .*\)\n", starters[0]), starters
        # every other call says nothing about starting (answered by the loop, or by itself this once)
        assert [err for _, err, _ in outs if STARTED not in err] == [""] * 7, outs
    finally:
        _stop_loop(res)


def test_a_secret_in_a_res_variable_never_reaches_the_started_loops_unit(res):
    res.env.update(RES_LOOP_AUTOSTART="true", RES_API_TOKEN="tok-5f1e2d3c4b5a", RES_UPSTREAM="https://u:hunter2@example.org/")
    r = res("run", "--mem", "64M", "--for", "1m", "--cpus", "0.1", "--", "true")
    m = re.search(rf"started one \(user unit ({re.escape(res.prefix)}-serve-[0-9a-f]+\.service);", r.err)
    assert r.code == 0 and m, str(r)
    try:
        props = unit_props(m.group(1))
        env = dict(kv.partition("=")[::2] for kv in props["Environment"])
        assert env.get("RES_STATE_DIR") == str(res.state) and env.get("RES_LOOP_AUTOSTART") == "true", env
        assert "RES_API_TOKEN" not in env and "RES_UPSTREAM" not in env, env
        text = open(props["FragmentPath"]).read()  # the transient unit file, readable by all
        assert str(res.state) in text and "tok-5f1e2d3c4b5a" not in text and "hunter2" not in text, text
    finally:
        _stop_loop(res)
