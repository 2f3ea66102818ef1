"""Pure tier: the job lifecycle's one table (core/lifecycle.py), event by event, with literals."""
from __future__ import annotations

import pytest

from reconciler.core.lifecycle import TABLE, IllegalTransition, allowed, transition
from reconciler.core.models import JobRecord, Phase, Request, copy

NOW = 1_780_000_000.0
REQ = Request(id="r-4", title="e2e", mem_gb=2.0, est_s=600, created=NOW - 60, cmd=["make", "e2e"])


def rec(phase: Phase, **kw) -> JobRecord:
    return JobRecord(request=REQ, phase=phase, **kw)


def test_a_job_runs_queued_starting_running_done():
    queued = transition(None, "enqueue", NOW, request=REQ)
    assert (queued.phase, queued.updated, queued.attempt) == (Phase.queued, NOW, 0)
    starting = transition(queued, "start", NOW + 1, unit="res-r-4.service", holder="h/1/n/9", lease_s=60)
    assert (starting.phase, starting.attempt, starting.started, starting.attached_by, starting.lease_until) == \
        (Phase.starting, 1, NOW + 1, "h/1/n/9", NOW + 61)
    running = transition(starting, "started", NOW + 2, invocation="abc")
    assert (running.phase, running.invocation, running.attached_by) == (Phase.running, "abc", "h/1/n/9")
    done = transition(running, "settle", NOW + 9, rc=3, peak_gb=0.5, why="exit code 3", detail={"code": "exited"},
                      at=NOW + 8)
    assert (done.phase, done.rc, done.peak_gb, done.ended, done.attached_by, done.lease_until) == \
        (Phase.done, 3, 0.5, NOW + 8, None, None)
    assert done.outcome == "exited"


def test_a_requeue_spends_no_attempt_and_drops_the_hold():
    starting = transition(rec(Phase.queued, attempt=2), "start", NOW, unit="u", holder="h", lease_s=60)
    assert starting.attempt == 3
    back = transition(starting, "requeue", NOW + 70)
    assert (back.phase, back.attempt, back.started, back.attached_by, back.lease_until) == (Phase.queued, 2, None, None, None)


def test_a_stop_is_on_record_before_the_settle_that_uses_it():
    stopped = transition(rec(Phase.running, attached_by="h"), "stop", NOW, reason="released", code="released")
    assert (stopped.phase, stopped.stop_reason, stopped.stop_code) == (Phase.running, "released", "released")


def test_streaming_and_attach_failures():
    held = rec(Phase.running, attached_by="h", lease_until=NOW + 5, attach_failures=2)
    read = copy(held, **{"log_offset": 4096})
    kept = transition(held, "stream", NOW, read=read, lease_s=None)
    assert (kept.log_offset, kept.attach_failures, kept.lease_until) == (4096, 0, NOW + 5)
    renewed = transition(held, "stream", NOW, read=read, lease_s=60)
    assert renewed.lease_until == NOW + 60
    failed = transition(held, "attach_failed", NOW, error="EIO")
    assert (failed.attach_failures, failed.last_error, failed.attached_by, failed.lease_until) == (3, "EIO", None, None)
    last = transition(held, "read_failed", NOW, error="EIO")
    assert (last.attach_failures, last.attached_by) == (3, "h")
    assert transition(held, "hand_over", NOW).attached_by is None
    assert transition(failed, "claim", NOW, holder="h2", lease_s=60).attached_by == "h2"


@pytest.mark.parametrize("phase, event", [
    (Phase.done, "settle"), (Phase.done, "start"), (Phase.running, "start"), (Phase.queued, "settle"),
    (Phase.refused, "enqueue"), (Phase.cancelled, "release"), (Phase.running, "requeue"), (None, "settle"),
    (Phase.starting, "expire"), (Phase.queued, "nonsense"),
])
def test_an_event_not_allowed_from_a_phase_raises(phase, event):
    before = rec(phase) if phase is not None else None
    assert not allowed(phase, event)
    with pytest.raises(IllegalTransition):
        transition(before, event, NOW, request=REQ)


def test_no_event_leaves_a_terminal_phase():
    for event, moves in TABLE.items():
        assert not set(moves) & {Phase.done, Phase.refused, Phase.cancelled}, event


def test_records_made_from_nothing():
    refused = transition(None, "refuse", NOW, request=REQ, why="busy: …", detail={"code": "busy"})
    assert (refused.phase, refused.ended, refused.outcome) == (Phase.refused, NOW, "busy")
    note = transition(None, "grant", NOW, request=REQ)
    assert (note.phase, note.started) == (Phase.running, NOW)
    back = transition(None, "recover_unit", NOW, request=REQ, unit="res-r-4.service")
    assert (back.phase, back.attempt, back.unit) == (Phase.running, 1, "res-r-4.service")
    lost = transition(None, "recover_lost", NOW, request=REQ, why="lost: …", detail={"code": "lost"})
    assert (lost.phase, lost.attempt, lost.outcome) == (Phase.done, 1, "lost")
