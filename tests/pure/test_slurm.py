"""Pure tier: Slurm's answers as res reads them (real output of Slurm 22.05.8, tests/fixtures/slurm,
SOURCES.md there), and the planner's decisions for cluster requests (DESIGN §6b), with literals."""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

from reconciler.core.models import ExitObs, Game, JobObs, JobRecord, Phase, World
from reconciler.core.plan import settle_outcome
from reconciler.runtime import JobSpec
from reconciler.runtime.slurm import (ALIVE_STATES, ENDED_RESULTS, SlurmJob, batch_script, parse_squeue,
                                      parse_submitted, parse_test_only, parse_time, sbatch_args, slurm_exit,
                                      with_slurm_state)

from test_plan import NOW, POLICY, kinds, req, run_plan, world

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# ---------------------------------------------------------------- reading Slurm's answers


def test_squeue_lines_in_the_pinned_format_are_read_field_by_field():
    jobs = parse_squeue(fixture("squeue-oom-pending.txt"))
    by_name = {j.name: j for j in jobs}
    assert sorted(by_name) == ["res-r-1", "res-r-2", "res-r-3", "res-r-4", "res-r-5"]
    oom = by_name["res-r-2"]
    assert (oom.slurm_id, oom.state, oom.reason, oom.nodes, oom.partition) == \
        ("610574", "OUT_OF_MEMORY", "OutOfMemory", "vm", "debug")
    assert oom.start == parse_time("2026-12-01T08:13:26") and oom.end == parse_time("2026-12-01T08:13:27")
    pending = by_name["res-r-4"]
    assert (pending.state, pending.reason, pending.start, pending.nodes) == ("PENDING", "Resources", None, "")
    # The comment is last and may itself hold the separator: read whole.
    assert by_name["res-r-1"].comment == "res:/tmp/st a|b"
    assert by_name["res-r-3"].comment == "res:/tmp/st"


def test_every_state_slurm_printed_is_one_res_knows():
    for name in ("squeue-submitted.txt", "squeue-oom-pending.txt", "squeue-timeout-cancelled.txt"):
        for job in parse_squeue(fixture(name)):
            assert job.state in ALIVE_STATES or job.state in ENDED_RESULTS, (name, job.state)


def test_lines_without_every_field_are_skipped_not_misread():
    text = "610573|res-r-1|RUNNING\n\n|res-r-2|RUNNING|None|N/A|N/A||debug|c\n" + fixture("squeue-submitted.txt")
    jobs = parse_squeue(text)
    assert [j.slurm_id for j in jobs] == [j.slurm_id for j in parse_squeue(fixture("squeue-submitted.txt"))]


def test_sbatch_parsable_answer_is_the_job_id():
    assert parse_submitted(fixture("sbatch-parsable.txt")) == "610573"
    assert parse_submitted("4121;cluster2\n") == "4121"  # the multi-cluster form
    with pytest.raises(RuntimeError, match="not a job id"):
        parse_submitted("sbatch: error: Batch job submission failed: Invalid account\n")


def test_test_only_gives_start_nodes_and_partition():
    start, nodes, partition = parse_test_only(fixture("sbatch-test-only.txt"))
    assert start == parse_time("2026-12-01T08:17:25") and (nodes, partition) == ("vm", "debug")
    assert parse_test_only("sbatch: error: Unable to contact slurm controller (connect failure)") is None


def test_times_slurm_leaves_open_are_none():
    for text in ("N/A", "Unknown", "None", "", "2026-12-01"):
        assert parse_time(text) is None
    assert parse_time("2026-12-01T08:13:26") == time.mktime((2026, 12, 1, 8, 13, 26, 0, 0, -1))


# ---------------------------------------------------------------- how a job ended


def _job(state: str, end: float = NOW) -> SlurmJob:
    return SlurmJob(slurm_id="7", name="res-r-1", state=state, reason="None", start=NOW - 60, end=end, nodes="vm",
                    partition="debug", comment="res:/s")


def _record(status: str, code: str = "exited", oom: int = 0) -> ExitObs:
    return ExitObs(result="signal" if code == "killed" else "exit-code", code=code, status=status, oom_kills=oom,
                   at=NOW, invocation="7")


def test_slurm_state_adds_what_the_batch_script_cannot_know():
    assert with_slurm_state(_record("TERM", "killed"), _job("TIMEOUT")).result == "timeout"
    assert with_slurm_state(_record("TERM", "killed"), _job("CANCELLED")).result == "cancelled"
    assert with_slurm_state(_record("KILL", "killed", oom=1), _job("OUT_OF_MEMORY")).result == "oom-kill"
    # A command that outlived an OOM kill of its child keeps its own exit code; the kill is on record.
    survived = with_slurm_state(_record("1"), _job("OUT_OF_MEMORY"))
    assert (survived.code, survived.status, survived.oom_kills) == ("exited", "1", 1)
    done = _record("3")
    assert with_slurm_state(done, _job("FAILED")) == done


def test_without_an_exit_record_slurm_alone_tells():
    assert slurm_exit(_job("COMPLETED")).status == "0"
    node = slurm_exit(_job("NODE_FAIL"))
    assert (node.result, node.code) == ("node-fail", "killed")
    assert slurm_exit(_job("OUT_OF_MEMORY")).oom_kills == 1


def _settled(ex: ExitObs, est: int = 60):
    rec = JobRecord(request=req(1, est=est, mem=0.5), phase=Phase.running, started=NOW - 100, where="cluster")
    rc, peak, outcome = settle_outcome(rec, ex)
    return rc, outcome


def test_a_cluster_job_over_its_time_limit_says_so_with_the_limit_slurm_used():
    rc, outcome = _settled(with_slurm_state(_record("TERM", "killed"), _job("TIMEOUT")), est=90)
    assert rc == 128 + 15 and outcome == {"code": "time_limit", "limit_s": 120}  # whole minutes


def test_a_cluster_job_killed_at_its_memory_or_node_says_which():
    _, outcome = _settled(with_slurm_state(_record("KILL", "killed", oom=1), _job("OUT_OF_MEMORY")))
    assert outcome == {"code": "memory_limit", "mem_gb": 0.5, "peak_gb": None, "try_mem": "768M"}
    _, outcome = _settled(slurm_exit(_job("NODE_FAIL")))
    assert outcome == {"code": "node_failure"}
    # Cancelled from outside res (scancel by hand): the same outcome as a unit stopped from outside.
    _, outcome = _settled(with_slurm_state(_record("TERM", "killed"), _job("CANCELLED")))
    assert outcome == {"code": "stopped_outside", "signal": "TERM"}


# ---------------------------------------------------------------- what is submitted


def _spec(**kw) -> JobSpec:
    base = dict(job_id="r-7", cmd=["/usr/bin/printf", "%s|", "a b", "$HOME", "it's", "x;y"], cwd="/work/it's here",
                env={}, mem_gb=1.5, cpus=2.5, log_path=Path("/s/logs/r-7.log"), exit_path=Path("/s/logs/r-7.exit.json"),
                est_s=61, queue=False)
    base.update(kw)
    return JobSpec(**base)


def test_sbatch_gets_the_request_in_slurm_units():
    cluster = type("C", (), {"partition": "debug", "account": "", "qos": "short"})()
    args = sbatch_args(_spec(), "res-r-7", "res:/s", cluster, queue=False)
    assert "--mem=1536M" in args and "--cpus-per-task=3" in args and "--time=2" in args
    assert "--job-name=res-r-7" in args and "--comment=res:/s" in args and "--no-requeue" in args
    assert "--partition=debug" in args and "--qos=short" in args and not any(a.startswith("--account") for a in args)
    assert "--output=/s/logs/r-7.log" in args and "--open-mode=append" in args


def test_the_batch_script_quotes_the_command_for_sh_word_for_word():
    script = batch_script(_spec(), ["/py", "-I", "-S", "/hook.py"])
    assert script.startswith("#!/bin/sh\n")
    assert "/usr/bin/printf '%s|' 'a b' '$HOME' 'it'\"'\"'s' 'x;y' </dev/null &" in script
    assert "cd '/work/it'\"'\"'s here' || exit 200" in script
    assert "INVOCATION_ID=\"$SLURM_JOB_ID\"" in script and "RES_EXIT_RECORD=/s/logs/r-7.exit.json" in script


# ---------------------------------------------------------------- the planner's decisions


def _cluster_world(ok: bool | None = True, error: str | None = None, **kw) -> World:
    w = world(**kw)
    w.cluster_ok, w.cluster_error = ok, error
    return w


def test_a_cluster_request_is_submitted_by_res_guardrails_not_local_memory():
    big = req(1, mem=40.0, cpus=32, on="cluster")  # could never fit on this machine
    p = run_plan([big], w=_cluster_world())
    assert kinds(p) == [("start", "r-1")]
    (a,) = p.actions
    assert a.detail == {"code": "submit", "where": "cluster", "overflow": False, "queue": False, "est_s": 600}
    assert (a.mem_gb, a.cpus) == (40.0, 32)


def test_where_a_start_runs_is_the_actions_own_field_and_the_plans_data_is_as_before():
    """The executor starts a job where `Action.where` says (tests/files/test_start_where.py); the
    detail keeps its copy for the plan's reader, and the plan's data is what it was (no `where` key
    of the action's own)."""
    p = run_plan([req(1, mem=40.0, cpus=32, on="cluster"), req(2)], w=_cluster_world())
    assert [(a.id, a.kind, a.where) for a in p.actions] == [("r-1", "start", "cluster"), ("r-2", "start", "local")]
    data = p.as_data()
    assert all("where" not in a for a in data["actions"]) and data["actions"][0]["detail"]["where"] == "cluster"
    assert [a.where for a in p.actions] == ["cluster", "local"]  # (the data is a copy: the plan keeps its field)


def test_a_cluster_that_does_not_answer_keeps_its_requests_waiting_even_without_queue():
    w = _cluster_world(ok=False, error="slurm: squeue: Unable to contact slurm controller (slurmctld down? check: scontrol ping)")
    p = run_plan([req(1, on="cluster"), req(2, on="cluster", queue=True)], w=w)
    assert kinds(p) == [("enqueue", "r-1"), ("enqueue", "r-2")]
    assert [(a.detail["waits_for"], a.detail["error"]) for a in p.actions] == [("cluster", w.cluster_error)] * 2


def test_cluster_jobs_hold_no_local_memory_but_count_as_sessions():
    remote = JobRecord(request=req(1, mem=20.0, cpus=8, agent="claude", on="cluster"), phase=Phase.running,
                       started=NOW - 60, where="cluster", unit="res-r-1")
    w = _cluster_world(avail=30.0)
    w.jobs["r-1"] = JobObs(state="active")
    p = run_plan([req(2, mem=20.0, cpus=4)], records=[remote], w=w)
    assert ("start", "r-2") in kinds(p)  # 30 − 6 − 2 = 22 GB free here: r-1's 20 GB are on the cluster
    assert p.budget_mem_gb == pytest.approx(22.0)
    # Three sessions is the cap; two more on the cluster, one of them refused by it.
    s2 = dataclasses.replace(remote, request=req(3, agent="claude", on="cluster"))
    s3 = dataclasses.replace(remote, request=req(4, agent="claude", on="cluster"))
    w.jobs.update({"r-3": JobObs(state="active"), "r-4": JobObs(state="active")})
    p = run_plan([req(5, agent="claude", on="cluster")], records=[remote, s2, s3], w=w)
    refused = [a for a in p.actions if a.id == "r-5"]
    assert [a.kind for a in refused] == ["refuse"] and refused[0].detail["resource"] == "sessions"


def test_a_cluster_job_not_observed_is_neither_settled_nor_lost():
    remote = JobRecord(request=req(1, on="cluster"), phase=Phase.running, started=NOW - 60, where="cluster",
                       unit="res-r-1", attached_by=None)
    w = _cluster_world(ok=False, error="slurm: squeue: timed out")
    w.unobserved = ["r-1"]
    p = run_plan([], records=[remote], w=w, seen=False)
    assert [a for a in p.actions if a.id == "r-1"] == []
    # The same job seen gone with no exit record is lost: the difference is observation, not absence.
    w2 = _cluster_world()
    p = run_plan([], records=[remote], w=w2, seen=False)
    assert [(a.kind, a.detail["code"]) for a in p.actions if a.id == "r-1"][-1] == ("settle", "lost")


def _overflow_policy(mode: str):
    return type(POLICY)(**{**vars(POLICY), "overflow": mode})


def test_overflow_sends_what_does_not_fit_here_to_the_cluster_and_local_stays_local():
    from reconciler.core.models import Desired
    from reconciler.core.plan import plan

    w = _cluster_world(avail=10.0)  # 10 − 6 − 2 = 2 GB free here
    requests = [req(1, mem=1.0), req(2, mem=4.0), req(3, mem=4.0, on="local"), req(4, mem=4.0, queue=True)]
    p = plan(Desired(requests=requests, game=Game()), {}, w, NOW, _overflow_policy("cluster"))
    got = {a.id: (a.kind, (a.detail or {}).get("where"), (a.detail or {}).get("overflow")) for a in p.actions}
    assert got["r-1"] == ("start", None, None)  # fits here
    assert got["r-2"] == ("start", "cluster", True)
    assert got["r-3"][0] == "refuse"  # --on local never leaves the machine
    assert got["r-4"] == ("start", "cluster", True)
    # Overflow off, or a cluster that did not answer: everything is decided here.
    for policy, cw in ((_overflow_policy("off"), w), (_overflow_policy("cluster"), _cluster_world(ok=False, avail=10.0))):
        p = plan(Desired(requests=requests, game=Game()), {}, cw, NOW, policy)
        assert all((a.detail or {}).get("where") != "cluster" for a in p.actions)


# ---------------------------------------------------------------- res doctor


def _doctor(**kw) -> list[str]:
    from reconciler.core.doctor import Facts, decide

    f = Facts(user="me", cgroup_version=2, controllers=frozenset({"memory", "cpu", "io"}), linger=True,
              oomd_running=True, unit_dir="/u", unit_path=("/u",), cluster_checked=True, **{"cluster_logs": "/s/logs", **kw})
    return [line for line in decide(f)[1] if "slurm" in line or "cluster" in line]


def test_doctor_says_whether_the_cluster_answers_has_the_partition_and_a_node_can_write_the_logs():
    assert _doctor(cluster_partitions=("debug",)) == [
        "ok   slurm answers (sinfo): partition debug up",
        "ok   a cluster node can write /s/logs (cluster jobs' logs and exit records)"]
    (line,) = _doctor(cluster_error="sinfo: error: Unable to contact slurm controller (connect failure)")
    assert line.startswith("fix  slurm cluster unreachable (sinfo: error: Unable to contact slurm controller") \
        and "scontrol ping" in line
    (line,) = _doctor(cluster_partitions=("debug",), cluster_partition="gpu")
    assert line == ("fix  slurm partition 'gpu' not found or not up (up: debug): set [cluster] partition in the "
                    "policy to one of them, or empty for Slurm's default")
    lines = _doctor(cluster_partitions=("debug",), cluster_write_error="touch: cannot touch: Permission denied")
    assert lines[1].startswith("fix  a cluster node cannot write /s/logs (touch: cannot touch: Permission denied)")
    from reconciler.core.doctor import Facts, decide

    assert not [line for line in decide(Facts(user="me"))[1] if "slurm" in line]  # not checked: not said


def test_a_request_no_node_could_hold_is_told_from_nodes_not_up_yet():
    from reconciler.runtime.slurm import fits_node, parse_sinfo_sizes

    nodes = parse_sinfo_sizes("2|4096\n64+|257000+\nbad line\n")
    assert nodes == [(2, 4096), (64, 257000)]
    assert fits_node(_spec(mem_gb=4.0, cpus=2), 2, 4096)  # 4096 MB, 2 cpus: exactly a node
    assert not fits_node(_spec(mem_gb=4.01, cpus=2), 2, 4096)
    assert not fits_node(_spec(mem_gb=1.0, cpus=2.5), 2, 4096)  # 3 cpus asked


# ---------------------------------------------------------------- the shared directory ([cluster] shared_dir)


def test_cluster_logs_are_the_state_logs_unless_the_policy_names_a_shared_directory():
    from reconciler.config.paths import Paths

    a, b = Paths(Path("/home/me/.local/state/res")), Paths(Path("/tmp/other-state"))
    assert a.cluster_logs("") == a.logs
    shared = a.cluster_logs("/nfs/scratch")
    assert shared.parent == Path("/nfs/scratch") and shared.name.startswith(f"res-{os.getuid()}-")
    assert shared == a.cluster_logs("/nfs/scratch")  # one state directory: always the same folder
    assert b.cluster_logs("/nfs/scratch") != shared  # two state directories never share one
    assert a.log("r-7", str(shared)) == shared / "r-7.log" and a.log("r-7") == a.logs / "r-7.log"
    assert a.exit_record("r-7", str(shared)) == shared / "r-7.exit.json"


@pytest.mark.parametrize("bad", ["relative/dir", "/nfs/../etc", "/nfs/x\ny", "/nfs/\0"])
def test_a_shared_dir_that_is_not_a_plain_absolute_path_is_refused(bad):
    from pydantic import ValidationError

    from reconciler.config.policy import ClusterPolicy

    with pytest.raises(ValidationError, match="absolute path"):
        ClusterPolicy(shared_dir=bad)
    assert ClusterPolicy(shared_dir="/nfs//scratch/").shared_dir == "/nfs/scratch"
    assert ClusterPolicy().shared_dir == ""


def test_a_started_cluster_job_keeps_the_log_dir_it_was_started_with():
    from reconciler.core.lifecycle import transition

    rec = transition(None, "enqueue", NOW, request=req(1, on="cluster"))
    assert rec.log_dir is None
    started = transition(rec, "start", NOW, unit="res-r-1", holder="h", lease_s=30, where="cluster",
                         log_dir="/nfs/scratch/res-0-abc")
    assert (started.where, started.log_dir) == ("cluster", "/nfs/scratch/res-0-abc")
    ran = transition(transition(started, "started", NOW, invocation="4121"), "settle", NOW + 5, rc=0, peak_gb=0.1,
                     why=None, detail={"code": "exited"}, at=None)
    assert ran.log_dir == "/nfs/scratch/res-0-abc"  # settled: still found where it ran
    requeued = transition(started, "requeue", NOW)
    assert requeued.log_dir is None  # where its next start writes is decided by that start
    again = transition(requeued, "start", NOW + 1, unit="res-r-1", holder="h", lease_s=30, where="local")
    assert (again.where, again.log_dir) == ("local", None)  # started here after all: the state logs/


def test_doctor_tells_how_to_fix_an_unwritable_shared_directory():
    lines = _doctor(cluster_partitions=("debug",), cluster_logs="/nfs/scratch/res-0-abc", cluster_shared=True,
                    cluster_write_error="/nfs/scratch is not a directory here (not mounted?)")
    assert lines[1] == ("fix  a cluster node cannot write /nfs/scratch/res-0-abc (/nfs/scratch is not a directory "
                        "here (not mounted?)): set [cluster] shared_dir in the policy to a directory mounted at "
                        "the same path on this host and every node")
    (_, line) = _doctor(cluster_partitions=("debug",), cluster_write_error="Permission denied")
    assert "set [cluster] shared_dir in the policy to a directory this host and the nodes share" in line
