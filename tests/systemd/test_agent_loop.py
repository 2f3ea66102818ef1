"""An agent's everyday loop on a real systemd user manager, through the real CLI: the program
its shell would run, one call to run and wait, exit codes and JSON it can branch on, the CPU share it
asked for, status that is for deciding, and the loop that picks up a changed policy."""
from __future__ import annotations

from reconciler.core.models import copy
import json
import os
import re
import subprocess
import select

import pytest

from clihelp import CLOCK, ME, PY, res, unit_props, wait_for  # noqa: F401

pytestmark = pytest.mark.systemd

BLOCK = 'until [ -e "$0" ]; do sleep 0.05; done'


def _venv(res) -> tuple[str, dict]:
    """A virtual environment with a program found only on its PATH; (its bin dir, the environment of
    a shell in which it is activated)."""
    venv = res.tmp / "venv"
    subprocess.run([PY, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    only = venv / "bin" / "only-in-venv"
    only.write_text("#!/bin/sh\necho \"only-in-venv ran as $0\"\n")
    only.chmod(0o755)
    env = {"PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "VIRTUAL_ENV": str(venv)}
    return str(venv / "bin"), env


def test_the_program_is_the_one_the_callers_shell_would_run(res):
    bindir, activated = _venv(res)
    r = res("run", "--wait", "--mem", "256M", "--for", "1m", "--", "python3", "-c",
            "import sys; print(sys.prefix); print(sys.executable)", env=activated)
    assert r.code == 0, str(r)
    prefix, executable = r.lines
    assert prefix == os.path.dirname(bindir) and executable == f"{bindir}/python3", str(r)  # not /usr/bin/python3
    r = res("run", "--wait", "--mem", "256M", "--for", "1m", "--", "only-in-venv", env=activated)
    assert r.code == 0 and r.out == f"only-in-venv ran as {bindir}/only-in-venv\n", str(r)  # no 203/EXEC
    st = res.status("r-2")
    assert st["cmd"] == [f"{bindir}/only-in-venv"] and st["title"] == "only-in-venv", st
    # ./x against the caller's directory
    script = res.work / "x.sh"
    script.write_text("#!/bin/sh\necho local\n")
    script.chmod(0o755)
    r = res("run", "--wait", "--mem", "256M", "--for", "1m", "--", "./x.sh")
    assert r.code == 0 and r.out == "local\n" and res.status("r-3")["cmd"] == [str(script)], str(r)
    r = res("run", "--mem", "256M", "--for", "1m", "--", "no-such-program-anywhere")
    assert r.code == 1 and r.one_line("err") == "res: command not found or not executable: no-such-program-anywhere", str(r)


def test_run_wait_streams_the_output_and_exits_with_the_jobs_code(res):
    r = res("run", "--wait", "--mem", "256M", "--for", "1m", "--", "sh", "-c", "echo one; echo two >&2; exit 3")
    assert r.code == 3, str(r)
    assert r.out == "one\ntwo\n", str(r)  # the job's output (stdout and stderr, as it wrote them): stdout
    started, done = r.err_lines  # res's own lines: stderr
    assert re.fullmatch(rf"r-1 started; log \S+; ETA ~{CLOCK}", started), str(r)
    assert re.fullmatch(r"r-1 done rc=3 peak \d+ MB in \d+ s \(exit code 3\)", done), str(r)
    # --tail N: only the last lines, once it ended; --json: one object
    r = res("run", "--wait", "--tail", "2", "--mem", "256M", "--for", "1m", "--", "seq", "1", "100")
    assert r.code == 0 and r.out == "99\n100\n", str(r)
    r = res("run", "--wait", "--json", "--tail", "1", "--mem", "256M", "--for", "1m", "--", "sh", "-c", "echo bye; exit 1")
    assert r.code == 1 and r.err == "", str(r)
    got = json.loads(r.out)
    assert (got["id"], got["state"], got["rc"], got["exit_code"], got["tail"]) == ("r-3", "done", 1, 1, "bye\n"), got
    assert got["reason"] == {"code": "exited"} and got["log"].endswith("/logs/r-3.log") and got["line"].startswith("r-3 done rc=1")
    # a job killed at its memory limit: 137, and the log (so the streamed output) ends saying why
    hog = "x = 'x' * (300 << 20)"
    r = res("run", "--wait", "--mem", "64M", "--for", "1m", "--", PY, "-c", hog)
    assert r.code == 137, str(r)
    assert r.out.splitlines()[-1].startswith("res: killed at its memory limit (64 MB"), str(r)
    assert "killed at its memory limit" in r.err_lines[-1], str(r)


def test_run_wait_on_a_job_that_ended_before_the_answer_still_exits_with_its_code(res):
    """The answer to `res run --wait` may come after the job ended (a quick job on a busy machine; the
    same request asked again with its --request-id): its output and its own exit code, never the
    submit's 0 (a fresh-clone CI run once saw `r-1 done rc=3` with exit 0)."""
    cmd = ["--request-id", "quick-3", "--mem", "128M", "--for", "1m", "--", "sh", "-c", "echo quick; exit 3"]
    first = res("run", *cmd)
    assert first.code == 0 and first.one_line().startswith("r-1 started"), str(first)
    assert res("wait", "r-1", "--timeout", "1m").code == 3
    again = res("run", "--wait", *cmd)  # the same request: the answer is the ended job
    assert res.status("r-1")["state"] == "done" and "r-2" not in res("status", "--json").out, str(again)
    assert again.code == 3 and again.out == "quick\n", str(again)
    assert len(again.err_lines) == 1 and re.fullmatch(r"r-1 done rc=3 .*\(exit code 3\)", again.err_lines[0]), str(again)
    again = res("run", "--wait", "--json", *cmd)
    got = json.loads(again.out)
    assert again.code == 3 and (got["id"], got["state"], got["exit_code"]) == ("r-1", "done", 3), str(again)


def test_run_wait_on_a_queued_job_says_so_once_then_streams(res):
    go = res.tmp / "go"
    r = res("run", "--mem", "256M", "--for", "1m", "--lock", "gate", "--", "sh", "-c", BLOCK, str(go))
    assert r.code == 0, str(r)
    p = subprocess.Popen([PY, "-m", "reconciler.cli", "run", "--wait", "--queue", "--lock", "gate", "--mem", "256M",
                          "--for", "2m", "--", "sh", "-c", "echo second ran; exit 5"],
                         cwd=str(res.work), env=res.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    res.procs.append(p)
    assert select.select([p.stderr], [], [], 120)[0], "no queued line from run --wait"
    queued = p.stderr.readline().rstrip("\n")  # the client has its answer and now waits on r-2
    go.touch()
    out, err = p.communicate(timeout=120)
    assert p.returncode == 5 and out == "second ran\n", (out, err)
    started, done = err.splitlines()
    assert re.fullmatch(rf"r-2 queued, position 1; est\. start ~{CLOCK}; lock 'gate@{re.escape(str(res.work))}' held by "
                        r"r-1; cancel: res release r-2",
                        queued), err
    assert re.fullmatch(r"r-2 started; log \S+/logs/r-2\.log", started), err
    assert done.startswith("r-2 done rc=5 "), err
    # refused at once: the run's own busy answer and exit code, no waiting
    res.env["RES_USER_RESERVE_GB"] = "60000"
    r = res("run", "--wait", "--mem", "256M", "--for", "1m", "--", "true")
    assert r.code == 1 and "can never fit" in r.one_line("err"), str(r)


def test_json_answers_of_run_note_release(res):
    r = res("run", "--json", "--mem", "256M", "--for", "1m", "--lock", "k", "--", "sh", "-c", BLOCK, str(res.tmp / "go"))
    got = json.loads(r.out)
    assert r.code == 0 and (got["id"], got["state"], got["reason"]["code"], got["exit_code"]) == ("r-1", "running", "started", 0), got
    r = res("run", "--json", "--queue", "--mem", "256M", "--for", "1m", "--lock", "k", "--", "true")
    got = json.loads(r.out)
    assert (got["state"], got["position"], got["reason"]["waits_for"], got["reason"]["lock_holder"]) == \
        ("queued", 1, "lock", "r-1"), got
    assert got["est_start"] is not None and got["line"].startswith("r-2 queued, position 1;")
    r = res("run", "--json", "--mem", "256M", "--for", "1m", "--lock", "k", "--", "true")
    got = json.loads(r.out)
    assert r.code == 3 and got["state"] == "refused" and got["exit_code"] == 3, got
    assert (got["reason"]["code"], got["reason"]["resource"], got["reason"]["holders"][0]["id"]) == ("busy", "lock", "r-1")
    r = res("note", "--json", "--mem", "256M", "--for", "5m", "--until-expiry", "by hand")
    got = json.loads(r.out)
    assert (got["id"], got["kind"], got["state"], got["reason"]["code"], got["log"]) == ("r-4", "note", "running", "noted", None)
    r = res("release", "--json", "r-2")
    got = json.loads(r.out)
    assert r.code == 0 and got["state"] == "cancelled" and got["reason"]["code"] == "cancelled", got
    r = res("release", "--json", "--stop", "r-1")
    got = json.loads(r.out)
    assert r.code == 0 and got["state"] == "done" and got["reason"]["code"] == "released" and got["rc"] == 143, got


def test_cpus_is_the_units_cpu_share_and_a_cap_where_the_policy_asks(res):
    go = res.tmp / "go"
    r = res("run", "--mem", "256M", "--for", "1m", "--", "sh", "-c", BLOCK, str(go))
    assert r.code == 0, str(r)
    p = unit_props(res.unit("r-1"))
    assert p["CPUWeight"] == 50 and p["CPUQuotaPerSecUSec"] == (1 << 64) - 1, p  # default 0.5: a share, no cap
    r = res("run", "--cpus", "1.5", "--mem", "256M", "--for", "1m", "--", "sh", "-c", BLOCK, str(go),
            env={"RES_CPU_QUOTA": "true"})
    assert r.code == 0, str(r)
    p = unit_props(res.unit("r-2"))
    assert p["CPUWeight"] == 150 and p["CPUQuotaPerSecUSec"] == 1_500_000, p
    go.touch()
    assert res("wait", "r-1").code == 0 and res("wait", "r-2").code == 0


def test_status_header_queue_positions_and_the_finished_grace(res):
    from reconciler.config.paths import Paths
    from reconciler.recorded.store import Store

    go = res.tmp / "go"
    assert res("run", "--mem", "256M", "--for", "10m", "--lock", "k", "--", "sh", "-c", BLOCK, str(go)).code == 0
    for _ in range(3):
        assert res("run", "--queue", "--mem", "256M", "--for", "10m", "--lock", "k", "--", "true").code == 0
    lines = res.ok("status").lines
    assert lines[0].startswith("ID ") and "WHY / WHEN" in lines[0]
    waits = [re.search(rf"position (\d); est\. start ~(\d\d:\d\d); lock 'k@{re.escape(str(res.work))}' held by r-1 "
                       rf"\[by {re.escape(ME)}\]$", ln) for ln in lines[2:5]]
    assert all(waits), lines
    assert [int(m.group(1)) for m in waits] == [1, 2, 3]
    queued = [j for j in res.status_all()["jobs"] if j["state"] == "queued"]
    ests = [j["est_start"] for j in queued]
    assert len(ests) == 3 and ests == sorted(ests) and ests[0] < ests[1] < ests[2], queued  # a chain, in order
    res.ok("release", "--stop", "r-1")
    go.touch()
    for j in ("r-2", "r-3", "r-4"):
        assert res("wait", j, "--timeout", "1m").code == 0
    assert sum(1 for ln in res.ok("status").lines if re.match(r"r-\d ", ln)) == 4  # finished a moment ago: shown
    # age the records past the grace, as time would
    with Store.open(Paths(res.state)) as store:
        for rec in store.records().values():
            store.put(copy(rec, **{"ended": rec.ended - 600}), expect_phase=rec.phase)
    lines = res.ok("status").lines
    assert not [ln for ln in lines if re.match(r"r-\d ", ln)], lines
    assert "(4 finished entries not shown: res status --all, res hist)" in lines, lines
    assert sum(1 for ln in res.ok("status", "--all").lines if re.match(r"r-\d ", ln)) == 4


def test_the_loop_picks_up_a_changed_policy_and_keeps_the_last_good_one(res):
    policy = res.tmp / "policy.toml"
    policy.write_text("user_reserve_gb = 3\n")
    res.env["RES_TICK_S"] = "0.5"
    serve = res.popen([PY, "-m", "reconciler.cli", "serve"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: (res.state / "serve.sock").exists() and res("status").code == 0, "the loop answers")
    wait_for(lambda: res.status_all()["budget"]["reserve_gb"] == 3, "reserve 3 GB")
    policy.write_text("user_reserve_gb = 4\n")
    wait_for(lambda: res.status_all()["budget"]["reserve_gb"] == 4, "the loop reloaded the policy")
    policy.write_text("user_reserve_gb = [\n")  # broken
    wait_for(lambda: any("keeping the policy loaded before" in n for n in res.status_all()["notices"]),
             "the broken policy named in status")
    st = res.status_all()
    assert st["budget"]["reserve_gb"] == 4, st["budget"]  # the last good one
    assert any(n.startswith(f"{policy}:") for n in st["notices"]), st["notices"]
    policy.write_text("user_reserve_gb = 5\n")
    wait_for(lambda: res.status_all()["budget"]["reserve_gb"] == 5 and not res.status_all()["notices"], "fixed")
    serve.terminate()
    _, err = serve.communicate(timeout=30)
    assert serve.returncode == 0 and "policy reloaded from" in err, err


def test_serve_reuses_the_private_manager_of_its_state_dir(res):
    """A machine where no user manager is reachable: `res serve` (and every call) for a state directory
    whose private manager runs finds it without DBUS_SESSION_BUS_ADDRESS or XDG_RUNTIME_DIR. The boot itself is what the test harness (and CI, through the README's first command)
    did with the same code."""
    state = os.environ.get("RES_TEST_MANAGER_STATE")
    if not state:
        pytest.skip("the user manager of this run was not booted by res's own code (a desktop's own)")
    env = {k: v for k, v in res.env.items() if k not in ("DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR")}
    env["RES_STATE_DIR"] = state
    serve = res.popen([PY, "-m", "reconciler.cli", "serve"], env=env, stdout=subprocess.DEVNULL,
                      stderr=subprocess.PIPE, text=True)
    wait_for(lambda: os.path.exists(os.path.join(state, "serve.sock")), "the loop on the private manager")
    r = subprocess.run([PY, "-m", "reconciler.cli", "run", "--wait", "--mem", "256M", "--for", "1m", "--", "sh", "-c",
                        "echo on the private manager"], env=env, cwd=str(res.work), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout == "on the private manager\n", (r.stdout, r.stderr)
    d = subprocess.run([PY, "-m", "reconciler.cli", "doctor"], env=env, capture_output=True, text=True, timeout=60)
    assert "the private one res serve started for this state directory" in d.stdout.splitlines()[0], d.stdout
    serve.terminate()
    _, err = serve.communicate(timeout=30)
    assert serve.returncode == 0 and "started a private one" not in err, err  # reused, not a second one
