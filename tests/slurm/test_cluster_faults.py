"""Faults of the cluster tier (DESIGN §5.4, §6b) on the real single-node Slurm cluster of
tests/slurmcluster.py and a real systemd user manager: a `res serve` killed with SIGKILL while
cluster jobs stream, slurmctld stopped (by its recorded pid) while a job runs and while a request is
submitted, a local request sent to the cluster by the overflow policy, and an agent session on the
cluster stopped by its cost budget.

What every case checks is what the fault tier checks for local jobs (tests/fault/test_fault.py): each job
ends settled once with its rc, is submitted to Slurm once (one Slurm job of its name), and its log
(which Slurm writes: `sbatch --output`) is read into its digest exactly once. The fake agent
(tests/fake_agent.py) prints numbered events: k of them give input_tokens = k(k+1)/2, output_tokens
= k, iterations = 1 + its tool-result lines, and a spend of those tokens at the claude-sonnet-4-5
rate of policies/pricing.toml; a line counted twice or skipped shows in those sums.

Every daemon a test stops it starts again itself (in a `finally`); the `cl` fixture restarts any
still missing as a safety net. Nothing here asserts on wall-clock time: waits are polls with
generous bounds.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import tomllib
from pathlib import Path

import pytest

from clihelp import CLOCK, FAKE, FAST, PY, token_cost, wait_for
import slurmcluster

pytestmark = pytest.mark.slurm

HERE = Path(__file__).resolve().parents[1]  # tests/


SUBMITTED = re.compile(rf"(r-\d+) submitted to slurm job (\d+); log (\S+); ETA ~{CLOCK}")
BLOCK = 'until [ -e "$0" ]; do sleep 0.1; done; echo released'



@pytest.fixture
def fcl(cl):
    cl.env.update(FAST)
    return cl


# ---------------------------------------------------------------- helpers


class Serve:
    """A `res serve` of this test (a subprocess, its output in a file), killed by its pid."""

    count = 0

    def __init__(self, cl):
        Serve.count += 1
        self.cl = cl
        self.out = cl.tmp / f"serve-{Serve.count}.log"
        with open(self.out, "w") as f:
            self.p = cl.popen([PY, "-m", "reconciler.cli", "serve"], stdout=f, stderr=subprocess.STDOUT)
        self.pid = self.p.pid
        wait_for(lambda: self.serving() or self.p.poll() is not None, f"res serve pid {self.pid} answering", 30)
        assert self.p.poll() is None, self.text()

    def serving(self) -> bool:
        from reconciler.loop.client import NoDaemon, ask

        try:
            return ask(self.cl.state / "serve.sock", {"op": "ping"}, timeout=2)["line"] == f"pid {self.pid}"
        except (NoDaemon, OSError, ValueError):
            return False

    def alive(self) -> bool:
        return self.p.poll() is None

    def kill(self) -> None:
        assert self.alive(), self.text()
        self.p.send_signal(signal.SIGKILL)
        assert self.p.wait(30) == -signal.SIGKILL

    def text(self) -> str:
        return self.out.read_text()


def jobs(cl) -> dict[str, dict]:
    return {j["id"]: j for j in cl.status_all()["jobs"]}


def holder_pid(st: dict) -> int | None:
    return int(st["attached_by"].split("/")[1]) if st["attached_by"] else None


def all_done(cl, ids, limit_s: float = 120) -> dict[str, dict]:
    def done():
        js = jobs(cl)
        return js if all(js[i]["state"] == "done" for i in ids) else None

    return wait_for(done, f"{', '.join(ids)} all done", limit_s, step=0.3)


def submit(cl, *cmd: str, flags: tuple = (), mem: str = "100M", est: str = "5m") -> tuple[str, str]:
    """`res run --on cluster FLAGS -- CMD` that must be submitted: (job id, Slurm job id)."""
    r = cl.run_job(*cmd, mem=mem, est=est, extra=("--on", "cluster", *flags))
    m = SUBMITTED.fullmatch(r.one_line()) if r.code == 0 and r.out.count("\n") == 1 else None
    assert m, str(r)
    return m.group(1), m.group(2)


def by_name(cl) -> dict[str, list[dict]]:
    """This test's Slurm jobs (its state directory's comment), by name."""
    out: dict[str, list[dict]] = {}
    for j in cl.slurm_jobs():
        out.setdefault(j["name"], []).append(j)
    return out


def controller_answers(cl) -> bool:
    r = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%i"], env=cl.env, capture_output=True,
                       text=True, timeout=60)
    return r.returncode == 0


def node_state(cl) -> str:
    """The node's state as slurmctld knows it (`idle`, `unknown`, `down*`, ...)."""
    r = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%T"], env=cl.env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def log_facts(cl, job_id: str) -> tuple[int, int, int]:
    """(lines, bytes, k) of a job's log; k: the fake agent's events in it, checked to be 1..k in order."""
    data = (cl.state / "logs" / f"{job_id}.log").read_bytes()
    lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    seqs = [json.loads(line)["seq"] for line in data.decode().splitlines()
            if line.startswith("{") and '"type": "assistant"' in line]
    assert seqs == list(range(1, len(seqs) + 1)), f"{job_id}: the log itself has a gap: {seqs}"
    return lines, len(data), len(seqs)


def tool_results(cl, job_id: str) -> int:
    text = (cl.state / "logs" / f"{job_id}.log").read_bytes().decode()
    return sum(1 for line in text.split("\n")[:-1] if line.startswith('{"type": "user"'))


def ingested_once(cl, job_id: str, st: dict, n: int | None = None) -> dict:
    """The job's whole log (as Slurm wrote it) was read into its digest exactly once and its spend
    added once. `n`: the fake agent ran to its end (n events, its stderr progress lines too)."""
    lines, size, k = log_facts(cl, job_id)
    if n is not None:
        assert k == n, f"{job_id}: {k} events in the log, expected {n}"
        assert lines == 1 + n + (n - 1) + n // 10, f"{job_id}: {lines} lines in the log"
    assert st["lines"] == lines, f"{job_id}: digest read {st['lines']} lines, the log has {lines}: {st}"
    assert st["log_offset"] == size, st
    calls = 1 + tool_results(cl, job_id) if k else 0
    assert (st["input_tokens"], st["output_tokens"], st["iterations"]) == (k * (k + 1) // 2, k, calls), st
    assert abs(st["spend_usd"] - token_cost(k)) < 2e-6, f"{job_id}: spend {st['spend_usd']} != {token_cost(k)}"
    return st


# ---------------------------------------------------------------- 1. SIGKILL of the loop mid-stream


def test_sigkill_of_serve_while_cluster_jobs_stream_each_is_settled_and_counted_once(fcl):
    """Three fake-agent sessions on the cluster, streaming into a `res serve` that is killed with
    SIGKILL mid-stream (the node has 2 CPUs: the third waits in Slurm's queue, --queue, and runs once
    one ends). The Slurm jobs go on without the loop; a new `res serve` takes their attachments over
    (the killed holder's process is gone: its leases are void at once), and every job ends done with
    rc 0, submitted once, with every event of its log counted exactly once: the sums of the fake
    agent's numbered events, its tool-result lines and its spend are what it printed, no more, no
    less."""
    cl = fcl
    a = Serve(cl)
    n = 150  # ~6 s of output each at 0.04 s: still streaming when the loop is killed
    ids, sids = [], []
    for _ in range(3):
        i, sid = submit(cl, PY, FAKE, str(n), "--pace", "0.04", flags=("--agent", "claude", "--queue"))
        ids.append(i)
        sids.append(sid)
    assert ids == ["r-1", "r-2", "r-3"], ids
    # mid-stream: two of them streaming into the first loop, which holds all three
    wait_for(lambda: (js := jobs(cl)) and all(js[i]["state"] == "running" and holder_pid(js[i]) == a.pid for i in ids)
             and sum(js[i]["lines"] >= 10 for i in ids) >= 2, "two cluster jobs streaming into the first serve", 60,
             step=0.2)
    before = jobs(cl)
    full = 1 + n + (n - 1) + n // 10  # the lines of a whole log
    assert any(0 < before[i]["lines"] < full for i in ids), before  # killed mid-stream, not after the end
    a.kill()
    b = Serve(cl)
    # every job still live is taken over by the new loop
    wait_for(lambda: all(j["state"] == "done" or holder_pid(j) == b.pid for j in (jobs(cl)[i] for i in ids)),
             f"the live cluster jobs re-attached by the new serve (pid {b.pid})", 60, step=0.2)
    final = all_done(cl, ids)
    for i in ids:
        st = final[i]
        assert (st["state"], st["rc"], st["why"], st["attempt"]) == ("done", 0, "exited 0", 1), st
        assert st["attached_by"] is None and st["lease_until"] is None, st
        assert st["where"].startswith("slurm:"), st
        ingested_once(cl, i, st, n=n)
    slurm = by_name(cl)
    assert sorted(slurm) == [f"res-{i}" for i in ids], slurm  # nothing else submitted
    for i, sid in zip(ids, sids):
        assert [(j["id"], j["state"]) for j in slurm[f"res-{i}"]] == [(sid, "COMPLETED")], slurm  # submitted once
    assert b.alive(), b.text()


# ---------------------------------------------------------------- 2. slurmctld down while a job runs


def test_slurmctld_down_while_a_job_runs_leaves_it_running_then_it_settles(cl):
    """slurmctld stopped (SIGTERM, by its recorded pid) while a cluster job runs, blocked on a file:
    a `res reconcile` meanwhile cannot ask the cluster. It must neither settle the job (a job Slurm
    was not asked about has not ended) nor lose it, and it must say that the cluster could not be
    observed (in its notices, or in `res status`) rather than that all is well. Once slurmctld is
    back and the blocker is released, the job settles with rc 0, from its own exit record."""
    go = cl.tmp / "go"
    i, sid = submit(cl, "sh", "-c", BLOCK, str(go))
    st = cl.reconcile_until(i, lambda s: s["where"].startswith(f"slurm:{sid}@") and s["pending"] is None,
                            "seen running on its node")
    assert st["state"] == "running", st
    said = []
    slurmcluster.stop_daemon(cl.slurm, "slurmctld")
    try:
        r = cl("reconcile")
        said += [r.out, r.err]
        st = cl.status(i)
        assert st["state"] == "running" and st["rc"] is None and st["ended"] is None, (str(r), st)
        assert st["where"] == f"slurm:{sid}", st  # its Slurm job, as recorded (not seen this pass)
        whole = cl.status_all()
        said += whole["notices"] + [cl.ok("status").out]
        assert [j["id"] for j in whole["jobs"]] == [i], whole["jobs"]
        assert not (cl.state / "logs" / f"{i}.log").read_text(), "the job ran past its blocker"
    finally:
        slurmcluster.start_daemon(cl.slurm, "slurmctld")
    wait_for(lambda: controller_answers(cl), "slurmctld answering again", 60, step=0.5)
    assert cl.status(i)["state"] == "running"
    go.touch()
    st = cl.reconcile_until(i, lambda s: s["state"] == "done", "settled after slurmctld came back", limit_s=120)
    assert (st["rc"], st["why"], st["attempt"]) == (0, "exited 0", 1), st
    assert (cl.state / "logs" / f"{i}.log").read_text() == "released\n"
    assert [(j["id"], j["state"]) for j in by_name(cl)[f"res-{i}"]] == [(sid, "COMPLETED")]
    # Checked last, so that the rest above is checked whatever this says: the pass that could not ask
    # the cluster said so (a notice naming it, on the pass's stderr or in status), not "all is well".
    text = "\n".join(said)
    mentioned = "could not observe" in text.lower() or "slurmctld down?" in text
    assert mentioned, f"nothing said that the cluster could not be observed while slurmctld was down:\n{text}"


# ---------------------------------------------------------------- 3. slurmctld down at submit


@pytest.mark.parametrize("queue", [False, True], ids=["now", "queue"])
def test_slurmctld_down_at_submit_the_request_waits_and_is_submitted_once(cl, queue):
    """`res run --on cluster` while slurmctld is down (stopped with SIGTERM by its pid): the request
    is not lost and not failed. It exits 0 with one line saying it is queued and waits for the
    cluster, naming what failed; it is kept in desired/queue.toml; nothing reaches Slurm. Once
    slurmctld answers again, passes of `res reconcile` submit it exactly once, and it runs to
    completion: without --queue ("now") as the CLI promised ("submitted once it answers"), and with
    --queue the same.

    A restarted slurmctld does not know its node's state until the node's slurmd registers again
    (`sinfo` says `unknown` for seconds), and a loop's pass, every tick, falls in that window as soon
    as the controller answers. Here that is made certain rather than left to timing: slurmd is
    stopped with slurmctld and started only after two passes ran with the controller answering and
    the node not registered. Those passes must not fail the request (it waits, or waits in Slurm's
    queue); once the node is up it is submitted, once."""
    flags = ("--queue",) if queue else ()
    slurmcluster.stop_daemon(cl.slurm, "slurmctld")
    slurmcluster.stop_daemon(cl.slurm, "slurmd")
    try:
        try:
            r = cl.run_job("sh", "-c", "echo ran on the cluster", extra=("--on", "cluster", *flags), est="1m")
            line = r.one_line() if r.code == 0 else str(r)
            assert r.code == 0 and re.fullmatch(
                r"r-1 queued, position 1; waits for the cluster: slurm: squeue: .*Unable to contact slurm controller.*"
                r"; submitted once it answers; cancel: res release r-1", line), str(r)
            entries = tomllib.loads(cl.queue.read_text()).get("job", [])
            assert [(e["id"], e.get("on"), e["queue"]) for e in entries] == [("r-1", "cluster", queue)], entries
            st = cl.status("r-1")
            assert st["state"] == "queued" and "waits for the cluster" in st["waits"], st
        finally:
            slurmcluster.start_daemon(cl.slurm, "slurmctld")
        wait_for(lambda: controller_answers(cl), "slurmctld answering again", 60, step=0.2)
        assert by_name(cl) == {}, "something reached slurm while slurmctld was down"
        for _ in range(2):
            p = cl("reconcile")
            st = cl.status("r-1")
            assert node_state(cl) not in ("idle", "mixed", "allocated"), "the node registered: the window was missed"
            assert st["state"] in ("queued", "starting", "running"), \
                f"r-1 was failed by a pass while the node was not registered yet: {st['state']}: {st['why']}\n{p}"
    finally:
        slurmcluster.start_daemon(cl.slurm, "slurmd")
    st = cl.reconcile_until("r-1", lambda s: s["state"] == "done", "run to completion once the node is up", limit_s=120)
    assert (st["rc"], st["why"], st["attempt"]) == (0, "exited 0", 1), st
    assert (cl.state / "logs" / "r-1.log").read_text() == "ran on the cluster\n"
    slurm = by_name(cl)
    assert list(slurm) == ["res-r-1"] and len(slurm["res-r-1"]) == 1, slurm  # submitted exactly once
    assert slurm["res-r-1"][0]["state"] == "COMPLETED", slurm
    assert st["where"].startswith(f"slurm:{slurm['res-r-1'][0]['id']}"), st


# ---------------------------------------------------------------- 4. overflow


def test_overflow_sends_what_does_not_fit_here_to_the_cluster_never_with_on_local(cl):
    """Policy `overflow = "cluster"` (RES_OVERFLOW) and a local budget shaped to ~3.5 GB, 2 GB of it
    held by a local job: `res run --mem 3G` (no --on) does not fit here now, so it is submitted to
    the cluster (whose node offers 4096 MB) and runs there. The same request with `--on local` never
    leaves this machine: refused busy (exit 3: it could fit here once the local job ends), or queued
    here with --queue, and a further pass does not send that one to the cluster either."""
    cl.env["RES_OVERFLOW"] = "cluster"
    cl.pin(free_gb=3.5)
    go = cl.tmp / "go"
    local = cl.started("sh", "-c", BLOCK, str(go), mem="2G", extra=("--on", "local"))
    assert cl.status(local)["where"] == "local"
    cmd = ("sh", "-c", "echo overflowed")
    r = cl.run_job(*cmd, mem="3G", est="1m")
    m = SUBMITTED.fullmatch(r.one_line()) if r.code == 0 else None
    assert m and m.group(1) == "r-2", str(r)
    sid = m.group(2)
    st = cl.reconcile_until("r-2", lambda s: s["state"] == "done", "overflowed job done", limit_s=120)
    assert (st["rc"], st["why"]) == (0, "exited 0"), st
    assert st["where"].startswith(f"slurm:{sid}"), st
    assert (cl.state / "logs" / "r-2.log").read_text() == "overflowed\n"

    r = cl.run_job(*cmd, mem="3G", est="1m", extra=("--on", "local"))
    assert r.code == 3 and r.one_line().startswith("busy: "), str(r)
    assert cl.status("r-3")["state"] == "refused"
    r = cl.run_job(*cmd, mem="3G", est="1m", extra=("--on", "local", "--queue"))
    assert r.code == 0 and r.one_line().startswith("r-4 queued, position 1; "), str(r)
    assert "cluster" not in r.one_line(), str(r)
    p = cl("reconcile")
    st = cl.status("r-4")
    assert st["state"] == "queued" and st["where"] == "local", (str(p), st)
    slurm = by_name(cl)
    assert list(slurm) == ["res-r-2"] and [j["id"] for j in slurm["res-r-2"]] == [sid], slurm
    assert [u for u, *_ in cl.units()] == [cl.unit(local)], cl.units()  # only the local blocker runs here
    go.touch()


# ---------------------------------------------------------------- 5. a cluster session's cost budget


def test_a_cluster_agent_session_over_its_cost_budget_is_cancelled_in_slurm(fcl):
    """`res run --on cluster --agent claude --max-cost-usd 0.01` of a fake agent whose usage crosses
    $0.01 after ~80 of its 3000 events (a minute if left alone): the loop (`res serve`) reads its
    log as Slurm writes it, sees the spend over the budget and stops it, which on the cluster is
    `scancel`. The session ends done, its why saying the cost budget, the Slurm job CANCELLED (not
    run to its end), and what it printed up to the cancel counted once."""
    cl = fcl
    Serve(cl)
    n, cap = 3000, 0.01
    i, sid = submit(cl, PY, FAKE, str(n), "--pace", "0.02",
                    flags=("--agent", "claude", "--max-cost-usd", str(cap)))
    st = all_done(cl, [i])[i]
    assert st["why"].startswith("budget: cost"), st
    assert st["spend_usd"] > cap, st
    _, _, k = log_facts(cl, i)
    assert k < n, f"{i}: ran to its end ({k} events): never stopped"
    slurm = by_name(cl)
    assert [(j["id"], j["state"]) for j in slurm[f"res-{i}"]] == [(sid, "CANCELLED")], slurm
    ingested_once(cl, i, st)
