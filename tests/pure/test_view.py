"""The machine view, pure (core/view.py): owners and the `you` clamp, CPU from two readings, the
memory block, locks, spend per session per local day, the timeline's outcomes, the marks, the
history's sample. Literal readings, records and snapshots; nothing read from this machine."""
from __future__ import annotations

import json

from reconciler.core.digest import DigestState
from reconciler.core.models import Game, JobRecord, Phase, Request
from reconciler.core.quantities import UTC
from reconciler.core.view import (Readings, Use, asking_session, busy_pct, cheap_sample, cpu_pct, local_date, locks,
                                  machine_view, marks, owners, sample, spend, timeline, timeline_outcome, view_sample)
from ruleset import rules

NOW = 1796256000.0  # 2026-12-03 00:00 UTC
RULES = rules(user_reserve_gb=4, game_reserve_gb=8)


def zone_plus_2h(ts: float) -> int:
    return 7200


def rec(n: int, phase=Phase.running, kind="job", title=None, by=None, lock=None, mem=1.0, started=NOW - 600,
        ended=None, rc=None, detail=None, why=None, spend=0.0, agent="none", created=None, project="proj-a") -> JobRecord:
    req = Request(id=f"r-{n}", kind=kind, title=title or f"job {n}", project=project, mem_gb=mem, est_s=1800,
                  created=created if created is not None else NOW - 900 + n, by=by, lock=lock, agent=agent)
    return JobRecord(request=req, phase=phase, unit=f"res-r-{n}.service", started=started if phase != Phase.queued else None,
                     ended=ended, rc=rc, detail=detail, why=why, updated=ended or NOW - 1,
                     digest=DigestState(spend_usd=spend) if spend else None)


def records(*recs: JobRecord) -> dict[str, JobRecord]:
    return {r.id: r for r in recs}


def readings(at=NOW, total=32.0, available=20.0, free=8.0, busy=None, cpu_total=None, **use) -> Readings:
    return Readings(at=at, total_gb=total, available_gb=available, free_gb=free, nproc=4, cpu_busy_s=busy,
                    cpu_total_s=cpu_total, use={k.replace("_", ":", 1).replace("_", "-"): v for k, v in use.items()})


def snap(sessions=(), jobs=None, budget=None, pressure=None) -> dict:
    return {"world": {"sessions": [{"pid": p, "in_slice": False} for p in sessions], "jobs": jobs or {},
                      "pressure_full_pct": pressure},
            "budget_mem_gb": budget}


def by_key(view_owners: list[dict]) -> dict[str, dict]:
    return {o["key"]: o for o in view_owners}


# ---------------------------------------------------------------- owners


def test_owners_are_sessions_jobs_you_and_res_biggest_first():
    now = readings(total=32.0, available=20.0,  # 12 GB used
                   session_4121=Use(gb=1.5), job_r_4=Use(gb=7.0), res=Use(gb=0.05))
    rs = records(rec(4, by="res pid 812 < bash pid 811 < claude pid 4121", title="dotnet e2e"), rec(5, phase=Phase.queued))
    got = owners(now, None, rs, snap(sessions=[4121]), UTC)
    assert [o["key"] for o in got] == ["job:r-4", "you", "session:4121", "res"]
    o = by_key(got)
    assert o["job:r-4"]["label"] == 'r-4 "dotnet e2e"' and o["job:r-4"]["project"] == "proj-a"
    assert o["job:r-4"]["session"] == "session:4121"  # the session that asked, from the process chain
    assert o["session:4121"]["jobs"] == ["r-4"] and o["session:4121"]["label"] == "claude pid 4121"
    assert o["you"]["gb"] == round(12.0 - 1.5 - 7.0 - 0.05, 3)
    assert "job:r-5" not in o  # queued: holds nothing yet


def test_a_session_holds_its_notes_by_their_owner_and_its_jobs_by_who_asked():
    note = rec(6, kind="note", mem=4.0, by="res pid 900 < bash pid 899")  # `by` names no session ...
    note.request.owner_pid = 4121  # ... but the note ends with session 4121: it is that session's
    other = rec(7, kind="note", mem=2.0)
    other.request.owner_pid = 5555  # a person's shell, not a session
    ended = rec(8, kind="note", mem=3.0, phase=Phase.done, ended=NOW - 5)
    ended.request.owner_pid = 4121
    job = rec(4, by="claude pid 4121")
    got = by_key(owners(readings(session_4121=Use(gb=1.0)), None, records(note, other, ended, job), snap(sessions=[4121]), UTC))
    s = got["session:4121"]
    assert (s["jobs"], s["notes"], s["noted_gb"]) == (["r-4"], ["r-6"], 4.0)


def test_you_is_never_below_zero():
    now = readings(total=32.0, available=28.0, job_r_1=Use(gb=6.0), res=Use(gb=0.1))  # 4 GB used, 6 GB counted
    assert by_key(owners(now, None, records(rec(1)), snap(), UTC))["you"]["gb"] == 0.0


def test_a_job_without_a_reading_takes_the_last_pass_figure():
    got = by_key(owners(readings(), None, records(rec(1)), snap(jobs={"r-1": {"mem_used_gb": 2.5}}), UTC))
    assert got["job:r-1"]["gb"] == 2.5


def test_a_cluster_job_is_no_owner_here():
    r = rec(1)
    r.where = "cluster"
    assert "job:r-1" not in by_key(owners(readings(), None, records(r), snap(), UTC))


def test_asking_session_only_names_a_session_that_runs():
    assert asking_session("claude pid 4121", {4121}) == 4121
    assert asking_session("res pid 812 < claude pid 4121", {999}) is None
    assert asking_session(None, {4121}) is None
    assert asking_session("a person", {4121}) is None


# ---------------------------------------------------------------- CPU


def test_cpu_is_the_difference_of_two_readings_in_percent_of_one_core():
    before = readings(at=NOW, busy=100.0, cpu_total=400.0, job_r_1=Use(gb=1, cpu_s=10.0), res=Use(gb=0.1, cpu_s=1.0))
    now = readings(at=NOW + 2, busy=104.0, cpu_total=408.0, job_r_1=Use(gb=1, cpu_s=13.0), res=Use(gb=0.1, cpu_s=1.1))
    assert cpu_pct(now, before, "job:r-1") == 150.0  # 3 s in 2 s
    assert busy_pct(now, before) == 50.0  # 4 of 8 CPU-seconds
    o = by_key(owners(now, before, records(rec(1)), snap(), UTC))
    assert o["job:r-1"]["cpu_pct"] == 150.0 and o["res"]["cpu_pct"] == 5.0
    assert o["you"]["cpu_pct"] == 50.0 * 4 - 150.0 - 5.0  # the machine's busy cores less the others'


def test_cpu_is_null_on_the_first_view_and_never_negative():
    now = readings(busy=100.0, cpu_total=400.0, job_r_1=Use(gb=1, cpu_s=5.0))
    assert cpu_pct(now, None, "job:r-1") is None and busy_pct(now, None) is None
    restarted = readings(at=NOW - 2, job_r_1=Use(gb=1, cpu_s=9.0))  # a unit restarted: its counter went back
    assert cpu_pct(readings(at=NOW, job_r_1=Use(gb=1, cpu_s=1.0)), restarted, "job:r-1") == 0.0
    others_busy = readings(at=NOW + 1, busy=100.5, cpu_total=404.0, job_r_1=Use(gb=1, cpu_s=7.0))
    assert by_key(owners(others_busy, now, records(rec(1)), snap(), UTC))["you"]["cpu_pct"] == 0.0


# ---------------------------------------------------------------- memory, locks, spend


def test_memory_block_cache_budget_and_the_reserve_in_force():
    v = machine_view(readings(available=20.0, free=8.0), None, {}, snap(budget=9.5, pressure=1.5), RULES, Game(), UTC)
    m = v["memory"]
    assert (m["cache_gb"], m["agents_budget_gb"], m["reserve_gb"], m["pressure_full_pct"]) == (12.0, 9.5, 4, 1.5)
    game = machine_view(readings(), None, {}, snap(), RULES, Game(on=True, until=NOW + 60), UTC)["memory"]
    assert game["reserve_gb"] == 8 and game["agents_budget_gb"] is None
    odd = machine_view(readings(available=5.0, free=6.0), None, {}, snap(), RULES, Game(), UTC)["memory"]
    assert odd["cache_gb"] == 0.0  # never below 0
    assert v["v"] == 1 and v["loop"] is None and v["cpu"] == {"nproc": 4, "busy_pct": None}
    json.dumps(v)  # JSON-ready as it is


def test_locks_name_holder_until_and_waiters_in_order():
    rs = records(rec(1, lock="e2e@/home/me/proj-a"), rec(3, phase=Phase.queued, lock="e2e@/home/me/proj-a"),
                 rec(2, phase=Phase.queued, lock="e2e@/home/me/proj-a"), rec(4, phase=Phase.queued, lock="db"))
    assert locks(rs) == [{"lock": "e2e@proj-a", "key": "e2e@/home/me/proj-a", "holder": "r-1",
                          "until": NOW - 600 + 1800, "waiting": ["r-2", "r-3"]}]


def test_spend_per_session_per_local_day():
    rs = records(rec(1, agent="claude", phase=Phase.done, ended=NOW - 3600, spend=0.5, title="fix bug"),  # 23:00 UTC, 01:00 +2h
                 rec(2, agent="claude", phase=Phase.done, ended=NOW - 4 * 3600, spend=0.25),  # 20:00 / 22:00 the day before
                 rec(3, agent="claude", started=NOW - 60, spend=0.1),  # running (since yesterday): today so far
                 rec(4, phase=Phase.done, ended=NOW - 60),  # a plain job spends nothing
                 rec(5, agent="claude", phase=Phase.done, ended=NOW - 60))  # spent nothing: no row
    assert [(r["day"], r["id"], r["usd"]) for r in spend(rs, NOW, UTC)] == [
        ("2026-12-03", "r-3", 0.1), ("2026-12-02", "r-1", 0.5), ("2026-12-02", "r-2", 0.25)]
    assert [(r["day"], r["id"]) for r in spend(rs, NOW, zone_plus_2h)] == [
        ("2026-12-03", "r-1"), ("2026-12-03", "r-3"), ("2026-12-02", "r-2")]
    assert spend(rs, NOW, UTC)[1]["session"] == 'r-1 "fix bug"'


def test_a_session_owner_spends_what_it_asked_for_today():
    rs = records(rec(1, agent="claude", by="claude pid 7", phase=Phase.done, ended=NOW + 60, spend=0.5),
                 rec(2, agent="claude", by="claude pid 7", phase=Phase.done, ended=NOW - 60, spend=0.25),  # yesterday
                 rec(3, agent="claude", by="claude pid 7", started=NOW, spend=0.125))
    o = by_key(owners(readings(at=NOW + 120), None, rs, snap(sessions=[7]), UTC))["session:7"]
    assert o["spend_today_usd"] == 0.625 and o["jobs"] == ["r-3"]


def test_local_date_across_years_and_leap_days():
    assert local_date(0, UTC) == "1970-01-01"
    assert local_date(951782400, UTC) == "2000-02-29"
    assert local_date(1798761599, UTC) == "2026-12-31" and local_date(1798761599, zone_plus_2h) == "2027-01-01"


# ---------------------------------------------------------------- timeline and marks


def test_timeline_outcomes_are_the_documented_codes():
    cases = {
        "queued": rec(1, phase=Phase.queued),
        "running": rec(2),
        "done": rec(3, phase=Phase.done, ended=NOW - 5, rc=0, detail={"code": "exited"}),
        "failed": rec(4, phase=Phase.done, ended=NOW - 5, rc=1, detail={"code": "exited"}),
        "oom": rec(5, phase=Phase.done, ended=NOW - 5, rc=137, detail={"code": "memory_limit"}),
        "budget": rec(6, phase=Phase.done, ended=NOW - 5, detail={"code": "budget"}),
        "refused": rec(7, phase=Phase.refused, ended=NOW - 5, detail={"code": "busy"}),
        "cancelled": rec(8, phase=Phase.cancelled, ended=NOW - 5),
    }
    assert {name: timeline_outcome(r) for name, r in cases.items()} == {name: name for name in cases}
    assert timeline_outcome(rec(9, phase=Phase.done, ended=NOW, detail={"code": "lost"})) == "failed"
    assert timeline_outcome(rec(10, kind="note", phase=Phase.done, ended=NOW, detail={"code": "owner_gone"})) == "done"
    old = rec(11, phase=Phase.done, ended=NOW - 3, why="killed at its memory limit (128 MB)")  # before codes: read off why
    assert timeline_outcome(old) == "oom"


def test_timeline_keeps_live_entries_and_the_last_day_of_finished_ones():
    rs = records(rec(1, phase=Phase.done, ended=NOW - 2 * 86400, rc=0), rec(2, phase=Phase.done, ended=NOW - 60, rc=0),
                 rec(3), rec(4, phase=Phase.queued, created=NOW - 5 * 86400))
    rows = timeline(rs, NOW)
    assert [r["id"] for r in rows] == ["r-4", "r-2", "r-3"]  # by when queued
    assert rows[1] == {"id": "r-2", "kind": "job", "title": "job 2", "queued": NOW - 898, "started": NOW - 600,
                       "ended": NOW - 60, "outcome": "done"}
    assert rows[2]["ended"] is None and rows[2]["outcome"] == "running"


def test_marks_are_oom_kills_budget_stops_and_refusals():
    rs = records(rec(1, phase=Phase.done, ended=NOW - 30, rc=137, detail={"code": "memory_limit"}, mem=0.5),
                 rec(2, phase=Phase.done, ended=NOW - 20, detail={"code": "budget"}, why="budget: cost $1.20 > $1.00"),
                 rec(3, phase=Phase.refused, ended=NOW - 10, detail={"code": "busy"}, why="busy: 2 GB free"),
                 rec(4, phase=Phase.done, ended=NOW - 5, rc=1, detail={"code": "exited"}),  # a failure is no mark
                 rec(5, phase=Phase.done, ended=NOW - 3 * 86400, detail={"code": "memory_limit"}))  # too old
    got = marks(rs, NOW)
    assert [(m["kind"], m["id"], m["at"]) for m in got] == [("oom", "r-1", NOW - 30), ("budget", "r-2", NOW - 20),
                                                            ("refused", "r-3", NOW - 10)]
    assert got[0]["line"] == "r-1 killed at its memory limit (0.5 GB)"
    assert got[1]["line"] == "r-2 stopped over its budget: budget: cost $1.20 > $1.00"
    assert got[2]["line"] == "r-3 refused: busy: 2 GB free"


# ---------------------------------------------------------------- the history's sample


def test_the_sample_sums_owners_by_kind():
    now = readings(total=32.0, available=20.0, free=8.0, session_7=Use(gb=1.0), session_8=Use(gb=0.5),
                   job_r_1=Use(gb=3.0), res=Use(gb=0.25))
    v = machine_view(now, None, records(rec(1)), snap(sessions=[7, 8], budget=6.0), RULES, Game(), UTC)
    s = view_sample(v)
    assert s == {"t": NOW, "gb": {"sessions": 1.5, "jobs": 3.0, "you": 7.25, "res": 0.25, "cache": 12.0},
                 "budget": 6.0, "reserve": 4}
    assert cheap_sample(now, records(rec(1)), snap(sessions=[7, 8], budget=6.0), RULES, Game(), UTC) == s


def test_a_job_says_its_book_its_cap_and_where_the_book_came_from():
    booked, capped = rec(1, mem=3.5), rec(2, mem=1.0)
    booked.request.book_gb, booked.request.booked_from = 2.2, "5 runs of make e2e"
    o = by_key(owners(readings(job_r_1=Use(gb=2.0), job_r_2=Use(gb=0.5)), None, records(booked, capped), snap(), UTC))
    assert (o["job:r-1"]["book_gb"], o["job:r-1"]["cap_gb"], o["job:r-1"]["booked_from"]) == (2.2, 3.5, "5 runs of make e2e")
    assert (o["job:r-2"]["book_gb"], o["job:r-2"]["cap_gb"], o["job:r-2"]["booked_from"]) == (1.0, 1.0, "its cap (no history yet)")


def test_res_own_stops_are_marks_of_their_own_not_oom_kills():
    stopped = rec(1, phase=Phase.done, ended=NOW - 5, rc=0, detail={"code": "exited"})
    stopped.evictions = [{"at": NOW - 40, "used_gb": 2.9, "book_gb": 2.2, "to_gb": 3.0}]
    process = [{"at": NOW - 20, "pid": 4242, "name": "node", "gb": 3.1, "session": 4121}]
    got = marks(records(stopped), NOW, process)
    assert [(m["kind"], m["id"], m["at"]) for m in got] == [("evicted", "r-1", NOW - 40), ("evicted", "pid-4242", NOW - 20)]
    assert got[0]["line"] == "r-1 stopped by res above its book (2.90 GB used, 2.20 GB booked), run again"
    assert got[1]["line"] == "node pid 4242 of agent session pid 4121 stopped by res (3.1 GB outside any job)"


def test_a_service_a_job_started_outside_res_counts_as_its_projects_not_yours():
    """issue 40 item 7 (docs/escaping.md): `systemd-run --user` from inside a job makes a service in
    app.slice, outside every budget; the view counts its memory as the job's project's."""
    now = readings(total=32.0, available=20.0, job_r_4=Use(gb=1.0), res=Use(gb=0.05))  # 12 GB used
    s = snap()
    s["world"].update({"stray_services": ["run-u7.service", "run-u9.service"],
                       "stray_from": {"run-u7.service": "r-4"},
                       "stray_mem_gb": {"run-u7.service": 6.0, "run-u9.service": 0.5}})
    got = by_key(owners(now, None, records(rec(4, project="proj-b")), s, UTC))
    esc = got["stray:run-u7.service"]
    assert esc["kind"] == "escaped" and esc["project"] == "proj-b" and esc["job"] == "r-4" and esc["gb"] == 6.0
    assert esc["label"] == "run-u7.service (escaped from r-4)"
    # one nobody marked (the owner's own `systemd-run --user`, or a program that ran the real one by
    # its path): res cannot tell whose it is, so it stays the owner's programs' (docs/escaping.md)
    assert "stray:run-u9.service" not in got
    assert got["you"]["gb"] == round(12.0 - 1.0 - 6.0 - 0.05, 3)  # the escaped one never the owner's
    view_owners = owners(now, None, records(rec(4, project="proj-b")), s, UTC)
    assert sample(NOW, view_owners, {"cache_gb": 1.0, "agents_budget_gb": 5.0, "reserve_gb": 6.0})["gb"]["jobs"] == 7.0
    from reconciler.render.top import owner_rows

    rows = owner_rows({"owners": view_owners})
    labels = [r.label for r in rows]
    i = next(i for i, t in enumerate(labels) if "r-4" in t and "escaped" not in t)
    assert "proj-b · run-u7.service (escaped from r-4)" in labels[i + 1], labels  # beside its project's job
