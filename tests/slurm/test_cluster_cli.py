"""`res run --on cluster` through the real command line on a real single-node Slurm cluster.

Every `res` call is a subprocess with the cwd and environment the test chooses, so exit codes and
output lines are exactly what a user (or an agent) sees; every Slurm fact is read back from Slurm
itself (squeue), not from res. No test asserts on wall-clock time: each waits for a condition (a
Slurm state, a file, a settled entry) with a bound. Jobs that must run for a while block until the
test creates a file (`blocker`), so that the test, not a sleep, decides when they end. The `cl`
fixture (tests/slurm/conftest.py) cancels, by Slurm id, every job of the test's state directory that
is still alive at its end."""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess

import pytest
from clihelp import CLOCK, PY, wait_for

pytestmark = pytest.mark.slurm

BLOCK = "until [ -e \"$0\" ]; do sleep 0.05; done"  # a job that ends when the test creates its file
ALIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED")
SUBMITTED = re.compile(rf"(r-\d+) submitted to slurm job (\d+); log (\S+); ETA ~{CLOCK}")
ARGS_PROBE = ("import sys, os, json\n"
              "print(json.dumps({'argv': sys.argv[1:], 'cwd': os.getcwd(), "
              "'mark': os.environ.get('RES_CLI_MARK'), 'token': os.environ.get('FOO_TOKEN')}))")
# What a shell, sbatch or a batch script could each take for its own: quoting, expansion, command
# separators, Slurm's %-patterns, and a line that looks like an #SBATCH directive.
HOSTILE = ["%h", "$HOME", "${HOME}", "a;b", "; rm -rf nothing", "'single'", '"double"', "two\nlines", "100%",
           "$$", "%j", "%x", "with  two  spaces", "\n#SBATCH --time=99"]


def blocker(cl, name: str) -> tuple[list[str], os.PathLike]:
    """A command that runs until the test touches a file (controlled end, no sleeping on time)."""
    go = cl.tmp / f"go-{name}"
    return ["sh", "-c", BLOCK, str(go)], go


def submitted(r, job_id: str) -> str:
    """The Slurm id from `res run --on cluster`'s one line (which must be the submit line)."""
    m = SUBMITTED.fullmatch(r.one_line())
    assert r.code == 0 and m and m.group(1) == job_id, str(r)
    return m.group(2)


def slurm_job(cl, sid: str) -> dict:
    """What Slurm itself says of job `sid`: name, state, comment."""
    r = subprocess.run(["squeue", "--noheader", "--states=all", f"--jobs={sid}", "--format=%j|%T|%k"], env=cl.env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, f"squeue --jobs={sid}: {r.stdout!r}"
    name, state, comment = lines[0].split("|", 2)
    return {"name": name.strip(), "state": state.strip().split()[0], "comment": comment.strip()}


def named(cl, job_id: str) -> list[dict]:
    """Every Slurm job of this test's state directory named for `job_id`."""
    return [j for j in cl.slurm_jobs() if j["name"] == f"res-{job_id}"]


def wait_state(cl, sid: str, states: tuple[str, ...], limit_s: float = 60) -> str:
    """Wait until Slurm shows job `sid` in one of `states`; that state."""
    return wait_for(lambda: (s := slurm_job(cl, sid)["state"]) in states and s, f"saw slurm job {sid} {states}",
                    limit_s, step=0.2)


# ---------------------------------------------------------------- submit, wait, log, status


def test_run_on_cluster_submits_a_named_job_and_wait_reports_its_exit(cl):
    """The submit line names the Slurm job and the log; the job is findable in Slurm by name and by
    the comment that ties it to this state directory (how a restarted res finds its jobs); `res wait`
    settles it from the cluster; the log holds the job's stdout and stderr; status says where it ran."""
    r = cl("run", "--on", "cluster", "--mem", "100M", "--for", "1m", "--",
           "sh", "-c", "echo hello; echo to-stderr >&2")
    sid = submitted(r, "r-1")
    assert r.err == "", str(r)
    log = cl.state / "logs" / "r-1.log"
    assert SUBMITTED.fullmatch(r.one_line()).group(3) == str(log)

    job = slurm_job(cl, sid)
    assert job["name"] == "res-r-1" and job["comment"] == f"res:{cl.state}", job
    assert [j["id"] for j in named(cl, "r-1")] == [sid]  # submitted once

    w = cl("wait", "r-1", "--timeout", "2m")
    assert w.code == 0 and re.match(r"r-1 done rc=0\b", w.one_line()), str(w)
    assert slurm_job(cl, sid)["state"] == "COMPLETED"
    text = log.read_text()
    assert "hello" in text.splitlines() and "to-stderr" in text.splitlines(), text

    st = cl.status("r-1")
    assert st["state"] == "done" and st["rc"] == 0, st
    assert re.fullmatch(rf"slurm:{sid}(@\S+)?", st["where"]), st["where"]
    assert st["eta"] - st["started"] == 60  # --for 1m
    # CPU time a job cannot have had (more than its run × this machine's CPUs) is never recorded
    assert st["cpu_s"] is None or st["cpu_s"] <= (st["ended"] - st["started"]) * (os.cpu_count() or 1), st


def test_wait_exits_with_the_cluster_jobs_own_code(cl):
    """An agent branches on `res wait`'s exit code: a cluster job's own code comes back through the
    batch script's exit record, as a local unit's does."""
    sid = submitted(cl("run", "--on", "cluster", "--mem", "100M", "--for", "1m", "--", "sh", "-c", "exit 3"), "r-1")
    w = cl("wait", "r-1", "--timeout", "2m")
    assert w.code == 3 and re.match(r"r-1 done rc=3\b.*exit code 3", w.one_line()), str(w)
    st = cl.status("r-1")
    assert (st["state"], st["rc"], st["why"]) == ("done", 3, "exit code 3"), st
    assert slurm_job(cl, sid)["state"] == "FAILED"  # Slurm agrees it exited non-zero


# ---------------------------------------------------------------- the command verbatim


def test_command_reaches_the_cluster_verbatim_in_the_callers_cwd_and_environment(cl):
    """The batch script quotes the argv for sh: no $-expansion, no `;`, no %-patterns of sbatch, no
    #SBATCH line taken from an argument. It runs in the caller's cwd (one with a space, a % and a $),
    with the caller's environment, minus what looks secret."""
    cwd = cl.tmp / "caller dir 100% $x"
    cwd.mkdir()
    r = cl("run", "--on", "cluster", "--mem", "200M", "--for", "1m", "--", PY, "-c", ARGS_PROBE, *HOSTILE,
           cwd=cwd, env={"RES_CLI_MARK": "only-in-the-caller", "FOO_TOKEN": "must-not-leak"})
    sid = submitted(r, "r-1")
    w = cl("wait", "r-1", "--timeout", "2m")
    assert w.code == 0, str(w)
    log = (cl.state / "logs" / "r-1.log").read_text()
    got = json.loads(log.splitlines()[0])
    assert got["argv"] == HOSTILE
    assert got["cwd"] == str(cwd)
    assert got["mark"] == "only-in-the-caller"
    assert got["token"] is None
    assert slurm_job(cl, sid)["state"] == "COMPLETED"  # no `#SBATCH --time=99` or other change took hold
    assert cl.status("r-1")["cmd"][3:] == HOSTILE


# ---------------------------------------------------------------- limits: memory, time


def test_job_over_its_memory_on_the_cluster_is_killed_and_says_so(cl):
    """Slurm's cgroup kills the job at --mem; res says so in the wait line and in status, and the
    exit code is 137 as for a local job killed at its MemoryMax."""
    hog = "x = 'x' * (300 << 20); print('survived', len(x))"
    sid = submitted(cl("run", "--on", "cluster", "--mem", "50M", "--for", "1m", "--", PY, "-c", hog), "r-1")
    w = cl("wait", "r-1", "--timeout", "2m")
    line = w.one_line()
    assert w.code == 137 and line.startswith("r-1 done rc=137 ") and "killed at its memory limit" in line, str(w)
    st = cl.status("r-1")
    assert st["state"] == "done" and st["rc"] == 137, st
    assert "killed at its memory limit (50 MB" in st["why"] and "raise --mem" in st["why"], st["why"]
    assert st["reason"]["code"] == "memory_limit", st["reason"]
    assert slurm_job(cl, sid)["state"] == "OUT_OF_MEMORY"
    assert "survived" not in (cl.state / "logs" / "r-1.log").read_text()


def test_job_over_its_time_limit_on_the_cluster_says_so(cl):
    """--for is the Slurm time limit (whole minutes): a job that outlives it ends as TIMEOUT, and res
    says it was over its time limit, not merely killed by a signal. Slurm checks limits every
    half-minute or so: this takes one to two minutes of real time."""
    sid = submitted(cl("run", "--on", "cluster", "--mem", "100M", "--for", "1m", "--", "sleep", "300"), "r-1")
    wait_state(cl, sid, ("TIMEOUT",), limit_s=240)
    w = cl("wait", "r-1", "--timeout", "1m")
    assert w.code != 0 and w.one_line().startswith("r-1 done rc=") and "over its time limit" in w.one_line(), str(w)
    st = cl.status("r-1")
    assert st["state"] == "done" and "over its time limit" in st["why"] and "raise --for" in st["why"], st


# ---------------------------------------------------------------- release --stop


def test_release_stop_cancels_a_running_cluster_job(cl):
    """`res release --stop` on a running cluster job cancels it in Slurm (SIGTERM first: the job winds
    down, here for 2 s, as a program that flushes its work does), settles it as released with 143, and
    answers as it does for a local job, whose stop waits for the unit to end: exit 0,
    `r-1 released (done, rc=143)`, not "still running" because Slurm took a moment. The answer is
    checked last, so a wrong one is reported with everything else about the release already known."""
    cmd = ["sh", "-c", 'trap "sleep 2; echo wound-down; exit 143" TERM; ' + BLOCK, str(cl.tmp / "never")]
    sid = submitted(cl("run", "--on", "cluster", "--mem", "100M", "--for", "5m", "--", *cmd), "r-1")
    wait_state(cl, sid, ("RUNNING",))
    r = cl("release", "r-1", "--stop")

    ended = wait_for(lambda: (s := slurm_job(cl, sid)["state"]) not in ALIVE and s, "saw the job end in slurm",
                     step=0.2)
    assert ended == "CANCELLED", ended
    st = cl.reconcile_until("r-1", lambda s: s["state"] == "done", "settled after the release")
    assert st["why"] == "released" and st["rc"] == 143, st
    assert st["reason"]["code"] == "released", st["reason"]
    w = cl("wait", "r-1", "--timeout", "1m")
    assert w.code == 143 and w.one_line().startswith("r-1 done rc=143"), str(w)
    assert "wound-down" in (cl.state / "logs" / "r-1.log").read_text()  # stopped by SIGTERM, not killed outright

    assert r.code == 0 and r.one_line() == "r-1 released (done, rc=143)", str(r)


# ---------------------------------------------------------------- busy, --queue


def test_a_full_cluster_refuses_now_and_queues_with_queue(cl):
    """Asked for now, a job the cluster would only start later is refused with exit 3 and one busy
    line, and nothing is submitted (a refused request leaves no Slurm job behind to start by surprise).
    With --queue it is submitted, waits in Slurm's queue (status says pending) while the cluster is
    full, and runs once the blocker ends."""
    n = os.cpu_count() or 1  # the test cluster's node has this machine's cpus (tests/slurmcluster.py)
    hold, hold_go = blocker(cl, "1")
    hold_sid = submitted(cl("run", "--on", "cluster", "--cpus", str(n), "--mem", "100M", "--for", "5m", "--", *hold),
                         "r-1")
    wait_state(cl, hold_sid, ("RUNNING",))

    r = cl("run", "--on", "cluster", "--cpus", "1", "--mem", "100M", "--for", "1m", "--", "echo", "now")
    m = re.fullmatch(rf"busy: the cluster would start it at ~({CLOCK}) \(slurm, partition \S+\); retry after "
                     rf"~({CLOCK}), or --queue to wait in slurm's queue, or work on something else", r.one_line())
    assert r.code == 3 and m and r.err == "", str(r)
    assert m.group(1) == m.group(2)
    st = cl.status("r-2")
    assert st["state"] == "refused" and st["reason"]["code"] == "busy", st
    assert named(cl, "r-2") == []  # `sbatch --test-only` asked; nothing was submitted

    r = cl("run", "--on", "cluster", "--queue", "--cpus", "1", "--mem", "100M", "--for", "1m", "--",
           "sh", "-c", "echo after-the-blocker")
    sid = submitted(r, "r-3")
    cl.ok("reconcile")
    st = cl.status("r-3")
    assert st["state"] == "running" and st["pending"] is not None, st  # submitted, pending in Slurm
    assert slurm_job(cl, sid)["state"] == "PENDING"
    line = [ln for ln in cl.ok("status").lines if ln.startswith("r-3 ")]
    assert len(line) == 1 and "pending in slurm" in line[0], line

    hold_go.touch()
    w = cl("wait", "r-3", "--timeout", "2m")
    assert w.code == 0 and w.one_line().startswith("r-3 done rc=0"), str(w)
    assert "after-the-blocker" in (cl.state / "logs" / "r-3.log").read_text()
    assert cl("wait", "r-1", "--timeout", "1m").code == 0
    assert [j["id"] for j in named(cl, "r-3")] == [sid]  # submitted once, ran once


# ---------------------------------------------------------------- dry run


def _plan_ids(plan: dict, kind: str) -> list[str]:
    return [a["id"] for a in plan["actions"] if a["kind"] == kind]


def test_dry_run_with_a_job_pending_in_slurm_submits_nothing_again(cl):
    """A --queue job waiting in Slurm's queue is already submitted: the dry run shows a plan with no
    submit for it, changes nothing in res's state, and Slurm still has exactly one job for it."""
    n = os.cpu_count() or 1
    hold, hold_go = blocker(cl, "1")
    hold_sid = submitted(cl("run", "--on", "cluster", "--cpus", str(n), "--mem", "100M", "--for", "5m", "--", *hold),
                         "r-1")
    wait_state(cl, hold_sid, ("RUNNING",))
    sid = submitted(cl("run", "--on", "cluster", "--queue", "--cpus", "1", "--mem", "100M", "--for", "1m", "--",
                       "true"), "r-2")
    cl.ok("reconcile")
    assert slurm_job(cl, sid)["state"] == "PENDING"

    before = cl.digest()
    r = cl.ok("reconcile", "--dry-run")
    assert r.lines and r.lines[-1].startswith(("Plan:", "No changes")), r.out
    assert not [ln for ln in r.lines if re.match(r"\s+\+ (submit|start)\s", ln)], r.out
    plan = json.loads(cl.ok("reconcile", "--dry-run", "--json").out)
    assert _plan_ids(plan, "start") == [], plan["actions"]
    assert cl.digest() == before  # nothing changed
    assert [j["id"] for j in named(cl, "r-2")] == [sid]
    assert slurm_job(cl, sid)["state"] == "PENDING"
    hold_go.touch()
    assert cl("wait", "r-2", "--timeout", "2m").code == 0


def _unreachable_conf(cl) -> str:
    """A copy of the cluster's slurm.conf whose controller port nobody listens on: to one `res` call
    given it, the cluster does not answer (connection refused); the cluster itself is untouched."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    text = (cl.slurm / "slurm.conf").read_text()
    bad = re.sub(r"(?m)^SlurmctldPort=.*$", f"SlurmctldPort={port}", text)
    assert bad != text
    path = cl.tmp / "unreachable-slurm.conf"
    path.write_text(bad)
    return str(path)


def test_dry_run_shows_the_submit_of_a_request_the_cluster_did_not_answer(cl):
    """`res run --on cluster` decides at once, so a request is only left to a later pass when the
    cluster could not be asked: it waits in the queue file (not lost, not refused). The dry run then
    shows `+ submit` for it and changes nothing; the real pass submits it, once."""
    r = cl("run", "--on", "cluster", "--mem", "100M", "--for", "1m", "--", "sh", "-c", "echo submitted-later",
           env={"SLURM_CONF": _unreachable_conf(cl)})
    assert r.code == 0 and re.fullmatch(r"r-1 queued, position 1; waits for the cluster: slurm: .+; submitted once it "
                                        r"answers; cancel: res release r-1", r.one_line()), str(r)
    assert cl.status("r-1")["state"] == "queued"
    assert named(cl, "r-1") == []

    before = cl.digest()
    d = cl.ok("reconcile", "--dry-run")
    assert any(re.match(r"\s+\+ submit\s+r-1\s.*to slurm \(100 MB, ", ln) for ln in d.lines), d.out
    assert d.lines[-1] == "Plan: 1 to start.", d.out
    plan = json.loads(cl.ok("reconcile", "--dry-run", "--json").out)
    (act,) = [a for a in plan["actions"] if a["id"] == "r-1"]
    assert act["kind"] == "start" and act["detail"]["code"] == "submit" and act["detail"]["where"] == "cluster", act
    assert cl.digest() == before and named(cl, "r-1") == []  # a dry run submits nothing

    cl.ok("reconcile")
    (job,) = named(cl, "r-1")
    st = cl.status("r-1")
    assert re.fullmatch(rf"slurm:{job['id']}(@\S+)?", st["where"]), st
    w = cl("wait", "r-1", "--timeout", "2m")
    assert w.code == 0 and w.one_line().startswith("r-1 done rc=0"), str(w)
    assert "submitted-later" in (cl.state / "logs" / "r-1.log").read_text()


def test_doctor_checks_the_cluster_it_is_configured_for(cl):
    """With a cluster configured (SLURM_CONF), `res doctor` ends with its lines: sinfo answers with the
    partition up, and a job on a node (srun) wrote into the logs directory."""
    r = cl("doctor")
    # (less the lines about the agent CLIs installed on this machine and whether each is gated)
    lines = [ln for ln in r.out.splitlines() if not re.match(r"(ok   \w+: gated |note \w+ is on this machine and not gated)", ln)]
    assert r.err == "" and len(lines) == 9, str(r)
    assert lines[7] == "ok   slurm answers (sinfo): partition debug up", str(r)
    assert lines[8] == f"ok   a cluster node can write {cl.state / 'logs'} (cluster jobs' logs and exit records)", str(r)

    shared = cl.tmp / "shared"
    cl.env["RES_CLUSTER"] = json.dumps({"shared_dir": str(shared)})
    r = cl("doctor")
    assert r.code == 1 and r.out.splitlines()[8].startswith(f"fix  a cluster node cannot write {shared}/res-"), str(r)
    assert f"({shared} is not a directory here (not mounted?)): set [cluster] shared_dir" in r.out, str(r)
    shared.mkdir()
    r = cl("doctor")
    (folder,) = shared.iterdir()
    assert r.out.splitlines()[8] == f"ok   a cluster node can write {folder} (cluster jobs' logs and exit records)", str(r)


# ---------------------------------------------------------------- the policy's shared directory


def test_cluster_jobs_write_to_the_policys_shared_directory_and_res_reads_them_there(cl):
    """`[cluster] shared_dir` (here as RES_CLUSTER): a cluster job's log and exit record are in this
    state directory's own folder under it, not in the state directory; the submit line, `--wait`'s
    streamed output, status and the settled rc all come from there. While the shared directory is
    missing (not mounted), a cluster request waits with a line naming it, and is submitted once
    it is there."""
    shared = cl.tmp / "shared"
    cl.env["RES_CLUSTER"] = json.dumps({"shared_dir": str(shared)})
    r = cl("run", "--on", "cluster", "--mem", "100M", "--for", "1m", "--", "sh", "-c", "echo from-node")
    assert r.code == 0 and "waits for the cluster" in r.one_line() and f"shared_dir {shared} is not a directory" \
        in r.one_line() and "ls -ld" in r.one_line(), str(r)
    assert cl.slurm_jobs() == []  # nothing submitted that could not write its exit record
    shared.mkdir()
    st = cl.reconcile_until("r-1", lambda s: s["state"] == "done", "submitted once the shared dir is there",
                            limit_s=120)
    folder = shared / os.listdir(shared)[0]
    assert os.listdir(shared) == [folder.name] and folder.name.startswith(f"res-{os.getuid()}-")
    assert (st["rc"], st["log"]) == (0, str(folder / "r-1.log")), st
    assert (folder / "r-1.log").read_text() == "from-node\n"
    assert not (cl.state / "logs" / "r-1.log").exists() and not (cl.state / "logs" / "r-1.exit.json").exists()
    assert oct(folder.stat().st_mode & 0o777) == "0o700"

    w = cl("run", "--on", "cluster", "--wait", "--mem", "100M", "--for", "1m", "--", "sh", "-c", "echo streamed; exit 4")
    assert w.code == 4 and w.out == "streamed\n", str(w)
    m = SUBMITTED.fullmatch(w.err_lines[0])
    assert m and m.group(3) == str(folder / "r-2.log"), str(w)
    # rc 4 and its why come from the batch script's exit record, which only the shared folder has
    assert re.match(r"r-2 done rc=4\b.*exit code 4", w.err_lines[-1]), str(w)
    assert [j["name"] for j in cl.slurm_jobs()].count("res-r-2") == 1

    # Unmounted while res runs (here: moved away): the next request waits, with why, and is not failed
    shared.rename(cl.tmp / "unmounted")
    r = cl("run", "--on", "cluster", "--mem", "100M", "--for", "1m", "--", "sh", "-c", "echo later")
    assert r.code == 0 and f"shared_dir {shared} is not a directory" in r.one_line(), str(r)
    (cl.tmp / "unmounted").rename(shared)
    st = cl.reconcile_until("r-3", lambda s: s["state"] == "done", "submitted once it is mounted again", limit_s=120)
    assert st["rc"] == 0 and (folder / "r-3.log").read_text() == "later\n", st
