"""bench/crowdkit/cli_arm.py's own parts (the res-cli arm of bench/crowd.py, issue 37): the driver between an
agent's thread and its CLI's model, and the wrapper that moves a job booked in place into the
container. The arm itself runs the real CLIs: `python3 bench/crowd.py --smoke --agents 3 --arms
res-gated,res-cli` (.ci/run) and docs/crowd.md."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from crowdkit import cli_arm  # noqa: E402
from crowdkit.arms import ARMS, DEFAULT_ARMS  # noqa: E402
from gate_harness import ToolResult  # noqa: E402  (cli_arm put tests/agentcli on the path)


def _in_thread(fn, *args):
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("v", fn(*args)), daemon=True)
    t.start()
    return t, out


def test_the_model_waits_for_the_agents_next_command_and_hands_back_each_result_once():
    d = cli_arm.Driver()
    t, first = _in_thread(d.answer, 0, None)  # the CLI's first model call: nothing asked yet
    assert d.ready.wait(5) and t.is_alive()
    d.ask("pytest STAMP DIR tests")
    t.join(5)
    assert first["v"] == "pytest STAMP DIR tests"
    # the client asks again before any result (a retry): the same call, and no result for the agent
    assert d.answer(0, None) == "pytest STAMP DIR tests"
    assert d._results.empty()
    r = ToolResult("3 passed", 0, False, {})
    t, second = _in_thread(d.answer, 1, r)  # the result comes back; the model waits for what is next
    assert d.result() is r
    d.ask(None)  # the agent is done: the session ends with a text turn
    t.join(5)
    assert second == {"v": None}
    assert d.answer(1, None) is None  # and says so again to a client that asks again
    d.finish()  # (the arm's end: nothing more is queued for a session already told)
    assert d._commands.empty()


def test_a_stopped_run_leaves_the_agent_waiting_on_nothing():
    d = cli_arm.Driver()
    assert d.result(lambda: True) is None
    # a CLI that exited (Gemini CLI ends a session it finds looping) is said, not waited on forever
    assert d.result(lambda: False, lambda: False) is cli_arm.ENDED


def test_a_line_booked_in_place_moves_into_the_container_first(tmp_path):
    """Outside the container, the wrapper runs itself again through `systemd-run --scope` into it (a
    stand-in systemd-run here prints what it was given); the job's own command is what then runs."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "systemd-run").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (fake / "systemd-run").chmod(0o755)
    w = tmp_path / "make"
    w.write_text("#!/bin/bash\n" + cli_arm.in_container_wrapper('echo "ran $*"', "cwno-such.slice", "cwno"))
    w.chmod(0o755)
    p = subprocess.run([str(w), "STAMP", "1200", "3.5"], capture_output=True, text=True, timeout=30,
                       env=dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}"))
    argv = p.stdout.split("\n")[:-1]
    assert p.returncode == 0, p.stderr
    assert argv[:5] == ["--user", "-q", "--scope", "--collect", "--slice=cwno-such.slice"], argv
    assert argv[5].startswith("--unit=cwno-ip") and argv[5].endswith(".scope"), argv
    assert argv[6:] == ["--", str(w), "STAMP", "1200", "3.5"], argv


def test_the_arm_is_asked_for_by_name_only():
    assert "res-cli" in ARMS and "res-cli" not in DEFAULT_ARMS


def test_the_report_says_how_each_clis_jobs_ran_and_the_makespan_against_res_gated():
    st = dict(sessions=2, jobs=7, as_job=7, in_place=0, refusals=1, approval_errors=0, differs=0)
    row = {"arm": "res-cli", "makespan_s": 120.0, "cli": {"per_cli": {"claude": st, "codex": dict(st, sessions=0)},
                                                          "mismatches": []}}
    lines = cli_arm.notes(row, {"makespan_s": 100.0})
    assert "claude ×2: 7 jobs (7 as res jobs, 0 in place)" in lines[0] and "codex" not in lines[0], lines
    assert lines[-1].endswith("1.20× res-gated's 100.0 s (target ≤ 1.15×: missed)"), lines
    assert cli_arm.notes(dict(row, makespan_s=110.0), {"makespan_s": 100.0})[-1].endswith("met)")
