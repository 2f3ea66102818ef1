"""bench/crowd.py's res-overflow arm (issue 28) on hand-built timelines and records (marked as such: no
run of the benchmark shows these exact cases): which attempts it counts as sent to the cluster and
their start latency, the comparison line against the local-only res arm, where a job's memory is
sampled when it runs on a node, the picture's cluster part, and the cluster's node sizes."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from crowdkit import armrun, machine, measures, report, workload  # noqa: E402
from crowdkit.main import main  # noqa: E402

GIB = 1 << 30


def _record(stamp: str, where: str, started: float | None):
    request = SimpleNamespace(cmd=["python3", "crowd_job.py", "e2e", stamp, "2500", "15", "0.05"])
    return SimpleNamespace(request=request, where=where, started=started)


def _run(tmp_path):
    """Two agents, one job each: agent 0's ran here, agent 1's was submitted to the cluster 0.5 s
    after its ask (wall clock 1000.5, the run's t0 at wall 1000.0) and started there 2.0 s later."""
    plan = [[workload.Job(0, 0, "e2e", "e2e 2500 MB", 2.5, 16, 2)], [workload.Job(1, 0, "e2e", "e2e 2500 MB", 2.5, 16, 2)]]
    run = armrun.ArmRun("res-overflow", plan, 6.0, tmp_path, cluster_gb=(2.0, 2.0, 4.0))
    run.t0, run.wall0 = 0.0, 1000.0
    run.attempts = [measures.Attempt(0, 0, "e2e", 0, 0.0, 0.2, 16.2, 16.3, 0),
                    measures.Attempt(1, 0, "e2e", 0, 0.0, 2.5, 18.5, 19.5, 0)]
    stamps = {a: str(tmp_path / f"a{a}j0t0.start") for a in (0, 1)}
    run.raw = {(a, 0, 0): (stamps[a], [], None) for a in (0, 1)}
    run.records = [_record(stamps[0], "local", 1000.2), _record(stamps[1], "cluster", 1000.5)]
    run.sbatch_s = [0.4, 0.6, 2.0]
    return run


def test_the_attempts_sent_to_the_cluster_and_their_latency_come_from_res_records(tmp_path):
    c = _run(tmp_path).cluster_figures()
    assert [(x["agent"], x["kind"]) for x in c["sent"]] == [(1, "e2e")]  # the local one is not counted
    assert c["attempts"] == 2 and c["nodes_gb"] == [2.0, 2.0, 4.0]
    assert c["ask_to_submit_p50_s"] == pytest.approx(0.5)
    assert c["submit_to_start_p50_s"] == pytest.approx(2.0)
    assert c["told_p50_s"] == pytest.approx(1.0)  # its end 18.5 → its agent knew at 19.5
    assert c["sbatch_p50_s"] == pytest.approx(0.6) and c["sbatch_max_s"] == pytest.approx(2.0)


def test_without_res_records_nothing_is_counted_as_sent_and_the_line_says_why(tmp_path):
    run = _run(tmp_path)
    run.records = None
    row = dict(arm="res-overflow", makespan_s=20.0, oom_killed=0, failed=0, wait_p50_s=1.0, wait_p95_s=2.5,
               cluster=run.cluster_figures(), attempts=[])
    lines = report.overflow_notes(row, None)
    assert "0 of 2 attempts went there" in lines[0] and "could not be read" in lines[0]


def _rows(tmp_path, makespan: float, local_makespan: float, oom: int = 0):
    run = _run(tmp_path)
    over = dict(arm="res-overflow", makespan_s=makespan, oom_killed=oom, failed=0, wait_p50_s=1.0, wait_p95_s=2.5,
                cluster=run.cluster_figures(), attempts=[])
    # the local-only arm: agent 1's same job waited 10 s there (ask 0, start 10)
    local = dict(arm="res", makespan_s=local_makespan, oom_killed=0, failed=0, wait_p50_s=5.0, wait_p95_s=10.0,
                 attempts=[dict(agent=0, job=0, attempt=0, asked=0.0, started=0.2),
                           dict(agent=1, job=0, attempt=0, asked=0.0, started=10.0)])
    return over, local


def test_the_comparison_line_against_local_res_says_met_only_when_sooner_with_nothing_killed(tmp_path):
    over, local = _rows(tmp_path, makespan=20.0, local_makespan=30.0)
    text = report.notes([local, over])
    assert "makespan 0.67× (20.0 s against 30.0 s)" in text
    assert "1 of 2 attempts went there (0 test, 0 build, 1 e2e)" in text
    # the job sent there waited 2.5 s (ask → running on a node) against 10 s for the same job here
    assert "waited p50 2.5 s" in text and "waited p50 10.0 s; 0 of 1 waited longer for the cluster" in text
    assert text.rstrip().endswith("met") and "not met" not in text
    slower, local = _rows(tmp_path / "b", makespan=31.0, local_makespan=30.0)
    assert report.overflow_notes(slower, local)[-1].endswith("not met")
    # sooner, but within one arm's run-to-run spread: not a gain
    noise, local = _rows(tmp_path / "n", makespan=29.0, local_makespan=30.0)
    assert report.overflow_notes(noise, local)[-1].endswith("not met")
    killed, local = _rows(tmp_path / "c", makespan=20.0, local_makespan=30.0, oom=1)
    assert report.overflow_notes(killed, local)[-1].endswith("not met")


def test_a_job_on_a_node_is_sampled_in_its_slurm_jobs_memory_cgroup():
    on_node = ("9:name=systemd:/user.slice/user-0.slice/session-4.scope\n"
               "4:memory:/slurm_node3/uid_0/job_412345/step_batch/task_0\n0::/user.slice/user-0.slice/session-4.scope\n")
    assert measures.slurm_job_cgroup(on_node) == "/slurm_node3/uid_0/job_412345"
    here = "9:name=systemd:/user.slice/cw1.slice/x.scope\n4:memory:/user.slice/cw1.slice/x.scope\n"
    assert measures.slurm_job_cgroup(here) is None
    # cgroup v2: the one unified line
    assert measures.slurm_job_cgroup("0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n") == \
        "/system.slice/slurmstepd.scope/job_77"


def test_the_picture_draws_what_ran_on_the_cluster_below_zero(tmp_path):
    import matplotlib.image
    from crowdkit.plot import plot

    def doc(remote_gb: float) -> dict:
        samples = [[t * 0.5, 2 * GIB, {"0": 2 * GIB, **({"c1": int(remote_gb * GIB)} if remote_gb else {})}]
                   for t in range(121)]
        arm = dict(arm="res-overflow", makespan_s=60.0, oom_killed=0, failed=0, samples=samples, attempts=[],
                   cluster=dict(sent=[{}], attempts=2))
        return dict(mix="memory", agents=2, mem_gb=6.0, cores=2, smoke=False, bound=dict(bound=40.0), arms=[arm])

    plot(doc(3.0), str(tmp_path / "remote.png"))
    plot(doc(0.0), str(tmp_path / "local.png"))
    import matplotlib.pyplot as plt

    orange = [round(c * 255) for c in plt.get_cmap("tab10").colors[1]]  # agent 1: only on the cluster

    def count(path):
        img = matplotlib.image.imread(str(path))[:, :, :3] * 255
        return int((abs(img - orange) <= 12).all(axis=2).sum())
    # agent 1's 3 GB there (hatched) against only its legend swatch without it
    assert count(tmp_path / "remote.png") > 20 * count(tmp_path / "local.png")


def test_the_clusters_nodes_take_the_sizes_given_and_keep_their_names(tmp_path):
    import slurmnodes

    sizes = machine.cluster_sizes((2.0, 2.0, 4.0))
    assert sizes == {"node1": (2, 2048, 1), "node2": (2, 2048, 1), "node3": (4, 4096, 10)}
    net = {"host": "10.213.7.1", "nodes": {n: {"addr": f"10.213.7.{10 + i}"} for i, n in enumerate(slurmnodes.NODES, 1)}}
    conf = slurmnodes.write_config(tmp_path, net, sizes).read_text()
    assert "NodeName=node3 NodeHostname=node3 NodeAddr=10.213.7.13 CPUs=4 RealMemory=4096 Weight=10" in conf
    default = slurmnodes.write_config(tmp_path / "d", net).read_text()  # the tests' own cluster: unchanged
    assert "RealMemory=8192" in default and "RealMemory=4096" not in default
    with pytest.raises(ValueError, match="no such node: node9"):
        slurmnodes.write_config(tmp_path / "e", net, {"node9": (1, 512, 1)})


def test_bad_cluster_sizes_are_one_clear_line(capsys):
    for bad in ("2,2", "x,2,4", "2,0,4"):
        with pytest.raises(SystemExit, match="--cluster-gb .*three numbers"):
            main(["--arms", "res-overflow", "--cluster-gb", bad])
