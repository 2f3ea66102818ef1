"""Pure tier: capacity, admission, lifecycle decisions and wording, with hand-written literals."""
from __future__ import annotations

import dataclasses

import pytest

from reconciler.core.capacity import capacity
from reconciler.core.models import DEFAULT_CPUS, Desired, ExitObs, Game, JobObs, JobRecord, Phase, Request, World, copy
from reconciler.core.plan import plan as decide
from reconciler.core.quantities import UTC
from reconciler.render.text import fmt_clock
from reconciler.render.lines import render_plan
from reconciler.render.reasons import explain
from ruleset import rules

NOW = 1_780_000_000.0  # a fixed instant; the planner never reads the clock

# cpu_overcommit = 1: every CPU promised once, the rule these literals were written to; CPUs shared
# past that are tests/pure/test_book.py's.
POLICY = rules(
    user_reserve_gb=6, user_reserve_cpus=4, game_reserve_gb=12, game_reserve_cpus=8, small_headroom_gb=2,
    max_starts_per_tick=4, max_concurrent_sessions=3, max_cost_usd=0, max_duration=0, max_iterations=0,
    daily_cost_usd=0, cpu_overcommit=1,
)


def plan(*args, **kw):
    """The plan as the loop shows and records it: decided, then its reasons made text (in UTC)."""
    return explain(decide(*args, **kw), UTC)


def req(n, mem=1.0, cpus=1, est=600, queue=False, lock=None, kind="job", title=None, project="proj-a", **kw):
    kw.setdefault("cmd", ["make"] if kind == "job" else [])
    return Request(id=f"r-{n}", kind=kind, title=title or f"job {n}", project=project, mem_gb=mem, cpus=cpus,
                   est_s=est, created=NOW - 100 + n, queue=queue, lock=lock, **kw)


def running(n, started=NOW - 300, phase=Phase.running, **kw):
    return JobRecord(request=req(n, **kw), phase=phase, started=started, unit=f"res-r-{n}.service")


def world(avail=30.0, total=32.0, nproc=16, jobs=None, pids=(), ok=True):
    return World(mem_total_gb=total, mem_available_gb=avail, nproc=nproc, jobs=jobs or {}, live_pids=list(pids), ok=ok)


def run_plan(requests, records=(), w=None, game=None, now=NOW, queue_ok=True, released=(), seen=True):
    """Records that are live stay in desired (unless `released`: then `res release` asked for them and
    their entries are gone) and their units are seen alive (unless `seen` is False), so that each test
    states only what it is about."""
    requests = list(requests)
    records = [copy(r, **{"released": True}) if r.id in released else r for r in records]
    given = {r.id for r in requests}
    for r in records:
        if r.phase not in (Phase.done, Phase.refused, Phase.cancelled, Phase.queued) and r.id not in given and r.id not in released:
            requests.append(r.request)
    requests.sort(key=lambda r: r.number)
    d = Desired(requests=requests, game=game or Game(), queue_ok=queue_ok,
                queue_error=None if queue_ok else "desired/queue.toml:3: Expected '=' after a key")
    w = w or world()
    for r in records:  # running units are seen alive unless the test says otherwise
        if seen and r.phase == Phase.running and r.request.kind == "job" and w.ok:
            w.jobs.setdefault(r.id, JobObs(state="active"))
    return plan(d, {r.id: r for r in records}, w, now, POLICY)


def kinds(p):
    return [(a.kind, a.id) for a in p.actions]


# ---------------------------------------------------------------- capacity


def test_capacity_counts_reserve_headroom_unused_reservations_and_notes():
    job = running(1, mem=10.0, cpus=2)
    note = running(2, mem=3.0, cpus=1, kind="note")
    w = world(avail=30.0, jobs={"r-1": JobObs(state="active", mem_used_gb=4.0)})
    cap = capacity(POLICY, Game(), w, [job, note], NOW)
    # 30 avail − 6 reserve − 2 headroom − (10 − 4 unused of r-1) − 3 note = 13
    assert cap.mem_gb == pytest.approx(13.0)
    # 16 cpus − 4 reserve − 2 − 1
    assert cap.cpus == pytest.approx(9.0)
    assert cap.max_mem_gb == pytest.approx(24.0)


def test_job_using_more_than_reserved_claims_nothing_extra():
    job = running(1, mem=2.0)
    w = world(avail=20.0, jobs={"r-1": JobObs(state="active", mem_used_gb=5.0)})
    cap = capacity(POLICY, Game(), w, [job], NOW)
    assert cap.mem_gb == pytest.approx(12.0)  # its 5 GB are already out of MemAvailable
    assert cap.holders[0].held_gb == pytest.approx(5.0)


def test_a_booking_in_place_counts_what_its_command_does_not_use_yet_as_a_job_does():
    """The gate's booking of a command run in place (a gated note): its command's memory is already
    gone from MemAvailable, so counting all of its book as well counted that memory twice (found by
    the crowd of real CLI sessions: a second 3 GB e2e run waited 20 s beside one using 2.6 GB on
    6 GB). What its processes use is measured (World.note_use_gb); only the rest of its book is still
    promised. A note of a person's (nothing measured) still counts whole, and a command above its
    booking holds what it uses."""
    booked = running(1, mem=3.0, cpus=1, kind="note", gated=True, owner_pid=42)
    persons = running(2, mem=2.0, cpus=1, kind="note", owner_pid=43)
    w = world(avail=20.0, pids=[42, 43])
    w.note_use_gb = {"r-1": 2.6}
    cap = capacity(POLICY, Game(), w, [booked, persons], NOW)
    # 20 avail − 6 reserve − 2 headroom − (3 − 2.6 not used yet) − 2 (a person's note, all of it)
    assert cap.mem_gb == pytest.approx(9.6)
    assert cap.holders[0].held_gb == pytest.approx(3.0)
    w.note_use_gb = {"r-1": 3.5}  # above its booking: what it uses, and nothing more
    cap = capacity(POLICY, Game(), w, [booked], NOW)
    assert cap.mem_gb == pytest.approx(12.0) and cap.holders[0].held_gb == pytest.approx(3.5)
    w.note_use_gb = {}  # not measured this pass (no process table): all of it counts
    assert capacity(POLICY, Game(), w, [booked], NOW).mem_gb == pytest.approx(9.0)


def test_game_mode_raises_the_reserve_until_it_expires():
    on = Game(on=True, until=NOW + 60)
    assert capacity(POLICY, on, world(avail=30), [], NOW).mem_gb == pytest.approx(16.0)
    assert capacity(POLICY, on, world(avail=30), [], NOW + 61).mem_gb == pytest.approx(22.0)


def test_cpu_reserve_scales_down_on_a_small_machine():
    # the shipped 4-CPU reserve is a quarter of a 16-core machine; on 2 cores it is half a CPU, so
    # agents are not queued behind one another for a single CPU
    assert capacity(POLICY, Game(), world(nproc=2), [], NOW).cpus == pytest.approx(1.5)
    assert capacity(POLICY, Game(), world(nproc=16), [], NOW).cpus == pytest.approx(12.0)
    on = Game(on=True, until=NOW + 60)
    assert capacity(POLICY, on, world(nproc=2), [], NOW).cpus == pytest.approx(1.0)  # game: half of it
    assert capacity(POLICY, on, world(nproc=16), [], NOW).cpus == pytest.approx(8.0)
    # three default (half-CPU) jobs start at once on two cores
    p = run_plan([req(n, mem=1.0, cpus=DEFAULT_CPUS) for n in (1, 2, 3)], w=world(nproc=2))
    assert kinds(p) == [("start", "r-1"), ("start", "r-2"), ("start", "r-3")]


def test_the_memory_reserve_and_headroom_scale_down_on_a_small_machine():
    """The defaults keep 6 GB for the person and 2 GB of headroom: on an 8 GB laptop (and in the guest
    tier's 8 GB guest) agents got nothing, every job "can never fit (max 0 GB)". Together they take at
    most 3/4 of the machine (game mode: 9/10); from 11 GB up (game: 16 GB) they stand as set."""
    from reconciler.core.capacity import mem_reserve

    shipped = dataclasses.replace(POLICY, user_reserve_gb=6, small_headroom_gb=2, game_reserve_gb=12)
    laptop = capacity(shipped, Game(), world(avail=7.0, total=8.0, nproc=4), [], NOW)
    assert (laptop.reserve_gb, laptop.headroom_gb) == (pytest.approx(4.5), pytest.approx(1.5))
    assert laptop.max_mem_gb == pytest.approx(2.0) and laptop.mem_gb == pytest.approx(1.0)
    assert mem_reserve(6, 2, 2.0) == (pytest.approx(1.125), pytest.approx(0.375))  # a 2 GB VM: 0.5 GB for agents
    assert mem_reserve(6, 2, 16.0) == (6, 2) and mem_reserve(6, 2, None) == (6, 2)  # as set: room enough, or not known
    playing = capacity(shipped, Game(on=True, until=NOW + 3600), world(avail=7.0, total=8.0, nproc=4), [], NOW)
    assert playing.reserve_gb == pytest.approx(12 * 7.2 / 14) and playing.reserve_gb > laptop.reserve_gb
    desktop = capacity(shipped, Game(on=True, until=NOW + 3600), world(avail=15.0, total=16.0, nproc=8), [], NOW)
    assert (desktop.reserve_gb, desktop.headroom_gb) == (12, 2)
    # set by the person (their file, a RES_ variable): it stands as set, whatever the machine
    theirs = dataclasses.replace(shipped, reserve_as_set=("user_reserve_gb",))
    assert capacity(theirs, Game(), world(avail=7.0, total=8.0, nproc=4), [], NOW).max_mem_gb == pytest.approx(0.0)
    # a game reserve set on its own leaves the normal one scaled (and the other way round): the guest
    # tier's 8 GB machine with RES_GAME_RESERVE_GB set refused every job "max 0 GB" while game mode was off
    game_only = dataclasses.replace(shipped, game_reserve_gb=7, reserve_as_set=("game_reserve_gb",))
    off = capacity(game_only, Game(), world(avail=7.0, total=8.0, nproc=4), [], NOW)
    assert off.max_mem_gb == pytest.approx(2.0)
    on = capacity(game_only, Game(on=True, until=NOW + 3600), world(avail=7.0, total=8.0, nproc=4), [], NOW)
    assert on.reserve_gb == 7
    assert capacity(theirs, Game(on=True, until=NOW + 3600), world(avail=7.0, total=8.0, nproc=4), [],
                    NOW).reserve_gb == pytest.approx(12 * 7.2 / 14)  # the game pair still scaled


def test_a_reserve_is_as_set_when_a_file_or_variable_sets_it(monkeypatch, tmp_path):
    """load_policy knows whether the reserve or headroom came from the shipped file or was set."""
    from reconciler.config.policy import load_policy

    monkeypatch.setenv("RES_POLICY_FILE", str(tmp_path / "policy.toml"))
    for key in ("RES_USER_RESERVE_GB", "RES_SMALL_HEADROOM_GB", "RES_GAME_RESERVE_GB"):
        monkeypatch.delenv(key, raising=False)
    assert load_policy().rules().reserve_as_set == ()
    (tmp_path / "policy.toml").write_text("small_headroom_gb = 1\n")
    assert load_policy().rules().reserve_as_set == ("small_headroom_gb",)
    (tmp_path / "policy.toml").write_text("tick_s = 2\n")
    assert load_policy().rules().reserve_as_set == ()
    monkeypatch.setenv("RES_USER_RESERVE_GB", "3")
    assert load_policy().rules().reserve_as_set == ("user_reserve_gb",)
    monkeypatch.setenv("RES_GAME_RESERVE_GB", "9")
    assert load_policy().rules().reserve_as_set == ("user_reserve_gb", "game_reserve_gb")


def test_game_reserve_below_the_user_reserve_never_loosens_admission():
    from reconciler.core.capacity import reserve_warnings
    from reconciler.core.game import slice_target

    odd = dataclasses.replace(POLICY, user_reserve_gb=17, game_reserve_gb=12, user_reserve_cpus=4, game_reserve_cpus=1)
    on, off = Game(on=True, until=NOW + 3600), Game()
    w = world(avail=30.0, total=32.0, nproc=16)
    assert capacity(odd, on, w, [], NOW).mem_gb == capacity(odd, off, w, [], NOW).mem_gb == pytest.approx(11.0)
    assert capacity(odd, on, w, [], NOW).cpus == capacity(odd, off, w, [], NOW).cpus == pytest.approx(12.0)
    # the slice's MemoryHigh in game mode is never above what it is off
    assert slice_target(odd, on, NOW, 32.0, 1.0)["MemoryHigh"] == slice_target(odd, off, NOW, 32.0, 1.0)["MemoryHigh"]
    warnings = reserve_warnings(odd)
    assert len(warnings) == 2 and warnings[0].startswith("policy: game_reserve_gb (12 GB) is below user_reserve_gb (17 GB)")
    assert reserve_warnings(POLICY) == []


# ---------------------------------------------------------------- admission


def test_fitting_request_starts_and_later_ones_see_the_claim():
    p = run_plan([req(1, mem=9), req(2, mem=9)], w=world(avail=25))  # budget 17
    assert kinds(p) == [("start", "r-1"), ("refuse", "r-2")]
    d = p.actions[1].detail
    assert (d["code"], d["resource"], d["free_gb"]) == ("busy", "memory", 8)


def test_busy_line_names_holders_earliest_eta_first_and_when_to_retry():
    late = running(4, mem=7.5, title="dotnet e2e", started=NOW - 60, est=3600)
    soon = running(5, mem=2.0, title="lint", project="proj-b", started=NOW - 60, est=600)
    # both use what they reserved (gone from MemAvailable): budget 11.5 − 6 − 2 = 3.5, and --force
    # would not fit either; 5 GB needs r-5's 2 GB back, which ends first
    used = {"r-4": JobObs(state="active", mem_used_gb=7.5), "r-5": JobObs(state="active", mem_used_gb=2.0)}
    p = run_plan([req(6, mem=5.0)], records=[late, soon], w=world(avail=11.5, jobs=used))
    (a,) = p.actions
    assert a.kind == "refuse"
    d = a.detail
    assert (d["code"], d["resource"], d["short"]) == ("busy", "memory", ["memory"])
    assert [(h["id"], h["project"], h["title"], h["gb"], h["until"]) for h in d["holders"]] == \
        [("r-5", "proj-b", "lint", 2.0, NOW - 60 + 600)]
    assert (d["free_gb"], d["retry"], d["retry_at"]) == (3.5, "after", NOW - 60 + 600)


def test_busy_line_with_two_holders_retries_after_the_later_one():
    a1 = running(4, mem=4.0, title="dotnet e2e", started=NOW, est=3600)
    a2 = running(5, mem=4.0, title="lint", started=NOW, est=600)
    used = {"r-4": JobObs(state="active", mem_used_gb=4.0), "r-5": JobObs(state="active", mem_used_gb=4.0)}
    p = run_plan([req(6, mem=10.0)], records=[a1, a2], w=world(avail=12.0, jobs=used))  # budget 4: needs both back
    d = p.actions[0].detail
    assert [h["id"] for h in d["holders"]] == ["r-5", "r-4"]
    assert (d["retry"], d["retry_at"]) == ("after", NOW + 3600)


def test_cpu_shortage_is_named_in_cpus():
    hog = running(1, mem=1.0, cpus=10, title="build")
    p = run_plan([req(2, mem=1.0, cpus=4)], records=[hog], w=world(avail=30, nproc=16))  # 12 − 10 = 2 cpus
    d = p.actions[0].detail
    assert (d["resource"], d["short"], d["free_cpus"]) == ("cpus", ["cpus"], 2)
    assert [(h["id"], h["cpus"]) for h in d["holders"]] == [("r-1", 10)]


def test_a_head_that_waits_for_cpus_is_named_for_cpus_not_memory():
    """The refusal names the resource that blocks, from the structured reason."""
    hog = running(1, mem=1.0, cpus=11, title="build", est=600)
    head = req(2, mem=2.0, cpus=12, queue=True, title="attrs pytest")
    # 1 cpu free; r-3 fits now, but would hold half a cpu past the head's start, which leaves none spare
    p = run_plan([head, req(3, mem=1.0, cpus=0.5)], records=[hog], w=world(avail=30, nproc=16))
    wait, refuse = p.actions
    assert (wait.kind, wait.detail["waits_for"], wait.detail["position"]) == ("enqueue", "cpus", 1)
    assert refuse.kind == "refuse" and refuse.detail["resource"] == "queue_head"
    assert refuse.detail["head"] == {"id": "r-2", "title": "attrs pytest", "gb": 2.0, "cpus": 12, "waits_for": "cpus"}
    d = refuse.detail
    assert d["short"] == ["cpus"] and d["free_cpus"] == 1, d  # named in cpus only, never in GB
    assert [(h["id"], h["cpus"]) for h in d["holders"]] == [("r-1", 11)]
    # short of both: both are named
    both = run_plan([req(4, mem=22.0, cpus=2)], records=[hog], w=world(avail=30, nproc=16)).actions[0]
    assert both.detail["short"] == ["memory", "cpus"], both.detail
    assert (both.detail["free_gb"], both.detail["free_cpus"]) == (21.0, 1)


def test_refusals_carry_a_stable_reason_code():
    hog = running(1, mem=20.0, lock="e2e", title="e2e")
    p = run_plan([req(2, mem=50.0), req(3, mem=1.0, lock="e2e"), req(4, mem=10.0)], records=[hog],
                 w=world(avail=30.0))
    never, lock, busy = p.actions
    assert (never.detail["code"], never.detail["resource"]) == ("never_fits", "memory")
    assert (lock.detail["code"], lock.detail["resource"], lock.detail["lock"]) == ("busy", "lock", "e2e")
    assert lock.detail["holders"][0]["id"] == "r-1" and lock.detail["retry"] == "after"
    assert (busy.detail["code"], busy.detail["resource"], busy.detail["holders"][0]["id"]) == ("busy", "memory", "r-1")
    assert busy.detail["retry_at"] == pytest.approx(NOW - 300 + 600)


def test_request_larger_than_the_whole_budget_can_never_fit():
    p = run_plan([req(1, mem=20.0)], w=world(avail=2.0, total=24.0))
    (a,) = p.actions
    assert (a.kind, a.never) == ("refuse", True)
    assert a.detail == {"code": "never_fits", "resource": "memory", "asked": 20.0, "max": 16.0}


def test_queued_fifo_blocked_head_holds_the_rest():
    p = run_plan([req(1, mem=20, queue=True), req(2, mem=1, queue=True)], w=world(avail=25))  # budget 17
    assert kinds(p) == [("enqueue", "r-1"), ("enqueue", "r-2")]
    assert (p.actions[1].detail["waits_for"], p.actions[1].detail["head"]) == ("queue_head", "r-1")
    assert p.actions[0].detail["position"] == 1


def test_queued_entry_with_held_lock_is_skipped_not_blocking():
    holder = running(1, mem=1, lock="e2e", title="e2e a")
    queued = [req(2, mem=1, queue=True, lock="e2e"), req(3, mem=1, queue=True)]
    p = run_plan(queued, records=[holder], w=world(avail=30))
    assert kinds(p) == [("enqueue", "r-2"), ("start", "r-3")]
    d = p.actions[0].detail
    assert (d["waits_for"], d["lock"], d["lock_holder"]) == ("lock", "e2e", "r-1")


def test_unqueued_request_behind_blocked_head_is_refused_not_jumping_the_queue():
    p = run_plan([req(1, mem=20, queue=True), req(2, mem=2)], w=world(avail=25))
    assert kinds(p) == [("enqueue", "r-1"), ("refuse", "r-2")]
    assert (p.actions[1].detail["resource"], p.actions[1].detail["head"]["id"]) == ("queue_head", "r-1")


def test_start_cap_per_tick_defers_the_rest():
    p = run_plan([req(n, mem=0.5, queue=True) for n in range(1, 8)], w=world(avail=30))
    assert [k for k, _ in kinds(p)].count("start") == 4
    assert kinds(p)[4] == ("enqueue", "r-5")


def test_force_ignores_the_ledger_but_not_the_reserve():
    hog = running(1, mem=15.0)
    # ledger budget: 30 − 8 − 15 = 7; --force fits against 30 − 8 = 22
    assert kinds(run_plan([req(2, mem=10.0)], records=[hog], w=world(avail=30))) == [("refuse", "r-2")]
    p = run_plan([req(2, mem=10.0, force=True)], records=[hog], w=world(avail=30))
    assert kinds(p) == [("start", "r-2")]
    p = run_plan([req(2, mem=23.0, force=True)], records=[hog], w=world(avail=30))
    assert kinds(p) == [("refuse", "r-2")]


def test_note_is_granted_or_refused_never_queued():
    p = run_plan([req(1, mem=3, kind="note", owner_pid=42)], w=world(avail=30, pids=[42]))
    assert kinds(p) == [("grant", "r-1")]


# ---------------------------------------------------------------- lifecycle


def test_starting_job_seen_active_becomes_running():
    rec = running(1, phase=Phase.starting)
    p = run_plan([req(1)], records=[rec], w=world(jobs={"r-1": JobObs(state="active")}))
    assert kinds(p) == [("running", "r-1")]


def test_starting_job_never_appeared_is_requeued_after_its_lease():
    rec = copy(running(1, phase=Phase.starting), **{"lease_until": NOW - 1})
    assert kinds(run_plan([req(1)], records=[rec])) == [("requeue", "r-1")]
    rec = copy(rec, **{"lease_until": NOW + 30})
    assert kinds(run_plan([req(1)], records=[rec])) == []


def test_ended_unit_is_settled_with_rc_peak_and_why():
    rec = running(1, mem=1.0)
    ex = ExitObs(result="exit-code", code="exited", status="3", peak_gb=0.4, at=NOW)
    p = run_plan([req(1)], records=[rec], w=world(jobs={"r-1": JobObs(state="absent", exit=ex)}))
    (a,) = p.actions
    assert (a.kind, a.rc, a.peak_gb, a.detail["code"]) == ("settle", 3, 0.4, "exited")


def test_memory_limit_kill_says_which_limit_and_to_raise_mem():
    rec = running(1, mem=1.0)
    ex = ExitObs(result="signal", code="killed", status="KILL", peak_gb=1.0, oom_kills=1, at=NOW)
    (a,) = run_plan([req(1)], records=[rec], w=world(jobs={"r-1": JobObs(exit=ex)})).actions
    assert a.rc == 137
    assert a.detail == {"code": "memory_limit", "mem_gb": 1.0, "peak_gb": 1.0, "try_mem": "1.5G", "rc": 137,
                        "took_s": 300.0}


def test_released_running_job_is_stopped_and_settled_as_released():
    rec = running(1)
    p = run_plan([], records=[rec], released=["r-1"])
    assert [(a.kind, a.detail) for a in p.actions] == [("stop", {"code": "released"})]
    stopped = copy(rec, **{"stop_reason": "released"})
    ex = ExitObs(result="success", code="killed", status="TERM", at=NOW)
    (a,) = run_plan([], records=[stopped], released=["r-1"], w=world(jobs={"r-1": JobObs(exit=ex)})).actions
    assert (a.kind, a.detail["code"], a.detail["stop_reason"], a.rc) == ("settle", "stopped", "released", 143)


def test_a_stop_res_did_not_ask_for_says_it_came_from_outside():
    ex = ExitObs(result="signal", code="killed", status="TERM", at=NOW)
    (a,) = run_plan([req(1)], records=[running(1)], w=world(jobs={"r-1": JobObs(exit=ex)})).actions
    assert (a.kind, a.rc, a.detail["code"], a.detail["signal"]) == ("settle", 143, "stopped_outside", "TERM")
    ex = ExitObs(result="core-dump", code="dumped", status="SEGV", at=NOW)
    (a,) = run_plan([req(1)], records=[running(1)], w=world(jobs={"r-1": JobObs(exit=ex)})).actions
    assert (a.rc, a.detail["code"], a.detail["signal"]) == (139, "signal", "SEGV")


def test_a_session_verdict_taken_from_the_exit_code_alone_keeps_the_exit_why():
    from reconciler.core.digest import DigestState
    from reconciler.core.plan import agent_outcome

    rec = running(1, agent="claude")
    by_rc = DigestState(agent="claude", outcome="failure", failure_reason="exit code 143", finished=True, rc=143)
    outside = {"code": "stopped_outside", "signal": "TERM"}
    assert agent_outcome(copy(rec, **{"digest": by_rc}), outside) is outside
    said = by_rc.model_copy(update={"result_seen": True, "failure_reason": "error_during_execution"})
    verdict = agent_outcome(copy(rec, **{"digest": said}), {"code": "exited", "rc": 1})
    assert verdict == {"code": "agent_failed", "failure": "error_during_execution"}


def test_a_lease_of_a_holder_that_is_gone_is_void_at_once():
    """DESIGN §5.4: a holder on this host whose process is gone holds nothing, however long its lease."""
    gone = "host/123/abcd/99"
    rec = copy(running(1), **{"attached_by": gone, "lease_until": NOW + 600})
    ex = ExitObs(result="success", code="exited", status="0", at=NOW - 1)
    w = world(jobs={"r-1": JobObs(state="absent", exit=ex)})
    held = plan(Desired(requests=[rec.request]), {"r-1": rec}, w, NOW, POLICY, me="host/1/x/1")
    assert kinds(held) == []  # a live lease of another: nothing, even though the job ended
    w.gone_holders = [gone]
    free = plan(Desired(requests=[rec.request]), {"r-1": rec}, w, NOW, POLICY, me="host/1/x/1")
    assert kinds(free) == [("reattach", "r-1"), ("settle", "r-1")]
    assert free.actions[0].detail == {"code": "holder_gone", "holder": "host/123"}
    # a `starting` record of a starter that is gone, with no unit: requeued at once (the unit's name
    # is the idempotency key, so a start the dead one did get through is never doubled)
    starting = copy(rec, **{"phase": Phase.starting})
    w2 = world(jobs={}, ok=True)
    w2.gone_holders = [gone]
    p = plan(Desired(requests=[rec.request]), {"r-1": starting}, w2, NOW, POLICY, me="host/1/x/1")
    assert kinds(p) == [("requeue", "r-1")] and p.actions[0].detail == {"code": "holder_gone", "holder": "host/123"}


def test_an_exit_record_counts_only_once_its_unit_ended_and_only_its_own():
    """A job (or a neighbour) writing an exit record cannot end a running job, free its reservation
    or make `res release --stop` answer "already done"."""
    rec = copy(running(1, mem=8.0), **{"invocation": "a1b2"})
    forged = ExitObs(result="success", code="exited", status="0", at=NOW, invocation="a1b2")
    p = run_plan([req(2, mem=10.0)], records=[rec],
                 w=world(avail=25.0, jobs={"r-1": JobObs(state="active", exit=forged)}))
    assert kinds(p) == [("refuse", "r-2")]  # still running: still holding its 8 GB
    # ended, and the record is its own run's: settled
    own = run_plan([], records=[rec], w=world(jobs={"r-1": JobObs(state="absent", exit=forged)})).actions
    assert [(a.kind, a.rc) for a in own] == [("settle", 0)]
    # ended, but the record carries another run's id: not believed
    other = copy(forged, **{"invocation": "ffff"})
    (a,) = run_plan([], records=[rec], w=world(jobs={"r-1": JobObs(state="inactive", exit=other)})).actions
    assert (a.kind, a.rc, a.detail) == ("settle", None, {"code": "lost", "lost": "foreign_exit"})


def test_entries_state_db_lost_are_taken_back_never_started_again():
    """state.db deleted (or replaced by an empty one) next to a queue: an entry whose log exists ran
    before; with its unit there it is taken back, without one it is settled as lost."""
    ended = ExitObs(result="success", code="exited", status="0", at=NOW)
    w = world(jobs={"r-1": JobObs(state="active"), "r-2": JobObs(state="absent", exit=ended)})
    w.ran_before = ["r-1", "r-2", "r-3"]
    p = plan(Desired(requests=[req(n) for n in (1, 2, 3, 4)]), {}, w, NOW, POLICY)
    assert [(a.kind, a.id, (a.detail or {}).get("code")) for a in p.actions] == [
        ("recover", "r-1", "unit"), ("recover", "r-2", "unit"), ("recover", "r-3", "lost"), ("start", "r-4", "fits")]


def test_settle_and_stop_carry_their_outcome_code():
    from reconciler.core.models import ExitObs as E

    def settle(ex, **kw):
        rec = running(1, **kw)
        return run_plan([req(1, **kw)], records=[rec], w=world(jobs={"r-1": JobObs(exit=ex)})).actions[0]

    assert settle(E(result="success", code="exited", status="0", at=NOW)).detail == \
        {"code": "exited", "rc": 0, "peak_gb": None, "took_s": 300.0}
    assert settle(E(result="exit-code", code="exited", status="3", at=NOW)).detail["code"] == "exited"
    oom = settle(E(result="signal", code="killed", status="KILL", oom_kills=1, at=NOW, peak_gb=1.0))
    assert (oom.rc, oom.detail) == (137, {"code": "memory_limit", "mem_gb": 1.0, "peak_gb": 1.0, "try_mem": "1.5G",
                                          "rc": 137, "took_s": 300.0})
    assert settle(E(result="signal", code="killed", status="TERM", at=NOW)).detail["code"] == "stopped_outside"
    over = running(1, max_duration_s=60, started=NOW - 120)
    (stop,) = run_plan([over.request], records=[over]).actions
    assert (stop.kind, stop.detail) == ("stop", {"code": "budget", "budget": "duration", "used": 120.0, "limit": 60})


def test_broken_queue_file_starts_and_stops_nothing():
    rec = running(1)
    p = run_plan([req(2)], records=[rec], w=world(jobs={"r-1": JobObs(state="active")}), queue_ok=False)
    assert kinds(p) == []
    assert "desired/queue.toml:3" in p.notices[0]


def test_unobservable_world_is_never_acted_on():
    rec = running(1)
    p = run_plan([req(2)], records=[rec], w=world(ok=False))
    assert kinds(p) == []


def test_running_unit_gone_without_exit_record_is_settled_as_lost():
    (a,) = run_plan([req(1)], records=[running(1)], seen=False).actions
    assert (a.kind, a.rc) == ("settle", None)
    assert a.detail == {"code": "lost", "lost": "vanished"}


def test_note_of_dead_owner_or_past_expiry_expires():
    note = running(1, kind="note", owner_pid=42, est=600, started=NOW - 60)
    assert kinds(run_plan([note.request], records=[note], w=world(pids=[]))) == [("expire", "r-1")]
    assert kinds(run_plan([note.request], records=[note], w=world(pids=[42]))) == []
    assert kinds(run_plan([note.request], records=[note], w=world(pids=[42]), now=NOW + 600)) == [("expire", "r-1")]


def test_the_gates_booking_in_place_is_held_as_a_gated_job_is_to_twice_its_estimate():
    """A command admitted in place (`res hook`) is booked as a gated note: its estimate is the gate's
    guess, so it is held to twice that, as a gated job runs; a note of a person's ends at its time."""
    booked = running(1, kind="note", owner_pid=42, est=600, started=NOW - 60, gated=True)
    assert booked.expires() == NOW - 60 + 1200 and booked.eta() == NOW - 60 + 600
    assert kinds(run_plan([booked.request], records=[booked], w=world(pids=[42]), now=NOW + 600)) == []
    assert kinds(run_plan([booked.request], records=[booked], w=world(pids=[42]), now=NOW + 1140)) == [("expire", "r-1")]


def test_a_booking_in_place_ends_with_the_most_its_command_was_seen_using():
    """Released by its post-tool event, its owner gone or its time up, a booking in place ends with
    its command's peak as measured (World.note_peak_gb), in the action and in its record."""
    from reconciler.core.lifecycle import transition

    booked = running(1, kind="note", owner_pid=42, gated=True)
    w = world(pids=[42])
    w.note_peak_gb = {"r-1": 2.7}
    p = run_plan([], records=[booked], w=w, released=["r-1"])
    assert kinds(p) == [("expire", "r-1")] and p.actions[0].detail == {"code": "released", "peak_gb": 2.7}
    ended = transition(booked, "expire", NOW, why="released", detail=p.actions[0].detail)
    assert ended.phase == Phase.done and ended.peak_gb == 2.7
    gone = world(pids=[])
    gone.note_peak_gb = {"r-1": 1.25}
    assert run_plan([booked.request], records=[booked], w=gone).actions[0].detail == {"code": "owner_gone", "pid": 42,
                                                                                     "peak_gb": 1.25}
    unmeasured = run_plan([], records=[booked], w=world(pids=[42]), released=["r-1"])
    assert unmeasured.actions[0].detail == {"code": "released"}


def test_the_gates_booking_in_place_waits_its_turn_in_the_queue_and_is_granted_in_order():
    """A queued note (the hook's booking of a command run in place) is not refused while a queued job
    waits at the head: it queues behind it, and is granted (not started: nothing runs) in FIFO order."""
    big = running(1, mem=20.0)  # holds most of the budget
    head = req(2, mem=10.0, queue=True)
    booking = req(3, mem=10.0, queue=True, kind="note", gated=True, owner_pid=42)
    p = run_plan([big.request, head, booking], records=[big], w=world(avail=10.0, pids=[42]))
    assert kinds(p) == [("enqueue", "r-2"), ("enqueue", "r-3")]
    assert [a.detail["position"] for a in p.actions] == [1, 2]
    # the memory is back: the head starts; the booking, asked first of what is left, is granted
    alone = run_plan([booking], records=[], w=world(avail=30.0, pids=[42]))
    assert kinds(alone) == [("grant", "r-3")]
    # withdrawn by its hook when the gate's wait ran out (released, gone from queue.toml): cancelled,
    # not left queued for good (every pass would then come tick_s after the last)
    waiting = JobRecord(request=booking, phase=Phase.queued)
    assert kinds(run_plan([], records=[waiting], released=["r-3"])) == [("cancel", "r-3")]


def test_an_ask_refused_for_room_and_asked_again_keeps_the_place_of_its_first_ask():
    """The gate's wait ran out (refused start_missed, or the hook withdrew its booking): the agent was
    told busy, did other work, and asks again for the same command. It stands where its first ask
    stood, ahead of what was asked since, not at the back (an agent sent to the back each time was
    refused nine times running in the crowd, and Gemini CLI ends a session refused five times)."""
    from reconciler.core.admission import KEEP_PLACE_S, first_asked

    cmd = ["bash", "-c", "make e2e"]
    refused = JobRecord(request=req(1, queue=True, owner_pid=42, cmd=cmd), phase=Phase.refused, ended=NOW - 5,
                        detail={"code": "start_missed"})
    withdrawn = JobRecord(request=req(2, queue=True, kind="note", gated=True, owner_pid=42, cmd=cmd, since=NOW - 150),
                          phase=Phase.cancelled, ended=NOW - 30)
    records = {r.id: r for r in (refused, withdrawn)}
    assert first_asked(42, None, "proj-a", cmd, records, NOW) == NOW - 150  # the first of the chain
    assert first_asked(42, None, "proj-a", cmd, {"r-1": refused}, NOW) == refused.request.created
    # another agent, another command, another project, or a refusal long ago: its own place
    assert first_asked(43, None, "proj-a", cmd, records, NOW) is None
    assert first_asked(42, None, "proj-a", ["bash", "-c", "make test"], records, NOW) is None
    assert first_asked(42, None, "proj-b", cmd, records, NOW) is None
    assert first_asked(42, None, "proj-a", cmd, records, NOW + KEEP_PLACE_S + 6) is None
    # a run that started is no place kept: asking for it again is new work
    ran = JobRecord(request=req(3, owner_pid=42, cmd=cmd), phase=Phase.done, started=NOW - 20, ended=NOW - 2)
    assert first_asked(42, None, "proj-a", cmd, {"r-3": ran}, NOW) is None
    assert first_asked(None, None, "proj-a", cmd, records, NOW) is None
    # a rewritten job (`res run` records who asked, not an owner): the same asker is the same agent
    by = "claude pid 4121 session 3f2a9c1e"
    job = JobRecord(request=req(6, queue=True, by=by, cmd=cmd), phase=Phase.cancelled, ended=NOW - 3)
    assert first_asked(None, by, "proj-a", cmd, {"r-6": job}, NOW) == job.request.created
    assert first_asked(None, "claude pid 4121 session 77aa0000", "proj-a", cmd, {"r-6": job}, NOW) is None

    big = running(1, mem=20.0)
    later = req(4, mem=10.0, queue=True)  # asked after the first ask, before the ask again
    again = req(5, mem=10.0, queue=True, kind="note", gated=True, owner_pid=42, since=NOW - 150)
    p = run_plan([big.request, later, again], records=[big], w=world(avail=10.0, pids=[42]))
    assert [(a.kind, a.id, a.detail["position"]) for a in p.actions] == [("enqueue", "r-5", 1), ("enqueue", "r-4", 2)]
    alone = run_plan([later, again], records=[], w=world(avail=18.0, pids=[42]))  # room for one: its
    assert kinds(alone) == [("grant", "r-5"), ("enqueue", "r-4")]


def test_queued_entry_removed_from_desired_is_cancelled_and_finished_ones_retired():
    queued = JobRecord(request=req(1, queue=True), phase=Phase.queued)
    done = JobRecord(request=req(2), phase=Phase.done, ended=NOW - 10)
    old = JobRecord(request=req(3), phase=Phase.done, ended=NOW - 90000)
    p = run_plan([req(2)], records=[queued, done, old], released=["r-1"])
    assert kinds(p) == [("cancel", "r-1"), ("retire", "r-2"), ("prune", "r-3")]


def test_an_entry_gone_without_res_release_is_written_back_not_stopped():
    """queue.toml deleted, laid down again, or cut by hand: not the user's word to stop anything
    Every live or queued record whose entry is gone is written back."""
    job, note = running(1, mem=1.0), running(2, kind="note", mem=1.0)
    queued = JobRecord(request=req(3, queue=True), phase=Phase.queued)
    p = plan(Desired(requests=[]), {r.id: r for r in (job, note, queued)},
             world(jobs={"r-1": JobObs(state="active")}, pids=[]), NOW, POLICY)
    assert kinds(p) == [("restore", "r-1"), ("restore", "r-2"), ("restore", "r-3")]
    assert [a.detail for a in p.actions] == [{"code": "restore", "stop": True}, {"code": "restore", "stop": False},
                                             {"code": "restore", "stop": False}]
    assert "Plan: 3 to write back." in render_plan(p)
    # a held (set-aside) entry is not gone: nothing at all
    p = plan(Desired(requests=[], held=["r-1", "r-2", "r-3"]), {r.id: r for r in (job, note, queued)},
             world(jobs={"r-1": JobObs(state="active")}, pids=[2]), NOW, POLICY)
    assert kinds(p) == []


def test_plan_rendering_lines_and_summary():
    rec = running(7, mem=1.0)
    p = run_plan([req(12, mem=10.0, cpus=2, title="make e2e", queue=True)], records=[rec], released=["r-7"])
    p2 = run_plan([req(12, mem=10.0, cpus=2, title="make e2e", queue=True)])
    text = render_plan(p2)
    assert text.splitlines()[0].startswith('  + start    r-12  "make e2e"')
    assert "10.0 GB  2 cpus" in text and "queue head, fits" in text
    assert text.splitlines()[-1] == "Plan: 1 to start."
    assert "- stop" in render_plan(p) and "Plan: 1 to start, 1 to stop." in render_plan(p)
    assert render_plan(run_plan([])) == "No changes. The world matches the desired state."
    # an entry waiting in the queue is not "the world matches": the summary says who waits and why
    waiting = running(1, mem=1, lock="k", title="holder")
    p3 = run_plan([req(2, mem=1, queue=True, lock="k")], records=[copy(waiting, **{"phase": Phase.running})])
    p3.actions = [dataclasses.replace(a, kind="wait") for a in p3.actions]  # as a later pass sees it
    assert render_plan(p3) == f"No changes; 1 queued entry waits (r-2: position 1; est. start ~{fmt_clock(NOW - 300 + 600, UTC)}; lock 'k' held by r-1).", render_plan(p3)


def test_queue_forecast_follows_a_lock_chain_in_order():
    """Three entries on one lock, each --for 5m, behind a running holder of it: each starts when the
    one before it is expected to end, never earlier than its predecessor."""
    holder = running(1, mem=1.0, lock="gate", started=NOW - 60, est=300)  # ends at NOW + 240
    queued = [req(n, mem=1.0, est=300, queue=True, lock="gate") for n in (2, 3, 4)]
    p = run_plan(queued, records=[holder], w=world(avail=30.0))
    ests = [a.detail["est_start"] for a in p.actions]
    assert ests == [NOW + 240, NOW + 540, NOW + 840]
    assert [a.detail["position"] for a in p.actions] == [1, 2, 3]
    assert [a.detail["waits_for"] for a in p.actions] == ["lock"] * 3
    assert [a.detail["lock_holder"] for a in p.actions] == ["r-1", "r-1", "r-1"]
    assert [a.detail["lock"] for a in p.actions] == ["gate"] * 3
    # with the lock free, the first starts and the others chain behind it
    p = run_plan(queued, w=world(avail=30.0))
    assert kinds(p)[0] == ("start", "r-2")
    assert [a.detail["est_start"] for a in p.actions[1:]] == [NOW + 300, NOW + 600]
    # an entry without the lock behind them is not held up by the lock
    p = run_plan(queued + [req(5, mem=1.0, queue=True)], records=[holder], w=world(avail=30.0))
    assert kinds(p)[-1] == ("start", "r-5")


def test_queue_forecast_gives_every_waiting_position_a_start_time():
    hog = running(1, mem=10.0, started=NOW - 300, est=600)  # ends at NOW + 300
    queued = [req(n, mem=4.0, est=600, queue=True) for n in range(2, 7)]
    # budget: 20 − 8 − 10 = 2; once r-1 ends, 12 GB: three 4 GB jobs start at +300; the 4th when the
    # first of them ends (+900), the 5th with it (+900: 4 GB freed... then r-3's end frees the next).
    p = run_plan(queued, records=[hog], w=world(avail=20.0))
    assert [a.detail["position"] for a in p.actions] == list(range(1, 6))
    assert [a.detail["est_start"] for a in p.actions] == [NOW + 300] * 3 + [NOW + 900] * 2


# ---------------------------------------------------------------- attachments, budgets, caps (DESIGN §5.4–5.5)

from reconciler.core.digest import DigestState  # noqa: E402

ME = "host/100/aaaa"
OTHER = "host/200/bbbb"


def session(n, **kw):
    return req(n, agent="claude", **kw)


def attached(rec, holder=OTHER, lease_until=NOW + 30, **update):
    return copy(rec, **{"attached_by": holder, "lease_until": lease_until, **update})


def plan_as(me, requests, records=(), w=None, pricing_error=None, policy=POLICY, now=NOW):
    requests = list(requests)
    given = {r.id for r in requests}
    requests += [r.request for r in records if r.phase in (Phase.starting, Phase.running) and r.id not in given]
    requests.sort(key=lambda r: r.number)
    w = w or world()
    for r in records:
        if r.phase == Phase.running and r.request.kind == "job":
            w.jobs.setdefault(r.id, JobObs(state="active"))
    return plan(Desired(requests=requests), {r.id: r for r in records}, w, now, policy, me=me,
                pricing_error=pricing_error)


def test_a_job_held_by_a_live_lease_of_another_reconciler_is_left_alone():
    rec = attached(running(1))
    ex = ExitObs(result="success", code="exited", status="0", at=NOW)
    assert kinds(plan_as(ME, [], [rec], w=world(jobs={"r-1": JobObs(exit=ex)}))) == []


def test_an_expired_lease_is_reattached_and_the_exit_settled_in_the_same_pass():
    rec = attached(running(1), lease_until=NOW - 12)
    (a,) = plan_as(ME, [], [rec]).actions
    assert (a.kind, a.detail) == ("reattach", {"code": "lease_lapsed", "holder": "host/200", "ago_s": 12.0})
    ex = ExitObs(result="success", code="exited", status="0", at=NOW)
    p = plan_as(ME, [], [rec], w=world(jobs={"r-1": JobObs(exit=ex)}))
    assert kinds(p) == [("reattach", "r-1"), ("settle", "r-1")]


def test_my_own_job_is_not_reattached_and_a_dry_run_claims_nothing():
    mine = attached(running(1), holder=ME)
    assert kinds(plan_as(ME, [], [mine])) == []
    assert kinds(plan_as(None, [], [attached(running(1), holder=None, lease_until=None)])) == []


def test_budget_trips_stop_the_job_with_the_reason():
    cost = attached(running(1, agent="claude", max_cost_usd=0.5), holder=ME,
                    digest=DigestState(agent="claude", spend_usd=0.52, result_seen=True))
    assert [(a.kind, a.detail) for a in plan_as(ME, [], [cost]).actions] == [
        ("stop", {"code": "budget", "budget": "cost", "used": 0.52, "limit": 0.5, "estimated": False, "messages": 0,
                  "reported": 0.52})]
    # mid-run, before any result: the estimate from the lines, said to be one
    running_cost = attached(running(6, agent="claude", max_cost_usd=1.0), holder=ME,
                            digest=DigestState(agent="claude", spend_usd=1.02, estimate_usd=1.02, messages=12))
    (stop,) = plan_as(ME, [], [running_cost]).actions
    assert stop.detail["used"] == pytest.approx(1.02 * 1.02)  # the estimate's margin
    assert (stop.detail["estimated"], stop.detail["messages"], stop.detail["reported"]) == (True, 12, None)
    # reported, but less than its own lines add up to (a background sub-agent, an interrupted turn)
    under = attached(running(7, agent="claude", max_cost_usd=0.05), holder=ME,
                     digest=DigestState(agent="claude", spend_usd=0.11, estimate_usd=0.16, result_seen=True))
    (stop,) = plan_as(ME, [], [under]).actions
    assert stop.detail["used"] == pytest.approx(0.16 * 1.02) and stop.detail["reported"] == 0.11
    assert (stop.detail["estimated"], stop.detail["limit"]) == (False, 0.05)
    slow = attached(running(2, max_duration_s=1800, started=NOW - 1900), holder=ME)
    assert plan_as(ME, [], [slow]).actions[0].detail == {"code": "budget", "budget": "duration", "used": 1900.0, "limit": 1800}
    loops = attached(running(3, agent="claude", max_iterations=40), holder=ME,
                     digest=DigestState(agent="claude", iterations=41))
    assert plan_as(ME, [], [loops]).actions[0].detail == {"code": "budget", "budget": "iterations", "used": 41, "limit": 40}
    tiny = attached(running(5, agent="claude", max_cost_usd=0.01), holder=ME,
                    digest=DigestState(agent="claude", spend_usd=0.010164, result_seen=True))
    assert (plan_as(ME, [], [tiny]).actions[0].detail["used"], plan_as(ME, [], [tiny]).actions[0].detail["limit"]) == \
        (0.010164, 0.01)
    under = attached(running(4, agent="claude", max_cost_usd=0.5), holder=ME,
                     digest=DigestState(agent="claude", spend_usd=0.49))
    assert kinds(plan_as(ME, [], [under])) == []


def test_sessions_get_the_policy_default_budget_plain_commands_do_not():
    policy = dataclasses.replace(POLICY, max_cost_usd=1.0)
    spent = DigestState(agent="claude", spend_usd=1.5)
    sess = attached(running(1, agent="claude"), holder=ME, digest=spent)
    plain = attached(running(2), holder=ME, digest=DigestState(spend_usd=1.5))
    p = plan_as(ME, [], [sess, plain], policy=policy)
    assert [(a.kind, a.id) for a in p.actions] == [("stop", "r-1")]


def test_three_failed_attachments_in_a_row_fail_and_stop_the_job():
    rec = attached(running(1), holder=ME, attach_failures=3, last_error="log unreadable: EIO")
    (a,) = plan_as(ME, [], [rec]).actions
    assert (a.kind, a.detail) == ("stop", {"code": "attach_failed", "failures": 3, "error": "log unreadable: EIO"})
    two = attached(running(1), holder=ME, attach_failures=2, last_error="x")
    assert kinds(plan_as(ME, [], [two])) == []


def test_session_over_the_cap_is_refused_naming_the_sessions_or_waits_with_queue():
    live = [attached(running(n, agent="claude", title=f"bot {n}", started=NOW, est=600 * n), holder=ME)
            for n in (1, 2, 3)]
    p = plan_as(ME, [session(4), req(5)], live)
    assert kinds(p) == [("refuse", "r-4"), ("start", "r-5")]
    d = p.actions[0].detail
    assert (d["code"], d["resource"], d["running"], d["limit"]) == ("busy", "sessions", 3, 3)
    assert [h["id"] for h in d["holders"]] == ["r-1", "r-2", "r-3"]
    assert (d["retry"], d["retry_at"]) == ("after", NOW + 600)
    p = plan_as(ME, [session(4, queue=True), session(5, queue=True), req(6, queue=True)], live)
    assert kinds(p) == [("enqueue", "r-4"), ("enqueue", "r-5"), ("start", "r-6")]
    assert [(a.detail["position"], a.detail["waits_for"]) for a in p.actions[:2]] == [(1, "sessions"), (2, "sessions")]
    assert p.actions[0].detail["block"] == d


def test_sessions_started_in_one_pass_count_against_the_cap():
    p = plan_as(ME, [session(n) for n in range(1, 6)], [])
    assert [k for k, _ in kinds(p)] == ["start", "start", "start", "refuse", "refuse"]


def test_daily_cost_cap_refuses_new_sessions_once_reached():
    policy = dataclasses.replace(POLICY, daily_cost_usd=5.0)
    done_today = JobRecord(request=session(1), phase=Phase.done, started=NOW - 600, ended=NOW - 60,
                           digest=DigestState(agent="claude", spend_usd=4.0))
    running_now = attached(running(2, agent="claude"), holder=ME, digest=DigestState(agent="claude", spend_usd=1.2))
    p = plan_as(ME, [session(3), req(4)], [done_today, running_now], policy=policy)
    assert kinds(p) == [("retire", "r-1"), ("refuse", "r-3"), ("start", "r-4")] or kinds(p) == [("refuse", "r-3"), ("start", "r-4")]
    d = next(a for a in p.actions if a.id == "r-3").detail
    assert (d["code"], d["resource"], d["limit_usd"], d["retry"]) == ("busy", "daily_cost", 5.0, "tomorrow")
    assert d["spent_usd"] == pytest.approx(5.2)


def test_a_broken_pricing_table_starts_no_session():
    p = plan_as(ME, [session(1), req(2)], [], pricing_error="pricing.toml:3: rates.input: must be ≥ 0")
    assert kinds(p) == [("refuse", "r-1"), ("start", "r-2")]
    assert p.actions[0].never and p.actions[0].detail == {"code": "pricing", "resource": "pricing",
                                                          "error": "pricing.toml:3: rates.input: must be ≥ 0"}


def test_a_plan_as_data_is_plain_json_in_field_order():
    import json

    from reconciler.core.models import Action, Plan

    p = Plan(actions=[Action(kind="wait", id="r-3", reason="position 1", title="t", mem_gb=2.0, detail={"code": "queued"})],
             budget_mem_gb=4.0, notices=["n"])
    data = json.loads(json.dumps(p.as_data()))
    assert list(data) == ["actions", "budget_mem_gb", "budget_cpus", "notices", "rung", "rung_why"]
    assert list(data["actions"][0])[:3] == ["kind", "id", "reason"]
    assert data["actions"][0]["detail"] == {"code": "queued"} and data["notices"] == ["n"]
    a, b = Action(kind="wait", id="r-4"), Action(kind="wait", id="r-5")
    a.props["x"] = 1
    assert b.props == {} and a.pids is not b.pids  # fresh mutable defaults each time


def test_attaching_a_job_given_up_cleanly_is_bookkeeping_a_lapsed_lease_is_a_change():
    from reconciler.core.models import Action, Plan

    clean = Action(kind="reattach", id="r-3", reason="nobody attached", detail={"code": "unheld"})
    lapsed = Action(kind="reattach", id="r-4", reason="lease of host/1234 expired 12 s ago",
                    detail={"code": "lease_lapsed", "holder": "host/1234", "ago_s": 12.0})
    assert render_plan(Plan(actions=[clean])).splitlines() == [
        "  · attach   r-3" + " " * 47 + "nobody attached",
        "No changes to jobs; 1 bookkeeping step (·)."]
    assert render_plan(Plan(actions=[clean, lapsed])).splitlines()[-1] == "Plan: 1 to reattach."


# ---------------------------------------------------------------- a kill that teaches (DESIGN §5.9)


def _ended(ex, **kw):
    rec = running(1, **kw)
    return run_plan([req(1, **kw)], records=[rec], w=world(jobs={"r-1": JobObs(exit=ex)})).actions


KILLED = ExitObs(result="oom-kill", code="killed", status="KILL", oom_kills=1, at=NOW, peak_gb=1.0)
WORKERS = ExitObs(result="exit-code", code="exited", status="3", oom_kills=20, at=NOW, peak_gb=1.0)


def test_an_auto_sized_job_killed_at_its_limit_goes_back_once_bigger():
    (retry,) = _ended(KILLED, auto=["mem", "for"])
    assert retry.detail == {"code": "retry", "killed_at_gb": 1.0, "mem_gb": 1.5, "peak_gb": 1.0, "took_s": 300.0}
    # its workers killed and the run failed: the same lesson
    assert [a.kind for a in _ended(WORKERS, auto=["mem"])] == ["retry"]


@pytest.mark.parametrize("kw", [
    {"auto": ["mem"], "grown_from_gb": 0.5},  # already started again once: never low twice, but never a third run
    {},  # the caller's size: the caller decides (its line says what to try)
    {"auto": ["cpus", "for"]},  # res chose the CPUs and the time, not the memory
    {"auto": ["mem"], "gated": True},  # no limit to be killed at: the kernel's OOM, not res's guess
    {"auto": ["mem"], "agent": "claude"},  # a session's turn (and its spend) would run again
])
def test_only_res_own_memory_guess_is_tried_again(kw):
    (settle,) = _ended(KILLED, **kw)
    assert (settle.kind, settle.detail["code"], settle.detail["try_mem"]) == ("settle", "memory_limit", "1.5G")


def test_workers_killed_at_the_limit_is_a_memory_limit_only_when_the_run_failed():
    (failed,) = _ended(WORKERS)
    assert (failed.rc, failed.detail["code"], failed.detail["oom_kills"]) == (3, "memory_limit", 20)
    ok = dataclasses.replace(WORKERS, status="0")
    (passed,) = _ended(ok)
    assert (passed.rc, passed.detail["code"]) == (0, "exited")  # a worker killed and retried by its runner: it passed


def test_only_the_loop_says_where_an_ask_stands():
    """A caller's own `since` is dropped; the loop sets it from the records its last pass read."""
    from types import SimpleNamespace

    from reconciler.ops.requests import placed

    cmd = ["bash", "-c", "make e2e"]
    refused = JobRecord(request=req(1, queue=True, owner_pid=42, cmd=cmd), phase=Phase.refused, ended=NOW - 5)
    fields = {"title": "x", "project": "proj-a", "owner_pid": 42, "cmd": cmd, "since": 1.0}
    assert "since" not in placed(SimpleNamespace(last_inputs=None), fields)
    engine = SimpleNamespace(last_inputs=(None, {"r-1": refused}, None, None, None))
    assert "since" not in placed(engine, fields)  # refused long before the clock's now: no place kept
    asked_now = JobRecord(request=req(1, queue=True, owner_pid=42, cmd=cmd), phase=Phase.queued)
    assert placed(SimpleNamespace(last_inputs=(None, {"r-1": asked_now}, None, None, None)), fields)["since"] == \
        asked_now.request.created
    assert "since" not in placed(engine, {**fields, "owner_pid": 43})
