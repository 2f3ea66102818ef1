"""A cluster job whose node failed under it (issue 28): the plan's decision, pure. Slurm ends such a
job NODE_FAIL (runtime/slurm.py reads it as `node-fail`); per the policy's
cluster_requeue_on_node_failure the entry is submitted again (the `retry` action, the same path as
an auto-sized job killed at its memory limit), as often as the policy says and never more, else it
settles with the reason `node_failure`. The real thing: tests/slurm/test_multinode.py."""
from __future__ import annotations

from reconciler.core.lifecycle import planned, transition
from reconciler.core.models import Desired, ExitObs, JobObs, JobRecord, Phase, Request, World, copy
from reconciler.core.plan import plan
from reconciler.core.quantities import UTC
from reconciler.desired.toml_out import entry_dict
from reconciler.render.reasons import explain
from reconciler.runtime.slurm import SlurmJob, slurm_exit, with_slurm_state
from ruleset import rules

NOW = 1_780_000_000.0
PLACE = "slurm:4121@node2"
# What runtime/slurm.py makes of a NODE_FAIL job that wrote no exit record (its node died with it).
NODE_FAIL = SlurmJob(slurm_id="4121", name="res-r-1", state="NODE_FAIL", reason="NodeDown", start=NOW - 60,
                     end=NOW - 5, nodes="node2", partition="debug", comment="res:/s")


def req(**kw) -> Request:
    return Request(id="r-1", title="make e2e", mem_gb=1.5, cpus=1, est_s=600, created=NOW - 400, on="cluster",
                   cmd=["make", "e2e"], **kw)


def rec(where="cluster", **kw) -> JobRecord:
    return JobRecord(request=req(**kw), phase=Phase.running, started=NOW - 300, unit="res-r-1", where=where,
                     attempt=1, invocation="4121")


def decide(record: JobRecord, ex: ExitObs | None = None, requeues: int = 1, place: str | None = PLACE):
    ex = ex or copy(slurm_exit(NODE_FAIL), invocation="4121")
    world = World(mem_total_gb=32, mem_available_gb=30, nproc=16,
                  jobs={"r-1": JobObs(state="inactive", exit=ex, place=place)})
    desired = Desired(requests=[record.request])
    return explain(plan(desired, {"r-1": record}, world, NOW, rules(cluster_requeue_on_node_failure=requeues)), UTC)


def test_slurm_node_fail_without_an_exit_record_reads_as_a_node_failure():
    ex = slurm_exit(NODE_FAIL)
    assert (ex.result, ex.code, ex.at) == ("node-fail", "killed", NOW - 5)
    # the batch script did write its record (the node was cut off after the command ended by a
    # signal): Slurm's NODE_FAIL is still the reason
    own = ExitObs(result="signal", code="killed", status="TERM", at=NOW - 5, invocation="4121")
    assert with_slurm_state(own, NODE_FAIL).result == "node-fail"


def test_a_node_failure_submits_the_same_entry_again_once():
    (act,) = decide(rec()).actions
    assert act.kind == "retry" and act.id == "r-1"
    assert act.detail == {"code": "retry", "cause": "node_failure", "place": PLACE, "requeue": 1, "of": 1,
                          "took_s": 295.0}
    assert act.rc == 128 + 9 and act.peak_gb is None  # nothing of the lost run is counted as its peak
    assert act.reason == "its cluster node failed under it (slurm NODE_FAIL (slurm:4121@node2)); submitted again (1 of 1)"


def test_the_policy_says_how_often_and_then_it_settles_with_the_clusters_reason():
    (second,) = decide(rec(node_requeues=1), requeues=2).actions
    assert (second.kind, second.detail["requeue"], second.detail["of"]) == ("retry", 2, 2)
    for record, requeues in ((rec(node_requeues=1), 1), (rec(node_requeues=2), 2), (rec(), 0)):
        (settle,) = decide(record, requeues=requeues).actions
        assert (settle.kind, settle.detail["code"]) == ("settle", "node_failure"), (record.request, requeues)
        assert settle.reason.endswith("; its cluster node failed (slurm NODE_FAIL); run it again"), settle.reason


def test_an_agent_session_a_stopped_job_and_a_local_job_are_never_requeued():
    (session,) = decide(rec(agent="claude")).actions
    assert (session.kind, session.detail["code"]) == ("settle", "node_failure")  # its turn would run, and be paid, again
    stopped = copy(rec(), stop_reason="released by res release", stop_code="released")
    (settle,) = decide(stopped).actions
    assert (settle.kind, settle.detail["code"]) == ("settle", "released")  # the user's stop, not the node, decided
    (local,) = decide(rec(where="local")).actions
    assert local.kind == "settle"


def test_other_cluster_endings_are_never_requeued():
    for state in ("TIMEOUT", "CANCELLED", "FAILED", "OUT_OF_MEMORY"):
        ended = copy(slurm_exit(SlurmJob(**{**NODE_FAIL.__dict__, "state": state})), invocation="4121")
        (act,) = decide(rec(), ex=ended).actions
        assert act.kind == "settle", state


def test_the_requeue_is_a_new_attempt_of_the_same_record():
    record = rec()
    (act,) = decide(record).actions
    again = planned(record, act, NOW, request=copy(record.request, node_requeues=1, queue=True),
                    peak_gb=act.peak_gb, detail=act.detail)
    assert (again.phase, again.invocation, again.attached_by, again.started) == (Phase.queued, None, None, None)
    assert again.request.node_requeues == 1 and again.request.queue  # waits in Slurm's queue, not refused
    started = transition(again, "start", NOW + 1, unit="res-r-1", holder="h", lease_s=30, where="cluster")
    assert (started.id, started.attempt) == ("r-1", 2)  # one entry, its second attempt


def test_the_count_is_on_the_entry_only_once_it_was_requeued():
    assert "node_requeues" not in entry_dict(req())
    assert entry_dict(req(node_requeues=1))["node_requeues"] == 1


def test_doctor_names_every_node_that_wrote_the_logs_and_the_ones_not_asked():
    from reconciler.core.doctor import Facts, decide

    f = Facts(user="me", cgroup_version=2, controllers=frozenset({"memory", "cpu", "io"}), linger=True,
              oomd_running=True, unit_dir="/u", unit_path=("/u",), cluster_checked=True, cluster_logs="/s/logs",
              cluster_partitions=("debug",), cluster_nodes_checked=("node1", "node3"),
              cluster_nodes_skipped=("node2 (drain)",))
    lines = [line for line in decide(f)[1] if "cluster node" in line]
    assert lines == ["ok   every cluster node up (2: node1, node3) can write /s/logs (cluster jobs' logs and exit "
                     "records); not checked: node2 (drain)"]
