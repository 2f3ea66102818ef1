"""`res run --on cluster` on a real Slurm cluster of three nodes (tests/slurmnodes.py): each node a
host of its own (a network and a UTS namespace, an address on a private bridge), node3 the big one
(4 CPUs, 8 GB configured; node1 and node2 2 CPUs, 2 GB; Slurm fills the small ones first).

What is checked is what an HPC site's operators and an agent would see: where each job runs (Slurm's
own word, squeue's node list, and `res status`'s `slurm:ID@nodeN`; the job's own `hostname`), that
a request only the big node can hold goes there and waits for it, that a drained node takes nothing
new, and that a node lost under a running job (its slurmd and what it ran killed by pid) ends that
job NODE_FAIL in Slurm and is submitted again once, elsewhere, as a new attempt of the same entry:
one entry, one log with both attempts, nothing of the dead run counted, nothing of ours left alive in
Slurm's queue. Jobs that must run for a while block until the test creates a file. No test asserts
on wall-clock time: the node-loss test reports how long Slurm and res took (`-s` shows it).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from clihelp import CLOCK, FAST, Res, serving, wait_for  # noqa: E402
import slurmnodes  # noqa: E402
from slurmcluster import slurm_jobs  # noqa: E402

pytestmark = pytest.mark.slurm

SUBMITTED = re.compile(rf"(r-\d+) submitted to slurm job (\d+); log (\S+); ETA ~{CLOCK}")
PLACE = re.compile(r"slurm:(\d+)@(node\d)")
ALIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED")
# A job that says where it runs, then blocks until the test creates its file.
WHERE_THEN_BLOCK = 'echo "on $(hostname) as slurm job $SLURM_JOB_ID"; until [ -e "$0" ]; do sleep 0.1; done; echo released'


@pytest.fixture(scope="session")
def slurm_nodes():
    """The three-node cluster, booted once per run and stopped by pid at its end (its bridge, veths
    and namespaces removed). Its SLURM_CONF is given to each test's `res` and tools only: the
    single-node cluster of the other cluster tests keeps the process's environment."""
    why = slurmnodes.missing()
    if why:  # CI installs Slurm and runs as root (.ci/run): there, missing is a failure, not a skip
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"no multi-node Slurm cluster can be booted here: {why}")
    base = Path(tempfile.mkdtemp(prefix="res-nodes-"))
    try:
        slurmnodes.start(base)
    except RuntimeError as e:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"could not boot the multi-node Slurm cluster: {e}")
    try:
        yield base
    finally:
        slurmnodes.stop(base)
        shutil.rmtree(base, ignore_errors=True)


def scontrol(env: dict, *args: str) -> None:
    r = subprocess.run(["scontrol", *args], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr


@pytest.fixture
def ncl(slurm_nodes, user_manager, res_env):
    """`res` for one test, on the three-node cluster, passes every half second. At its end: every
    Slurm job of its state directory still alive cancelled (by id), its res processes ended, and the
    cluster as it was (a lost node's slurmd started again, a drained node resumed)."""
    r = Res(res_env)
    r.env.update(FAST, SLURM_CONF=str(slurm_nodes / "slurm.conf"), RES_CLUSTER_REQUEUE_ON_NODE_FAILURE="1")
    r.nodes = slurm_nodes
    r.comment = f"res:{r.state}"
    r.slurm_jobs = lambda: slurm_jobs(r.env, r.comment)
    try:
        yield r
    finally:
        try:
            live = [j["id"] for j in r.slurm_jobs() if j["state"] in ALIVE]
            if live:
                subprocess.run(["scancel", *live], env=r.env, capture_output=True, timeout=30)
        finally:
            r.cleanup()
            pids = slurmnodes._pids(slurm_nodes)
            for name in slurmnodes.NODES:
                if f"slurmd-{name}" not in pids:
                    slurmnodes.start_node(slurm_nodes, name)
            for name, state in slurmnodes.node_states(slurm_nodes).items():
                if "drain" in state or state.startswith("down"):
                    subprocess.run(["scontrol", "update", f"nodename={name}", "state=resume"], env=r.env,
                                   capture_output=True, timeout=30)
            wait_for(lambda: slurmnodes.nodes_ready(slurm_nodes), "the three nodes idle again", 60, step=0.2)


def submit(ncl, mem: str, *flags: str, script: str = WHERE_THEN_BLOCK) -> tuple[str, str, Path]:
    """`res run --on cluster` of `sh -c SCRIPT GO-FILE` (by default a job that says where it runs and
    blocks until GO-FILE is there): (job id, Slurm id, its go-file)."""
    ncl.made = getattr(ncl, "made", 0) + 1
    go = ncl.tmp / f"go-{ncl.made}"
    r = ncl("run", "--on", "cluster", *flags, "--mem", mem, "--cpus", "1", "--for", "5m", "--",
            "sh", "-c", script, str(go))
    m = SUBMITTED.fullmatch(r.one_line()) if r.code == 0 and r.out.count("\n") == 1 else None
    assert m, str(r)
    return m.group(1), m.group(2), go


def placed(ncl, job_id: str, limit_s: float = 60) -> tuple[str, str]:
    """(Slurm id, node) of `job_id` once res status shows it running on a node."""
    def seen():
        st = ncl.status(job_id)
        m = PLACE.fullmatch(st["where"] or "")
        return st["state"] == "running" and st["pending"] is None and m and (m.group(1), m.group(2))

    return wait_for(seen, f"{job_id} running on a node", limit_s, step=0.2)


def slurm_node(ncl, sid: str) -> str:
    (job,) = [j for j in ncl.slurm_jobs() if j["id"] == sid]
    return job["node"]


def done(ncl, job_id: str, limit_s: float = 120) -> dict:
    return wait_for(lambda: (st := ncl.status(job_id))["state"] == "done" and st, f"{job_id} done", limit_s, step=0.2)


# ---------------------------------------------------------------- spread and placement


def test_jobs_spread_over_the_nodes_and_status_says_where_each_runs(ncl):
    """Three requests no small node can hold two of land on three different nodes; where each runs is
    the same in res status (text and JSON), in squeue and in the job's own hostname."""
    serving(ncl)
    jobs, where = [], {}
    for _ in range(3):
        # each asked for now once the one before runs: `sbatch --test-only` answers "later" while
        # an earlier job is still PENDING unallocated (Slurm's scheduler takes it up within a second)
        jobs.append(submit(ncl, "1500M"))
        where[jobs[-1][0]] = placed(ncl, jobs[-1][0])
    assert sorted(node for _, node in where.values()) == ["node1", "node2", "node3"], where
    for job_id, sid, _ in jobs:
        assert where[job_id][0] == sid and slurm_node(ncl, sid) == where[job_id][1]
    text = ncl.ok("status").lines
    for job_id, (sid, node) in where.items():
        row = [ln for ln in text if ln.startswith(f"{job_id} ")]
        assert len(row) == 1 and f"slurm:{sid}@{node}" in row[0], text
    for job_id, _, go in jobs:
        go.touch()
    for job_id, (sid, node) in where.items():
        assert done(ncl, job_id)["rc"] == 0
        log = (ncl.state / "logs" / f"{job_id}.log").read_text()
        assert f"on {node} as slurm job {sid}" in log, log  # its own hostname: the node's UTS namespace


def test_a_request_only_the_big_node_can_hold_goes_there_and_waits_for_it(ncl):
    """5 GB fits only node3 (8 GB; the small ones have 2), one at a time. Asked for now while node3 is
    busy it is refused (busy, nothing submitted); with --queue it waits in Slurm's queue, a small
    request goes past it to a small node, and it runs on node3 once that is free."""
    serving(ncl)
    big1, _, go1 = submit(ncl, "5G")
    assert placed(ncl, big1)[1] == "node3"

    r = ncl("run", "--on", "cluster", "--mem", "5G", "--cpus", "1", "--for", "5m", "--", "true")
    assert r.code == 3 and r.one_line().startswith("busy: the cluster would start it at"), str(r)
    assert [j for j in ncl.slurm_jobs() if j["name"] == "res-r-2"] == []

    big2, big2_sid, go2 = submit(ncl, "5G", "--queue")
    wait_for(lambda: ncl.status(big2)["pending"] is not None, f"{big2} pending in slurm", 30, step=0.2)
    # A small one goes past it to a small node: by Slurm's backfill (its main scheduler stops at the
    # blocked big job; `sbatch --test-only` then answers "later", so it is asked for with --queue).
    small, _, go3 = submit(ncl, "1G", "--queue")
    assert placed(ncl, small, limit_s=90)[1] in ("node1", "node2")
    assert [j["state"] for j in ncl.slurm_jobs() if j["id"] == big2_sid] == ["PENDING"]

    go1.touch()
    assert placed(ncl, big2, limit_s=90) == (big2_sid, "node3")
    go2.touch()
    go3.touch()
    for job_id in (big1, big2, small):
        assert done(ncl, job_id)["rc"] == 0


def test_a_drained_node_takes_nothing_new_and_work_lands_there_again_once_resumed(ncl):
    """`scontrol update state=drain reason=maint`, as an operator does before maintenance: Slurm
    says so (drained, with the reason), and no job of ours lands there; resumed, it takes work again."""
    serving(ncl)
    scontrol(ncl.env, "update", "nodename=node1", "state=drain", "reason=maint")
    assert slurmnodes.node_states(ncl.nodes)["node1"] in ("drained", "drained*")
    r = subprocess.run(["sinfo", "-h", "-R", "-o", "%n|%E"], env=ncl.env, capture_output=True, text=True, timeout=30)
    assert "node1|maint" in r.stdout.split(), r.stdout

    jobs = [submit(ncl, "1500M", "--queue") for _ in range(3)]
    nodes = [placed(ncl, job_id)[1] for job_id, _, _ in jobs]
    assert "node1" not in nodes and set(nodes) <= {"node2", "node3"}, nodes

    scontrol(ncl.env, "update", "nodename=node1", "state=resume")
    wait_for(lambda: slurmnodes.node_states(ncl.nodes)["node1"] == "idle", "node1 idle again", 30, step=0.2)
    after, _, go = submit(ncl, "1500M")
    assert placed(ncl, after)[1] == "node1"  # the free small node Slurm fills first
    for _, _, g in [*jobs, (None, None, go)]:
        g.touch()
    for job_id, _, _ in jobs:
        assert done(ncl, job_id)["rc"] == 0
    assert done(ncl, after)["rc"] == 0


def test_doctor_has_every_node_up_write_the_log_directory_and_names_a_drained_one(ncl):
    """`res doctor`: one srun with a task on each node up, each writing a file named for its node into
    the logs directory, each seen from this host; a drained node is named, not asked."""
    r = ncl("doctor")
    logs = ncl.state / "logs"
    assert (f"ok   every cluster node up (3: node1, node2, node3) can write {logs} (cluster jobs' logs and "
            "exit records)") in r.out.splitlines(), str(r)
    scontrol(ncl.env, "update", "nodename=node2", "state=drain", "reason=maint")
    r = ncl("doctor")
    assert (f"ok   every cluster node up (2: node1, node3) can write {logs} (cluster jobs' logs and exit "
            "records); not checked: node2 (drain)") in r.out.splitlines(), str(r)
    assert [p.name for p in logs.iterdir()] == []  # the probes' files removed
    assert [j for j in ncl.slurm_jobs()] == []  # (srun's jobs are not res's: no comment of ours)


# ---------------------------------------------------------------- a node lost


def test_a_node_lost_mid_run_ends_the_job_node_fail_and_res_submits_it_again_once_elsewhere(ncl):
    """The node under a running job dies: its slurmd and everything it ran are killed by pid (nothing
    tells slurmctld). Slurm marks the node DOWN after SlurmdTimeout and ends the job NODE_FAIL; res
    sees that within a pass or two, puts `res: r-1 its cluster node failed …` in the log and submits
    the same entry again (policy: once), which Slurm places on a node that is up. The second run
    ends by itself: one entry (attempt 2, rc 0), one log with both runs' lines, the peak of the run
    that finished (nothing of the dead one), and of ours in Slurm only the NODE_FAIL job and the
    COMPLETED one, nothing alive."""
    serve = serving(ncl)
    job_id, sid1, go = submit(ncl, "1500M", script='echo "run on $(hostname)"; '
                              'python3 -c "b = bytearray(200 * 2**20); import time; time.sleep(0.5)"; '
                              'until [ -e "$0" ]; do sleep 0.1; done; echo released')
    _, lost = placed(ncl, job_id)
    log = ncl.state / "logs" / f"{job_id}.log"
    wait_for(lambda: f"run on {lost}" in log.read_text(), "the first run's line", 30, step=0.1)
    killed = slurmnodes.kill_node(ncl.nodes, lost)
    t_killed = time.monotonic()
    assert len(killed) >= 3, killed  # slurmd, slurmstepd, the batch script (and the command)

    def slurm_state(sid):
        return next((j["state"] for j in ncl.slurm_jobs() if j["id"] == sid), None)

    wait_for(lambda: slurm_state(sid1) == "NODE_FAIL", f"slurm job {sid1} NODE_FAIL", 120, step=0.2)
    t_slurm = time.monotonic()
    assert slurmnodes.node_states(ncl.nodes)[lost].startswith("down")

    def resubmitted():
        mine = [j for j in ncl.slurm_jobs() if j["name"] == f"res-{job_id}" and j["id"] != sid1]
        return mine and mine[0]

    second = wait_for(resubmitted, f"{job_id} submitted again", 60, step=0.1)
    t_res = time.monotonic()
    print(f"\nnode {lost} killed: Slurm said NODE_FAIL after {t_slurm - t_killed:.1f} s "
          f"(SlurmdTimeout={slurmnodes.SLURMD_TIMEOUT_S} s); res submitted it again {t_res - t_slurm:.1f} s later")
    sid2, elsewhere = placed(ncl, job_id, limit_s=60)
    assert sid2 == second["id"] and elsewhere != lost
    st = ncl.status(job_id)
    assert (st["attempt"], st["node_requeues"]) == (2, 1), st
    wait_for(lambda: f"run on {elsewhere}" in log.read_text(), "the second run's line", 30, step=0.1)

    go.touch()
    st = done(ncl, job_id)
    assert (st["rc"], st["attempt"], st["node_requeues"]) == (0, 2, 1), st
    assert st["peak_gb"] is not None and st["peak_gb"] < 1.0, st  # the second run's own (~200 MB), not a sum

    lines = log.read_text().splitlines()
    first, note, again = (lines.index(f"run on {lost}"),
                          next(i for i, ln in enumerate(lines) if ln.startswith(f"res: {job_id} its cluster node failed")),
                          lines.index(f"run on {elsewhere}"))
    assert first < note < again, lines
    assert f"slurm NODE_FAIL (slurm:{sid1}@{lost})" in lines[note] and "submitted again (1 of 1)" in lines[note]
    assert lines[-1] == "released" and lines.count("released") == 1, lines

    everything = ncl.status_all()["jobs"]
    assert [j["id"] for j in everything] == [job_id], everything  # one entry
    ours = {j["id"]: j["state"] for j in ncl.slurm_jobs() if j["name"] == f"res-{job_id}"}
    assert ours == {sid1: "NODE_FAIL", sid2: "COMPLETED"}, ours  # submitted twice, nothing left alive
    assert serve.poll() is None


def test_with_requeue_off_a_lost_node_settles_the_job_with_the_clusters_reason(ncl):
    """cluster_requeue_on_node_failure = 0: the job ends `node_failure` (Slurm's NODE_FAIL), its
    wait line says so, and it is not submitted again."""
    ncl.env["RES_CLUSTER_REQUEUE_ON_NODE_FAILURE"] = "0"
    serving(ncl)
    job_id, sid, _ = submit(ncl, "1500M")
    _, lost = placed(ncl, job_id)
    slurmnodes.kill_node(ncl.nodes, lost)
    w = ncl("wait", job_id, "--timeout", "2m")
    assert w.code != 0 and "its cluster node failed (slurm NODE_FAIL); run it again" in w.one_line(), str(w)
    st = ncl.status(job_id)
    assert (st["state"], st["attempt"], st["node_requeues"]) == ("done", 1, None), st
    assert [(j["id"], j["state"]) for j in ncl.slurm_jobs()] == [(sid, "NODE_FAIL")]
