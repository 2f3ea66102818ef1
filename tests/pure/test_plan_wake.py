"""Pure tier: the next wake-up travels with the plan (Plan.next_at, core/wake.wake_at), decided once
by the planner for the loop that applies it."""
from __future__ import annotations

from ruleset import rules

from reconciler.core.models import Desired, Game, JobObs, JobRecord, Phase, Request, World
from reconciler.core.plan import PRUNE_AFTER_S, plan
from reconciler.core.wake import next_pass_at

NOW = 1_780_000_000.0
POLICY = rules(
    user_reserve_gb=0, user_reserve_cpus=0, game_reserve_gb=0, game_reserve_cpus=0, small_headroom_gb=0,
    max_starts_per_tick=4, max_concurrent_sessions=3, max_cost_usd=0, max_duration=0, max_iterations=0,
    daily_cost_usd=0, tick_s=2.0, sweep_s=0.5,
)


def req(n: int, kind: str = "job", est_s: int = 600) -> Request:
    return Request(id=f"r-{n}", kind=kind, title="t", mem_gb=1, est_s=est_s, created=NOW - 100,
                   cmd=["true"] if kind == "job" else [])


def world(ok: bool = True, **jobs) -> World:
    return World(mem_total_gb=32, mem_available_gb=30, nproc=8, ok=ok, jobs=jobs)


def test_a_plan_that_acts_asks_for_a_pass_in_tick_s():
    p = plan(Desired(requests=[req(1)]), {}, world(), NOW, POLICY, me="me", wake=True)
    assert [a.kind for a in p.actions] == ["start"] and p.next_at == NOW + 2.0


def test_a_plan_that_could_not_observe_asks_for_a_pass_in_tick_s():
    p = plan(Desired(), {}, world(ok=False), NOW, POLICY, me="me", wake=True)
    assert p.actions == [] and p.next_at == NOW + 2.0


def test_a_quiet_plan_carries_what_the_clock_decides():
    assert plan(Desired(), {}, world(), NOW, POLICY, me="me", wake=True).next_at is None
    r = req(1)
    running = {r.id: JobRecord(request=r, phase=Phase.running, started=NOW - 10, attached_by="me", lease_until=NOW + 60)}
    d = Desired(requests=[r])
    p = plan(d, running, world(**{"r-1": JobObs(state="active")}), NOW, POLICY, me="me", wake=True)
    assert p.actions == [] and p.next_at == NOW + 0.5 == next_pass_at(d, running, NOW, POLICY, PRUNE_AFTER_S)
    note = req(2, kind="note", est_s=300)
    granted = {note.id: JobRecord(request=note, phase=Phase.running, started=NOW - 100)}
    p = plan(Desired(requests=[note], game=Game()), granted, world(), NOW, POLICY, me="me", wake=True)
    assert p.actions == [] and p.next_at == NOW + 200
    # the gate's booking of a command run in place: what its command uses is read every tick_s, as
    # a running job's memory is (capacity counts the rest of its book, and its peak is its record's)
    booking = Request(id="r-3", kind="note", title="t", mem_gb=1, est_s=300, created=NOW - 100, gated=True, owner_pid=42)
    granted = {booking.id: JobRecord(request=booking, phase=Phase.running, started=NOW - 100)}
    p = plan(Desired(requests=[booking], game=Game()), granted, World(mem_total_gb=32, mem_available_gb=30, nproc=8,
                                                                       live_pids=[42]), NOW, POLICY, me="me", wake=True)
    assert p.actions == [] and p.next_at == NOW + 2.0


def test_only_the_loop_asks_for_it_and_callers_are_not_shown_it():
    p = plan(Desired(requests=[req(1)]), {}, world(), NOW, POLICY)
    assert p.next_at is None
    p = plan(Desired(requests=[req(1)]), {}, world(), NOW, POLICY, wake=True)
    assert p.next_at == NOW + 2.0 and "next_at" not in p.as_data()
