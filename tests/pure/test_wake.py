"""Pure tier: when the loop needs a pass by the clock alone (core/wake.py)."""
from __future__ import annotations

from reconciler.core.models import Desired, Game, JobRecord, Phase, Request
from reconciler.core.wake import next_pass_at
from ruleset import rules

POLICY = rules(tick_s=2.0, sweep_s=5.0)
NOW = 1_000_000.0
PRUNE = 86400.0


def req(i: int, kind: str = "job", est_s: int = 600, owner: int | None = None) -> Request:
    return Request(id=f"r-{i}", title="t", mem_gb=1, est_s=est_s, created=NOW - 100, kind=kind, owner_pid=owner,
                   cmd=["true"] if kind == "job" else None)


def rec(r: Request, phase: Phase, started: float | None = None, ended: float | None = None) -> JobRecord:
    return JobRecord(request=r, phase=phase, started=started, ended=ended)


def at(desired: Desired, records: list[JobRecord]):
    return next_pass_at(desired, {r.id: r for r in records}, NOW, POLICY, PRUNE)


def test_nothing_at_all_is_due_by_the_clock():
    assert at(Desired(), []) is None


def test_an_entry_not_yet_recorded_or_waiting_for_room_is_looked_at_every_tick():
    r = req(1)
    assert at(Desired(requests=[r]), []) == NOW + 2.0
    assert at(Desired(requests=[r]), [rec(r, Phase.queued)]) == NOW + 2.0


def test_a_running_job_is_read_every_tick_or_sweep_whichever_is_sooner():
    for phase in (Phase.starting, Phase.running, Phase.exited):
        r = req(1)
        assert at(Desired(requests=[r]), [rec(r, phase, started=NOW - 10)]) == NOW + 2.0
    quick_sweep = rules(tick_s=2.0, sweep_s=0.5)
    r = req(1)
    assert next_pass_at(Desired(requests=[r]), {r.id: rec(r, Phase.running, started=NOW)}, NOW, quick_sweep, PRUNE) == NOW + 0.5


def test_a_note_is_due_at_its_expiry():
    r = req(1, kind="note", est_s=300, owner=4242)
    assert at(Desired(requests=[r]), [rec(r, Phase.running, started=NOW - 100)]) == NOW + 200


def test_a_finished_entry_still_in_the_file_is_retired_at_once_and_pruned_later():
    r = req(1)
    assert at(Desired(requests=[r]), [rec(r, Phase.done, ended=NOW - 5)]) == NOW
    assert at(Desired(), [rec(r, Phase.done, ended=NOW - 5)]) == NOW - 5 + PRUNE


def test_game_mode_is_due_at_its_end_and_the_earliest_time_wins():
    note = req(2, kind="note", est_s=3600)
    desired = Desired(requests=[note], game=Game(on=True, until=NOW + 900))
    assert at(desired, [rec(note, Phase.running, started=NOW)]) == NOW + 900
    assert at(Desired(game=Game(on=True)), []) is None  # on until turned off: a write to game.toml, an event


def test_a_time_already_past_is_now():
    r = req(1, kind="note", est_s=60)
    assert at(Desired(requests=[r]), [rec(r, Phase.running, started=NOW - 600)]) == NOW
