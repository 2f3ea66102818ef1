"""`res top` for real: in a terminal (tmux, 160x45) beside a real `res serve` and a real job on the
user manager, and its keys running the real command line against a real state dir.

The screen tmux captured is kept as an artifact: in the test's tmp dir, and in $RES_TEST_ARTIFACTS
when set."""
from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import skips
from clihelp import PY, keep_artifact as _keep, res, serving, wait_for  # noqa: F401 - res: the fixture

pytestmark = pytest.mark.systemd

LAUNCH = """import json, os, subprocess, sys
env = json.load(open(sys.argv[1]))
code = subprocess.run([sys.argv[2], "-c", "from reconciler.entry import main; main()", "top"], env=env, cwd=sys.argv[3]).returncode
open(sys.argv[4], "w").write(str(code))
"""




@pytest.mark.skipif(shutil.which("tmux") is None and not os.environ.get("CI"),
                    reason=skips.TMUX_MISSING)  # CI installs it (.ci/run): there, missing fails
def test_res_top_in_a_terminal_shows_the_running_job_follows_its_log_and_q_ends_it(res):
    serve = serving(res)
    go = res.tmp / "go"
    job = res.started("sh", "-c", 'echo "log-line-$((6*7))"; until [ -e "$0" ]; do sleep 0.05; done', str(go),
                      mem="128M", est="10m")
    env_file, launcher, rc_file = res.tmp / "env.json", res.tmp / "launch.py", res.tmp / "top.rc"
    env = dict(res.env, TERM="xterm-256color", LANG="C.UTF-8", LC_ALL="C.UTF-8")
    env_file.write_text(json.dumps(env))
    launcher.write_text(LAUNCH)
    server = f"restop-{res.tag}"  # a tmux server of this test's own, ended by its socket at the end
    tmux = ["tmux", "-L", server, "-f", "/dev/null"]
    try:
        subprocess.run([*tmux, "new-session", "-d", "-s", "top", "-x", "160", "-y", "45",
                        PY, str(launcher), str(env_file), PY, str(res.work), str(rc_file)],
                       check=True, env=env, timeout=30)

        def screen() -> str:
            r = subprocess.run([*tmux, "capture-pane", "-p", "-t", "top"], capture_output=True, text=True, timeout=30)
            return r.stdout

        row = re.compile(rf"^ {job} +running ", re.M)  # the job's row in the entries table
        shown = wait_for(lambda: (lambda s: s if row.search(s) and "memory" in s else "")(screen()),
                         "res top drew the running job", limit_s=90)
        _keep("top-tmux.txt", shown, res.tmp)
        assert "memory" in shown and job in shown
        first = shown.splitlines()[0]
        assert first.startswith("res serve (pid "), first  # the loop's own views (op watch), not state.db read here
        # the entries table has focus and the running job is its first row: l follows its log
        subprocess.run([*tmux, "send-keys", "-t", "top", "l"], check=True, timeout=30)
        with_log = wait_for(lambda: (lambda s: s if "log-line-42" in s else "")(screen()),
                            "res top showed the job's log", limit_s=60)
        _keep("top-tmux-log.txt", with_log, res.tmp)
        serve.send_signal(signal.SIGTERM)  # ours, by its pid: res top says the loop went away
        assert serve.wait(30) == 0
        gone = wait_for(lambda: (lambda s: s if s.startswith("the loop went away at ") else "")(screen()),
                        "res top said the loop went away", limit_s=60)
        _keep("top-tmux-gone.txt", gone, res.tmp)
        assert row.search(gone), gone  # the job still shown, now from state.db
        subprocess.run([*tmux, "send-keys", "-t", "top", "q"], check=True, timeout=30)
        wait_for(rc_file.exists, "res top ended on q", limit_s=60)
        assert rc_file.read_text() == "0"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)
        go.touch()


def test_r_then_y_releases_a_real_note_through_the_real_command_line(res):
    """The key runs `res release ID` itself: the note is gone from the state dir afterwards."""
    from reconciler.commands.base import the_policy
    from reconciler.commands.top import TopApp, views_here
    from reconciler.config.paths import Paths
    from reconciler.config.zone import zone_of

    r = res.ok("note", "--mem", "128M", "--for", "10m", "--until-expiry", "my build")
    note = r.out.split()[0]
    assert res.status(note)["state"] == "running", str(r)
    paths = Paths(res.state)
    policy = the_policy()

    async def go():
        app = TopApp(paths, views_here(paths, policy), zone_of(policy), here_every_s=0.5)
        async with app.run_test(size=(160, 45)) as pilot:
            deadline = time.monotonic() + 60
            while note not in app.entries:
                assert time.monotonic() < deadline, "never drew the note"
                await pilot.pause(0.05)
            table = app.query_one("#entries")
            table.focus()
            keys = [table.coordinate_to_cell_key((i, 0)).row_key.value for i in range(table.row_count)]
            table.move_cursor(row=keys.index(note))
            await pilot.press("r")
            while app.screen.__class__.__name__ != "Confirm":
                assert time.monotonic() < deadline, "never asked"
                await pilot.pause(0.05)
            await pilot.press("y")
            while not app.outcomes:
                assert time.monotonic() < deadline + 60, "the command never ended"
                await pilot.pause(0.05)
            return app.outcomes[-1], str(app.query_one("#bar").render())

    (args, code, line), bar = asyncio.run(go())
    assert args == ["release", note] and code == 0, line
    assert bar == line and bar.startswith(f"res release {note} → exit 0: ")
    assert res.status(note)["state"] in ("done", "cancelled"), res.status(note)
