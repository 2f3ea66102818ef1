"""Pure tier: what a job books and what caps it, CPUs shared, and the pressure ladder (DESIGN §5.1,
core/capacity.py, core/ladder.py, core/plan.py): hand-written literals in, decisions out."""
from __future__ import annotations

import dataclasses

import pytest

from reconciler.core.capacity import capacity
from reconciler.core.ladder import held_pressure, raised_book, rung, victims
from reconciler.core.models import Desired, ExitObs, Game, JobObs, JobRecord, Phase, copy
from reconciler.core.admission import queue_order
from reconciler.core.sizing import book_for
from reconciler.core.wake import LADDER_TICK_S, wake_at
from tests.pure.test_plan import ME, NOW, POLICY, kinds, plan, plan_as, req, run_plan, running, world

# W: 12 GB for agents (20 − 6 reserve − 2 headroom), 12 cpus (16 − 4)
W = dict(avail=20.0, total=32.0, nproc=16)
LADDER = dataclasses.replace(POLICY, guard_gb=1.0, pressure_full_pct=10.0)


def booked(n, cap, book, **kw):
    return req(n, mem=cap, book_gb=book, booked_from="5 runs of make e2e", **kw)


def active(used, cache=0.0):
    return JobObs(state="active", mem_used_gb=used, mem_cache_gb=cache)


# ---------------------------------------------------------------- cap and book


def test_a_book_below_the_cap_is_what_admission_counts_and_the_cap_stays_the_limit():
    assert req(1, mem=3.5).book == 3.5  # no history: booked at its cap
    assert booked(1, 3.5, 2.2).book == 2.2
    assert booked(1, 3.5, 4.0).book == 3.5  # never above the cap
    assert booked(1, 3.5, 2.2, gated=True).book == 3.5  # a gated job's size is its guess: its book
    assert booked(1, 3.5, 2.2, kind="note").book == 3.5  # a person is not estimated


def test_a_running_job_counts_at_its_book_or_what_it_uses_whichever_is_more():
    job = running(1, mem=3.5, book_gb=2.2)
    under = capacity(POLICY, Game(), world(**W, jobs={"r-1": active(1.0)}), [job], NOW)
    assert under.mem_gb == pytest.approx(12.0 - 1.2)  # 1.2 of its book not used yet
    assert under.holders[0].held_gb == pytest.approx(2.2)
    over = capacity(POLICY, Game(), world(**W, jobs={"r-1": active(2.9)}), [job], NOW)
    assert over.mem_gb == pytest.approx(12.0)  # what it uses is already gone from MemAvailable
    assert over.holders[0].held_gb == pytest.approx(2.9)


def test_the_policys_ceiling_bounds_what_agents_hold_whatever_the_machine_has_free():
    """agents_mem_gb: never more than it less all they hold (a book, or the use where larger), however
    much MemAvailable says, nor a request past it ever; 0 (shipped) leaves the machine to decide."""
    capped = dataclasses.replace(POLICY, agents_mem_gb=3.0)
    job = running(1, mem=3.5, book_gb=2.2)
    for avail in (14.0, 20.0, 30.0):  # however much the machine has free beyond the reserve
        cap = capacity(capped, Game(), world(avail=avail, jobs={"r-1": active(1.0)}), [job], NOW)
        assert cap.mem_gb == pytest.approx(3.0 - 2.2) and cap.max_mem_gb == 3.0
    used_more = capacity(capped, Game(), world(avail=30.0, jobs={"r-1": active(2.9)}), [job], NOW)
    assert used_more.mem_gb == pytest.approx(3.0 - 2.9)
    tight = capacity(capped, Game(), world(avail=POLICY.user_reserve_gb + POLICY.small_headroom_gb + 1.5), [], NOW)
    assert tight.mem_gb == pytest.approx(1.5)  # the machine, when it has less: the smaller of the two
    free = capacity(POLICY, Game(), world(avail=30.0), [], NOW)
    assert POLICY.agents_mem_gb == 0 and free.mem_gb == pytest.approx(30.0 - POLICY.user_reserve_gb - POLICY.small_headroom_gb)


def test_admission_starts_a_job_whose_book_fits_though_its_cap_does_not():
    hog = running(1, mem=9.0)  # nothing of it used yet: 3 GB free
    p = run_plan([booked(2, 5.0, 2.5), req(3, mem=5.0)], records=[hog], w=world(**W))
    assert kinds(p) == [("start", "r-2"), ("refuse", "r-3")]
    assert p.actions[0].book_gb == 2.5 and p.actions[0].mem_gb == 5.0
    d = p.actions[1].detail
    assert d["asked_gb"] == 5.0 and "cap_gb" not in d


def test_a_refusal_says_the_book_and_the_cap():
    hog = running(1, mem=11.0)  # 1 GB free
    p = run_plan([booked(2, 5.0, 2.5)], records=[hog], w=world(**W))
    d = p.actions[0].detail
    assert (d["code"], d["asked_gb"], d["cap_gb"]) == ("busy", 2.5, 5.0)


def test_never_fits_is_judged_on_the_book():
    p = run_plan([booked(1, 30.0, 10.0), booked(2, 30.0, 13.0)], w=world(**W))
    assert kinds(p) == [("start", "r-1"), ("refuse", "r-2")]  # 24 GB is the most: 30 caps, 13 books
    assert p.actions[1].never is False  # (13 > the 2 GB left after r-1, but under the 24 GB most)
    p = run_plan([booked(3, 30.0, 25.0)], w=world(**W))
    assert p.actions[0].detail == {"code": "never_fits", "resource": "memory", "asked": 25.0, "max": 24.0}


def test_a_waiting_head_is_forecast_and_backfilled_by_books():
    hog = running(1, mem=10.0, started=NOW - 300, est=600)  # 2 GB free, until NOW + 300
    head = booked(2, 8.0, 6.0, queue=True)  # waits for r-1: then 12 free, 6 left spare
    beside = booked(3, 6.0, 2.0, queue=True, est=900)  # fits now (2 free) and in the spare then
    p = run_plan([head, beside], records=[hog], w=world(**W))
    assert kinds(p) == [("enqueue", "r-2"), ("start", "r-3")]
    assert p.actions[0].detail["est_start"] == NOW + 300
    assert p.actions[1].detail["spare_gb"] == 6.0


def test_book_for_takes_the_p95_peak_times_the_margin_after_three_runs():
    learned = {"make e2e": [3.3, 600, True, 5, 1.0, 2.8], "make lint": [0.5, 60, False, 2, 1.0, 0.3],
               "make test": [1.4, 300, False, 3, 2.0, 1.2]}
    assert book_for(["make", "e2e"], learned, 1.1) == (3.08, "5 runs of make e2e")
    assert book_for(["make", "lint"], learned, 1.1) is None  # 2 runs: booked at its cap
    assert book_for(["make", "unknown"], learned, 1.1) is None
    # a line of several commands books the most any of them peaked at, once each is known
    assert book_for(["bash", "-c", "make test && make e2e"], learned, 1.0) == (2.8, "5 runs of make e2e")
    assert book_for(["bash", "-c", "make lint && make e2e"], learned, 1.0) is None
    assert book_for(["make", "e2e"], {"make e2e": [3.3, 600, True, 5, 1.0]}, 1.1) is None  # an older gate.json: no peak


# ---------------------------------------------------------------- CPUs are compressible


def test_the_cpu_budget_is_the_overcommit_times_what_agents_may_use():
    shared = dataclasses.replace(POLICY, cpu_overcommit=1.5)
    assert capacity(shared, Game(), world(**W), [], NOW).cpus == pytest.approx(18.0)  # 1.5 × (16 − 4)
    assert capacity(shared, Game(), world(nproc=2), [], NOW).cpus == pytest.approx(2.25)  # 1.5 × (2 − 0.5)
    job = running(1, cpus=4)
    assert capacity(shared, Game(), world(**W), [job], NOW).cpus == pytest.approx(14.0)
    assert capacity(POLICY, Game(), world(**W), [job], NOW).cpus == pytest.approx(8.0)  # 1: the old rule


def test_two_one_cpu_jobs_share_a_core_and_a_half_under_overcommit_two():
    two = [req(n, mem=0.5, cpus=1) for n in (1, 2, 3)]
    strict = run_plan(two, w=world(nproc=2))  # 1.5 cpus for agents: one at a time
    assert [k for k, _ in kinds(strict)] == ["start", "refuse", "refuse"]
    shared = plan(Desired(requests=two), {}, world(nproc=2), NOW, dataclasses.replace(POLICY, cpu_overcommit=2))
    assert [k for k, _ in kinds(shared)] == ["start", "start", "start"]  # 3 cpus promised on 1.5


# ---------------------------------------------------------------- the ladder's rungs


def _rung(avail, psi10=None, psi60=None, policy=LADDER):
    w = world(avail=avail, total=32.0, nproc=16)
    w.pressure_full_pct, w.pressure_full_avg60_pct = psi10, psi60
    return rung(policy, w, capacity(policy, Game(), w, [], NOW))


def test_green_amber_red_by_what_is_free_beyond_the_reserve():
    assert _rung(10.0)[0] == "green"  # 2 GB free beyond reserve and headroom, guard 1
    assert _rung(8.9)[0] == "amber"  # 0.9 GB free: under the guard
    level, why = _rung(8.4)  # 0.4: under half the guard
    assert level == "red" and why == {"room_gb": 0.4, "guard_gb": 1.0, "because": "room"}
    assert _rung(8.4, policy=dataclasses.replace(LADDER, guard_gb=0))[0] == "green"  # guard off


def test_pressure_over_the_line_is_amber_and_held_there_a_minute_is_red():
    assert _rung(20.0, psi10=25.0, psi60=3.0)[0] == "amber"
    level, why = _rung(20.0, psi10=25.0, psi60=12.0)
    assert level == "red" and why["because"] == "pressure" and why["pressure"]["avg60_pct"] == 12.0
    assert _rung(20.0, psi10=5.0, psi60=12.0)[0] == "green"  # it fell: not held now
    assert held_pressure(dataclasses.replace(LADDER, pressure_full_pct=0), world()) is None


def test_amber_starts_nothing_new_and_says_so():
    p = plan(Desired(requests=[req(1, mem=0.2), req(2, mem=0.2, queue=True)]), {}, world(avail=8.9, total=32.0),
             NOW, LADDER)
    assert kinds(p) == [("refuse", "r-1"), ("enqueue", "r-2")] and p.rung == "amber"
    assert p.actions[0].detail["resource"] == "guard" and p.actions[0].detail["guard"] == {"room_gb": 0.9, "guard_gb": 1.0}
    assert p.actions[1].detail["waits_for"] == "guard"


# ---------------------------------------------------------------- who the ladder stops


def _records(*recs):
    return {r.id: r for r in recs}


def test_victims_over_their_book_youngest_first_then_gated_never_sessions_notes_or_those_under():
    old = running(1, mem=4.0, book_gb=2.0, started=NOW - 600)
    young = running(2, mem=4.0, book_gb=2.0, started=NOW - 60)
    gated = running(3, mem=2.0, gated=True, started=NOW - 30)
    under = running(4, mem=4.0, book_gb=3.0, started=NOW - 10)
    session = running(5, mem=4.0, book_gb=1.0, agent="claude", started=NOW - 5)
    holds_note = running(6, mem=4.0, book_gb=1.0, started=NOW - 5)
    note = running(7, mem=1.0, kind="note", batch="r-6")
    jobs = {"r-1": active(2.5), "r-2": active(2.5), "r-3": active(2.4), "r-4": active(2.9),
            "r-5": active(3.0), "r-6": active(3.0)}
    got = victims(_records(old, young, gated, under, session, holds_note, note), world(jobs=jobs))
    assert [r.id for r, _ in got] == ["r-2", "r-1", "r-3"]
    assert got[0][1] == {"used_gb": 2.5, "book_gb": 2.0, "cap_gb": 4.0, "gated": False, "started": NOW - 60}
    assert got[2][1]["cap_gb"] is None and got[2][1]["gated"] is True


def test_page_cache_does_not_put_a_job_over_its_book():
    job = running(1, mem=4.0, book_gb=2.0)
    assert victims(_records(job), world(jobs={"r-1": active(3.0, cache=1.5)})) == []  # 1.5 of it is cache
    assert [r.id for r, _ in victims(_records(job), world(jobs={"r-1": active(3.0, cache=0.5)}))] == ["r-1"]


def _red_world(jobs):
    return world(avail=8.4, total=32.0, nproc=16, jobs=jobs)  # 0.4 GB beyond the reserve: red at guard 1


def test_red_stops_the_youngest_job_above_its_book_and_only_one():
    a = running(1, mem=4.0, book_gb=2.0, started=NOW - 600)
    b = running(2, mem=4.0, book_gb=2.0, started=NOW - 60)
    p = plan_as(ME, [], [copy(a, attached_by=ME), copy(b, attached_by=ME)],
                w=_red_world({"r-1": active(2.6), "r-2": active(2.5)}), policy=LADDER)
    assert p.rung == "red" and kinds(p) == [("evict", "r-2")]
    d = p.actions[0].detail
    assert (d["code"], d["used_gb"], d["book_gb"], d["because"]) == ("evicted", 2.5, 2.0, "room")
    assert p.actions[0].book_gb == 2.0 and p.actions[0].mem_gb == 4.0


def test_red_with_nobody_above_their_book_stops_nothing():
    a = running(1, mem=4.0, book_gb=3.0)
    p = plan_as(ME, [], [copy(a, attached_by=ME)], w=_red_world({"r-1": active(2.6)}), policy=LADDER)
    assert p.rung == "red" and kinds(p) == []


def test_nobody_else_is_stopped_while_a_stopped_job_has_not_ended():
    a = running(1, mem=4.0, book_gb=2.0, started=NOW - 600)
    b = copy(running(2, mem=4.0, book_gb=2.0, started=NOW - 60), stop_reason="above its book", stop_code="evicted")
    p = plan_as(ME, [], [copy(a, attached_by=ME), copy(b, attached_by=ME)],
                w=_red_world({"r-1": active(2.6), "r-2": active(2.5)}), policy=LADDER)
    assert kinds(p) == []


def test_a_job_another_reconciler_holds_is_not_stopped_by_this_one():
    a = running(1, mem=4.0, book_gb=2.0)
    p = plan_as(ME, [], [copy(a, attached_by="host/200/bbbb", lease_until=NOW + 30)],
                w=_red_world({"r-1": active(2.6)}), policy=LADDER)
    assert kinds(p) == []


def test_red_by_held_pressure_stops_a_job_above_its_book_with_room_to_spare():
    a = running(1, mem=4.0, book_gb=2.0)
    w = world(avail=20.0, total=32.0, jobs={"r-1": active(2.6)})
    w.pressure_full_pct, w.pressure_full_avg60_pct = 30.0, 15.0
    p = plan_as(ME, [], [copy(a, attached_by=ME)], w=w, policy=LADDER)
    assert kinds(p) == [("evict", "r-1")] and p.actions[0].detail["because"] == "pressure"


# ---------------------------------------------------------------- after the stop


def _stopped(rec, used=2.5, **kw):
    return copy(rec, attached_by=ME, stop_reason="above its book", stop_code="evicted",
                detail={"code": "evicted", "used_gb": used}, **kw)


def _killed(n, peak):
    return {f"r-{n}": JobObs(state="failed", exit=ExitObs(result="signal", code="killed", status="KILL", peak_gb=peak, at=NOW))}


def test_a_stopped_job_goes_back_to_the_head_with_its_book_raised():
    rec = _stopped(running(1, mem=4.0, book_gb=2.0))
    p = plan_as(ME, [], [rec], w=world(jobs=_killed(1, 2.6)), policy=LADDER)
    assert kinds(p) == [("retry", "r-1")]
    d = p.actions[0].detail
    # max(1.2 × 2.0, 2.6 + 0.1) = 2.7
    assert (d["cause"], d["stops"], d["book_gb"], d["to_gb"], d["at_cap"]) == ("evicted", 1, 2.0, 2.7, False)


def test_stopped_twice_it_is_booked_at_its_cap():
    rec = _stopped(running(1, mem=4.0, book_gb=2.7), evictions=[{"at": NOW - 100}])
    d = plan_as(ME, [], [rec], w=world(jobs=_killed(1, 2.9)), policy=LADDER).actions[0].detail
    assert (d["stops"], d["to_gb"], d["at_cap"]) == (2, 4.0, True)


def test_a_gated_job_stopped_is_guessed_bigger_with_no_cap_to_stay_under():
    rec = _stopped(running(1, mem=2.0, gated=True), used=2.6, evictions=[{"at": NOW - 100}])
    d = plan_as(ME, [], [rec], w=world(jobs=_killed(1, 2.6)), policy=LADDER).actions[0].detail
    assert (d["to_gb"], d["at_cap"]) == (2.7, False)


def test_a_job_that_finished_before_the_stop_reached_it_is_settled_as_done():
    rec = _stopped(running(1, mem=4.0, book_gb=2.0))
    ok = {"r-1": JobObs(state="inactive", exit=ExitObs(result="success", code="exited", status="0", at=NOW))}
    p = plan_as(ME, [], [rec], w=world(jobs=ok), policy=LADDER)
    assert kinds(p) == [("settle", "r-1")]


def test_raised_book_rules():
    assert raised_book(2.0, 2.6, 4.0, 1) == (2.7, "raised after a stop")
    assert raised_book(2.0, 1.0, 4.0, 1) == (2.4, "raised after a stop")  # 1.2 × its book
    assert raised_book(3.5, 3.6, 4.0, 1) == (None, "its cap: raised after a stop")
    assert raised_book(2.0, 2.6, 4.0, 2) == (None, "its cap: stopped 2 times above its book")
    assert raised_book(2.0, 2.6, None, 3) == (2.7, "raised after a stop")  # gated: no cap


def test_a_stopped_job_is_taken_before_everything_queued_after_it():
    first, second, stopped = req(1, queue=True), req(2, queue=True), req(3, queue=True)
    records = {"r-3": JobRecord(request=stopped, phase=Phase.queued, evictions=[{"at": NOW}]),
               "r-1": JobRecord(request=first, phase=Phase.queued)}
    assert [r.id for r in queue_order([first, second, stopped], records)] == ["r-3", "r-1", "r-2"]
    assert queue_order([first, second], records) == [first, second]


def test_off_green_the_next_pass_comes_sooner():
    p = plan(Desired(requests=[req(1, mem=0.2, queue=True)]), {}, world(avail=8.9, total=32.0), NOW, LADDER, wake=True)
    assert p.rung == "amber" and p.next_at == NOW + LADDER_TICK_S
    green = plan(Desired(), {}, world(), NOW, LADDER, wake=True)
    assert wake_at(green, Desired(), {}, world(), NOW, LADDER, 86400) is None


# ---------------------------------------------------------------- an agent session's own processes


def _session(pid, *outside):
    from reconciler.core.models import SessionObs

    return SessionObs(pid=pid, in_slice=True, outside=[dict(p) for p in outside])


def _proc(pid, gb, start="100", pids=None):
    return {"pid": pid, "start": start, "name": "node", "gb": gb, "pids": pids or [pid]}


def test_session_processes_come_after_jobs_largest_first_never_a_note_owners():
    job = running(1, mem=4.0, book_gb=2.0)
    note = running(2, mem=1.0, kind="note", owner_pid=300)
    w = world(jobs={"r-1": active(2.5)})
    w.sessions = [_session(100, _proc(110, 2.5)), _session(200, _proc(210, 3.5), _proc(220, 1.0)),
                  _session(300, _proc(310, 6.0))]  # 300 holds a note: its session's work is the owner's word
    got = victims(_records(job, note), w, session_gb=2.0)
    assert [r.id if r else f"pid-{f['process']['pid']}" for r, f in got] == ["r-1", "pid-210", "pid-110"]
    assert got[1][1]["process"]["session"] == 200 and got[1][1]["process"]["over_gb"] == 2.0
    assert [r for r, _ in victims(_records(job, note), w)] == [job]  # 0: off


def test_red_with_no_job_above_its_book_stops_a_session_process_only_where_the_policy_says():
    w = _red_world({})
    w.sessions = [_session(100, _proc(110, 3.0, pids=[110, 111]))]
    assert kinds(plan_as(ME, [], [], w=w, policy=LADDER)) == []  # ladder_session_gb 0: never
    p = plan_as(ME, [], [], w=w, policy=dataclasses.replace(LADDER, ladder_session_gb=2.0))
    assert kinds(p) == [("evict", "pid-110")]
    assert p.actions[0].detail["process"] == {**_proc(110, 3.0, pids=[110, 111]), "session": 100, "over_gb": 2.0}


def test_game_mode_holds_new_work_back_but_never_stops_a_job_for_its_reserve():
    # 20 GB available: 12 beyond the user's reserve (6) and headroom (2), but 0 beyond the game's (12 + 2 = 14 > 20 − 6)
    on = Game(on=True, until=NOW + 3600)
    w = world(avail=14.2, total=32.0, jobs={"r-1": active(2.6)})
    cap = capacity(LADDER, on, w, [], NOW)
    assert rung(LADDER, w, cap)[0] == "amber"  # under the game reserve's guard: nothing new starts
    a = running(1, mem=4.0, book_gb=2.0)
    d = Desired(requests=[a.request], game=on)
    p = plan(d, {"r-1": copy(a, attached_by=ME)}, w, NOW, LADDER, me=ME)
    assert [k for k, _ in kinds(p) if k == "evict"] == []


def test_a_queued_job_is_booked_from_what_history_knows_now_a_stopped_one_keeps_its_raised_book():
    from reconciler.core.capacity import rebookable, with_book

    asked = req(1, mem=3.5, queue=True)
    assert rebookable(asked, None) and rebookable(asked, JobRecord(request=asked, phase=Phase.queued))
    assert not rebookable(asked, JobRecord(request=asked, phase=Phase.running))  # admitted at its book
    assert not rebookable(asked, JobRecord(request=asked, phase=Phase.queued, evictions=[{"at": NOW}]))
    assert not rebookable(req(2, mem=3.5, gated=True), None) and not rebookable(req(3, kind="note"), None)
    assert with_book(asked, 2.8, "3 runs of make e2e").book == 2.8
    assert with_book(asked, 4.0, "3 runs of make e2e") is asked  # above its cap: its cap
    booked = with_book(asked, 2.8, "3 runs of make e2e")
    assert with_book(booked, None, None).book == 3.5 and with_book(booked, 2.8, "3 runs of make e2e") is booked
