"""Pure tier: one lifecycle vocabulary from plan to store. Every action kind a plan may hold has its
handler in the executor's explicit map, names the lifecycle event it records (core/lifecycle.ACTIONS),
and a plan only asks for events the lifecycle allows from the record's phase."""
from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path
from ruleset import rules

import pytest

from reconciler.apply.executor import Executor
from reconciler.core.lifecycle import (ACTIONS, AFTER_START, TABLE, IllegalTransition, after_start, allowed,
                                       event_of, planned, transition)
from reconciler.core.models import (Action, ActionKind, Desired, ExitObs, JobObs, JobRecord, Phase, Request,
                                    SessionObs, World)
from reconciler.core.plan import plan

KINDS = set(typing.get_args(ActionKind))
NOW = 1_780_000_000.0
ROOT = Path(__file__).resolve().parents[2]


def test_every_action_kind_has_exactly_one_handler():
    assert set(Executor.HANDLERS) == KINDS
    for kind, handler in Executor.HANDLERS.items():
        assert inspect.iscoroutinefunction(handler), kind


def test_kinds_that_ask_for_nothing_are_in_the_map_as_no_ops_and_skipped_by_the_pass():
    assert Executor.NOTHING_TO_DO == {k for k, h in Executor.HANDLERS.items() if h is Executor._nothing} == {"wait", "hold"}
    assert all(ACTIONS[k] is None for k in Executor.NOTHING_TO_DO)


def test_a_kind_outside_the_map_is_a_loud_bug_never_skipped():
    ex = Executor.__new__(Executor)
    ex._lost, ex._records = set(), {}
    action = Action(kind="wait", id="r-1")
    action.kind = "nonsense"
    import asyncio

    with pytest.raises(KeyError):
        asyncio.run(ex.apply(action, {}, NOW))


def test_the_executor_changes_records_only_by_the_plans_word():
    """No event literal in the executor: the plan's action names it (planned), the runtime's answer
    to a start picks the next one (after_start)."""
    tree = ast.parse((ROOT / "reconciler" / "apply" / "executor.py").read_text())
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert "transition" not in called and {"planned", "after_start"} <= called


def test_the_executor_knows_runtimes_only_by_their_protocol():
    tree = ast.parse((ROOT / "reconciler" / "apply" / "executor.py").read_text())
    runtime_imports = {node.module for node in ast.walk(tree)
                       if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("reconciler.runtime")}
    assert runtime_imports == {"reconciler.runtime"}


def test_the_runtime_errors_keep_their_old_names():
    from reconciler import runtime
    from reconciler.runtime import slurm, systemd

    assert systemd.UnitExists is runtime.UnitExists and slurm.RuntimeBusy is runtime.RuntimeBusy
    assert str(runtime.UnitExists("res-r-1.service")) == "start of res-r-1.service failed: a unit of that name exists"
    assert runtime.RuntimeBusy({"code": "busy"}).detail == {"code": "busy"}


# ---------------------------------------------------------------- the lifecycle's side


def test_every_action_kind_names_an_event_of_the_table_or_none():
    assert set(ACTIONS) == KINDS
    for kind, event in ACTIONS.items():
        events = event.values() if isinstance(event, dict) else [event] if event else []
        assert all(e in TABLE for e in events), kind


def test_recover_records_one_of_two_events_by_its_code():
    assert event_of(Action(kind="recover", id="r-1", detail={"code": "unit"})) == "recover_unit"
    assert event_of(Action(kind="recover", id="r-1", detail={"code": "lost"})) == "recover_lost"
    assert event_of(Action(kind="reattach", id="r-1")) == "claim" and event_of(Action(kind="running", id="r-1")) == "unit_seen"


def test_every_answer_to_a_start_is_an_event_allowed_from_starting():
    assert set(AFTER_START) == {"started", "not_started", "unknown", "busy", "failed"}
    for answer, event in AFTER_START.items():
        assert event is None or allowed(Phase.starting, event), answer


def test_after_start_and_planned_are_transitions():
    req = Request(id="r-4", title="e2e", mem_gb=2.0, est_s=600, created=NOW - 60, cmd=["make"])
    start = Action(kind="start", id="r-4")
    starting = planned(transition(None, "enqueue", NOW, request=req), start, NOW, unit="u", holder="h", lease_s=60)
    assert starting.phase == Phase.starting
    assert after_start(starting, "unknown", NOW) is None
    assert after_start(starting, "not_started", NOW).phase == Phase.queued
    assert after_start(starting, "started", NOW, invocation="i").phase == Phase.running
    assert after_start(starting, "failed", NOW, why="start failed: x", detail={"code": "start_failed"}).phase == Phase.done
    with pytest.raises(IllegalTransition):
        planned(starting, Action(kind="wait", id="r-4"), NOW)  # a kind that records nothing


def test_no_event_leads_to_exited_and_an_old_exited_record_is_still_settled():
    for event, moves in TABLE.items():
        assert Phase.exited not in moves.values(), event
    old = JobRecord(request=Request(id="r-1", title="t", mem_gb=1, est_s=60, created=NOW, cmd=["true"]),
                    phase=Phase.exited, started=NOW - 10, attached_by="h")
    done = transition(old, "settle", NOW, rc=0, peak_gb=None, why="exit code 0", detail={"code": "exited"}, at=None)
    assert done.phase == Phase.done
    assert transition(old, "hand_over", NOW).phase == Phase.exited


# ---------------------------------------------------------------- the plan speaks it

POLICY = rules(
    user_reserve_gb=0, user_reserve_cpus=0, game_reserve_gb=0, game_reserve_cpus=0, small_headroom_gb=0,
    max_starts_per_tick=4, max_concurrent_sessions=3, max_cost_usd=0, max_duration=0, max_iterations=0,
    daily_cost_usd=0, tick_s=2.0, sweep_s=5.0, adopt_sessions=True, agents_slice="agents.slice", session_mem_gb=0,
    unit_prefix="res",
)


def _req(n: int, kind: str = "job", queue: bool = False, mem: float = 1.0) -> Request:
    return Request(id=f"r-{n}", kind=kind, title=f"t{n}", mem_gb=mem, est_s=60, created=NOW - 100, queue=queue,
                   cmd=["true"] if kind == "job" else [])


OBS = {
    "alive": JobObs(state="active"),
    "ended": JobObs(state="inactive", exit=ExitObs(result="exit-code", code="exited", status="3", at=NOW - 1)),
    "oom": JobObs(state="inactive", exit=ExitObs(result="oom-kill", code="killed", status="KILL", oom_kills=1,
                                                  at=NOW - 1)),
    "absent": None,
}


def _scenarios():
    for phase in Phase:
        for obs_name, obs in OBS.items():
            for in_file in (True, False):
                for released in (True, False):
                    for held in (None, "me", "other"):
                        for kind in ("job", "note"):
                            r = _req(1, kind=kind)
                            if "oom" == obs_name:
                                r.auto = ["mem"]
                            rec = JobRecord(request=r, phase=phase, started=NOW - 30, ended=NOW - 2 * 86400,
                                            released=released, attached_by=held, lease_until=NOW - 1, unit="u")
                            yield rec, obs, in_file


def test_every_record_changing_action_of_a_plan_is_allowed_by_the_lifecycle():
    """Records in every phase, their units alive, ended, killed at their limit or gone, in the queue
    file or not, released or not, held by this loop, another or nobody: whatever the plan asks of a
    record, the lifecycle allows from its phase."""
    seen = set()
    for rec, obs, in_file in _scenarios():
        requests = [rec.request] if in_file else []
        # started, started from the queue, left waiting behind it, granted, taken back, refused
        requests += [_req(2), _req(3, queue=True, mem=20.0), _req(4, queue=True, mem=20.0), _req(5, kind="note"),
                     _req(6), _req(7, mem=1000.0)]
        world = World(mem_total_gb=32, mem_available_gb=30, nproc=8, jobs={"r-1": obs} if obs else {},
                      ran_before=["r-6"], sessions=[SessionObs(pid=4242, in_slice=False, unit="x.scope")])
        p = plan(Desired(requests=requests), {rec.id: rec}, world, NOW, POLICY, me="me", wake=True)
        for a in p.actions:
            event = event_of(a)
            seen.add(a.kind)
            if event is None:
                continue
            before = rec.phase if a.id == rec.id else None
            assert allowed(before, event), (rec.phase, rec.request.kind, a.kind, event)
    assert {"start", "grant", "refuse", "running", "stop", "settle", "reattach", "requeue", "retry", "expire",
            "cancel", "retire", "prune", "restore", "recover", "enqueue", "adopt"} <= seen, seen
