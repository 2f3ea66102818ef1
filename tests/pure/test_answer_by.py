"""A request is answered or never run (issue 40 item 1), in the planner: a request asked for now whose
caller's deadline passed before any pass decided it is refused (caller_gone), never started; a
--queue request waits whoever waits for it; a request id already held by a job that waits, runs or
ran is never started a second time (same_request); the next pass is due at an undecided request's
deadline. Hand-written literals, no clock."""
from __future__ import annotations

from reconciler.core.models import Desired, JobObs, JobRecord, Phase, copy
from reconciler.core.admission import caller_gone, taken_request_ids
from reconciler.core.quantities import UTC
from reconciler.core.wake import next_pass_at
from reconciler.render.reasons import reason_line

from test_plan import NOW, POLICY, kinds, req, run_plan, world


def test_a_request_whose_caller_gave_up_before_any_pass_is_refused_not_started():
    late = req(1, request_id="q-a", answer_by=NOW - 1)
    p = run_plan([late])
    assert kinds(p) == [("refuse", "r-1")]
    d = p.actions[0].detail
    assert d == {"code": "caller_gone", "answer_by": NOW - 1}
    assert reason_line(d, UTC).startswith("not started: its caller stopped waiting at ~")


def test_at_its_deadline_exactly_it_is_too_late_and_before_it_starts():
    assert kinds(run_plan([req(1, answer_by=NOW)])) == [("refuse", "r-1")]
    assert kinds(run_plan([req(1, answer_by=NOW + 0.5)])) == [("start", "r-1")]


def test_a_queued_request_waits_whoever_waits_for_it():
    p = run_plan([req(1, mem=500.0, queue=True, answer_by=NOW - 60)])  # never fits: refused as such
    assert [a.detail["code"] for a in p.actions] == ["never_fits"]
    p = run_plan([req(1, queue=True, answer_by=NOW - 60)])
    assert kinds(p) == [("start", "r-1")]


def test_a_note_asked_for_now_is_refused_too():
    p = run_plan([req(1, kind="note", answer_by=NOW - 1)])
    assert kinds(p) == [("refuse", "r-1")] and p.actions[0].detail["code"] == "caller_gone"


def test_a_recorded_request_is_past_its_deadline_rule():
    queued = JobRecord(request=req(1, mem=28.0, queue=True, answer_by=NOW - 600), phase=Phase.queued)
    p = run_plan([queued.request], [queued])
    assert all(a.detail.get("code") != "caller_gone" for a in p.actions)


def test_a_request_id_held_by_a_running_job_is_not_started_again():
    first = JobRecord(request=req(1, request_id="q-same"), phase=Phase.running, started=NOW - 5, unit="res-r-1.service")
    again = req(2, request_id="q-same", answer_by=NOW + 30)
    p = run_plan([first.request, again], [first])
    assert ("start", "r-2") not in kinds(p)
    (refused,) = [a for a in p.actions if a.id == "r-2"]
    assert refused.kind == "refuse" and refused.detail == {"code": "same_request", "request_id": "q-same", "as": "r-1"}


def test_two_entries_of_one_request_id_in_one_pass_start_once():
    p = run_plan([req(1, request_id="q-twice"), req(2, request_id="q-twice")])
    assert kinds(p) == [("start", "r-1"), ("refuse", "r-2")]


def test_a_request_id_whose_attempt_never_ran_is_free_again():
    gone = JobRecord(request=req(1, request_id="q-again", answer_by=NOW - 50), phase=Phase.refused,
                     detail={"code": "caller_gone"})
    done_ran = JobRecord(request=req(3, request_id="q-ran"), phase=Phase.done, started=NOW - 100, ended=NOW - 50, rc=0)
    assert taken_request_ids({"r-1": gone, "r-3": done_ran}) == {"q-ran": "r-3"}
    p = run_plan([req(2, request_id="q-again", answer_by=NOW + 30)], [gone])
    assert ("start", "r-2") in kinds(p)


def test_caller_gone_is_only_for_requests_asked_for_now():
    assert caller_gone(req(1, answer_by=NOW - 1), NOW)
    assert not caller_gone(req(1, answer_by=NOW - 1, queue=True), NOW)
    assert not caller_gone(req(1), NOW)  # an old client's request: no deadline


def test_the_next_pass_is_due_at_an_undecided_requests_deadline():
    d = Desired(requests=[req(1, answer_by=NOW + 0.3)])
    assert next_pass_at(d, {}, NOW, POLICY, 86400) == NOW + 0.3
    d = Desired(requests=[req(1, answer_by=NOW + 300)])
    assert next_pass_at(d, {}, NOW, POLICY, 86400) == NOW + POLICY.tick_s
    d = Desired(requests=[req(1, answer_by=NOW - 300)], queue_ok=False)  # past, and nothing may act on it
    assert next_pass_at(d, {}, NOW, POLICY, 86400) == NOW + POLICY.tick_s  # not at once, again and again


def test_a_job_res_stopped_whose_unit_left_no_exit_record_is_settled_with_its_stop():
    rec = JobRecord(request=req(1), phase=Phase.running, started=NOW - 60, unit="res-r-1.service",
                    stop_reason="released: res release --stop", stop_code="released", released=True)
    w = world()
    w.jobs["r-1"] = JobObs(state="absent")
    p = run_plan([], [rec], w=w, released=("r-1",), seen=False)
    (a,) = [a for a in p.actions if a.id == "r-1"]
    assert a.kind == "settle" and a.detail["code"] == "released" and a.detail["no_exit_record"] == "vanished"
    assert "lost" not in a.reason and "without an exit record of its own" in a.reason, a.reason
    plain = copy(rec, stop_reason=None, stop_code=None)
    p = run_plan([plain.request], [plain], w=w, seen=False)
    (a,) = [a for a in p.actions if a.id == "r-1"]
    assert a.detail["code"] == "lost"  # no stop asked: as before


def test_a_start_within_that_ran_out_is_never_started_queued_or_recorded():
    """`res run --wait --queue --start-within N`: its caller gives up at start_by and is told the job
    never starts, whether or not its withdrawal reaches the loop (a stopped loop, a held state.db):
    no pass starts it after start_by, recorded in the queue or not."""
    fresh = req(1, queue=True, start_by=NOW - 1)
    p = run_plan([fresh])
    assert kinds(p) == [("refuse", "r-1")] and p.actions[0].detail == {"code": "start_missed", "start_by": NOW - 1}
    assert reason_line(p.actions[0].detail, UTC).startswith("not started: it was to start by ~")
    queued = JobRecord(request=req(1, queue=True, start_by=NOW), phase=Phase.queued)
    assert kinds(run_plan([queued.request], [queued])) == [("refuse", "r-1")]
    assert kinds(run_plan([req(1, queue=True, start_by=NOW + 5)])) == [("start", "r-1")]  # still in time
    running = JobRecord(request=req(1, queue=True, start_by=NOW - 60), phase=Phase.running, started=NOW - 61,
                        unit="res-r-1.service")
    assert ("refuse", "r-1") not in kinds(run_plan([running.request], [running]))  # started in time: left alone
