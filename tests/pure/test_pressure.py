"""Pure tier: memory pressure (issue 25 item 4, DESIGN §5.9): the PSI reader, admission under pressure
(nothing new starts, nothing running stops), its words, and the trigger line the loop arms."""
from __future__ import annotations

from dataclasses import replace

import pytest

from reconciler.core.capacity import PRESSURE_WINDOW_S, capacity, pressure_of
from reconciler.core.models import Desired, Game, JobObs, JobRecord, Phase, Request, World
from reconciler.core.plan import plan as decide
from reconciler.core.quantities import UTC
from reconciler.core.wake import next_pass_at
from reconciler.loop.events import TRIGGER_WINDOW_US, trigger_line
from reconciler.observed import pressure
from reconciler.render.reasons import explain
from reconciler.render.status import pressure_line
from ruleset import rules

NOW = 1_780_000_000.0

POLICY = rules(
    user_reserve_gb=6, user_reserve_cpus=4, game_reserve_gb=12, game_reserve_cpus=8, small_headroom_gb=2,
    max_starts_per_tick=4, max_concurrent_sessions=3, max_cost_usd=0, max_duration=0, max_iterations=0,
    daily_cost_usd=0, pressure_full_pct=10.0, agents_slice="agents.slice", tick_s=2.0, sweep_s=5.0,
)

# /proc/pressure/memory as kernel 6.18 writes it (this machine, 2026-12-02); a cgroup2 directory's
# memory.pressure has the same two lines (Documentation/accounting/psi.rst, "Cgroup2 interface").
PROC_TEXT = ("some avg10=31.52 avg60=12.04 avg300=2.90 total=61807390\n"
             "full avg10=25.00 avg60=9.87 avg300=2.10 total=44010288\n")
QUIET = ("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
         "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")

HYBRID = ("31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
          "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
          "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
          "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n")
UNIFIED = "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
V1_ONLY = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"


def req(n, mem=1.0, cpus=1, est=600, queue=False, kind="job", **kw):
    return Request(id=f"r-{n}", kind=kind, title=f"job {n}", project="proj-a", mem_gb=mem, cpus=cpus, est_s=est,
                   created=NOW - 100 + n, queue=queue, cmd=["make"] if kind == "job" else [], **kw)


def world(system=None, slice_=None, avail=30.0, jobs=None, pids=()):
    return World(mem_total_gb=32.0, mem_available_gb=avail, nproc=16, jobs=jobs or {}, live_pids=list(pids),
                 pressure_full_pct=system, slice_pressure_full_pct=slice_)


def run(requests, records=(), w=None, policy=POLICY):
    requests = sorted(list(requests) + [r.request for r in records if r.request not in requests],
                      key=lambda r: r.number)
    return explain(decide(Desired(requests=requests, game=Game()), {r.id: r for r in records}, w or world(), NOW,
                          policy), UTC)


def kinds(p):
    return [(a.kind, a.id) for a in p.actions]


def running(n, **kw):
    return JobRecord(request=req(n, **kw), phase=Phase.running, started=NOW - 300, unit=f"res-r-{n}.service")


def queued(n, **kw):
    return JobRecord(request=req(n, queue=True, **kw), phase=Phase.queued)


# ---------------------------------------------------------------- the reader


def test_full_avg10_is_read_from_the_kernels_format():
    assert pressure.parse_full_avg10(PROC_TEXT) == 25.0
    assert pressure.parse_full_avg10(QUIET) == 0.0
    assert pressure.parse_full_avg10(PROC_TEXT.replace("25.00", "12.34")) == 12.34


@pytest.mark.parametrize("text", [
    None, "", "some avg10=3.00 avg60=0.00 avg300=0.00 total=9\n",  # no `full` line (as cpu before 5.13)
    "full avg10=x avg60=0.00 avg300=0.00 total=1\n", "full avg60=1.00 total=1\n", "full avg10=101.00\n",
    "full avg10=-1\n", "full avg10=nan\n", "\0\0\0",
])
def test_anything_else_is_not_observed(text):
    assert pressure.parse_full_avg10(text) is None


def test_a_file_is_read_and_a_missing_one_is_not_observed(tmp_path):
    f = tmp_path / "memory.pressure"
    f.write_text(PROC_TEXT)
    assert pressure.read_full_avg10(str(f)) == 25.0
    assert pressure.read_full_avg10(str(tmp_path / "none")) is None
    assert pressure.read_full_avg10(None) is None


def test_a_file_that_is_not_a_psi_file_is_not_observed_and_never_blocks_the_read(tmp_path):
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nobody writes to it: read at once, nothing there
    assert pressure.read_full_avg10(str(fifo)) is None
    assert pressure.read_full_avg10("/dev/zero") is None
    assert pressure.read_full_avg10(str(tmp_path)) is None  # a directory


def test_the_files_can_be_pointed_elsewhere(monkeypatch, tmp_path):
    monkeypatch.delenv(pressure.SYSTEM_ENV, raising=False)
    monkeypatch.delenv(pressure.SLICE_ENV, raising=False)
    assert pressure.system_file() == "/proc/pressure/memory"
    system, slice_ = tmp_path / "system", tmp_path / "slice"
    system.write_text(PROC_TEXT)
    slice_.write_text(QUIET.replace("full avg10=0.00", "full avg10=40.50"))
    monkeypatch.setenv(pressure.SYSTEM_ENV, str(system))
    monkeypatch.setenv(pressure.SLICE_ENV, str(slice_))
    assert pressure.system_full_pct() == 25.0
    assert pressure.slice_full_pct("/whatever.slice") == 40.5
    assert not pressure.is_kernel_file(str(system))
    assert pressure.is_kernel_file("/proc/pressure/memory")


def test_the_slices_file_is_in_the_unified_hierarchy_whatever_holds_the_memory_controller():
    hybrid = pressure.unified_root(HYBRID)
    assert hybrid == ("/sys/fs/cgroup/unified", "/")
    assert pressure.cgroup_file("/agents.slice", hybrid) == "/sys/fs/cgroup/unified/agents.slice/memory.pressure"
    v2 = pressure.unified_root(UNIFIED)
    desktop = "/user.slice/user-1000.slice/user@1000.service/agents.slice"
    assert pressure.cgroup_file(desktop, v2) == f"/sys/fs/cgroup{desktop}/memory.pressure"
    # a container whose cgroup2 mount's top is its own cgroup
    inner = ("/sys/fs/cgroup", "/user.slice/user-1000.slice")
    assert pressure.cgroup_file("/user.slice/user-1000.slice/agents.slice", inner) == \
        "/sys/fs/cgroup/agents.slice/memory.pressure"
    assert pressure.unified_root(V1_ONLY) is None
    assert pressure.cgroup_file("/agents.slice", None) is None


# ---------------------------------------------------------------- admission


def test_pressure_over_the_threshold_holds_back_whichever_is_higher():
    assert pressure_of(POLICY, world(system=25.0)) == {"pct": 25.0, "kind": "full", "window_s": PRESSURE_WINDOW_S,
                                                       "limit": 10.0, "where": "system"}
    p = pressure_of(POLICY, world(system=12.0, slice_=40.5))
    assert (p["pct"], p["where"], p["slice"]) == (40.5, "slice", "agents.slice")
    assert pressure_of(POLICY, world(system=12.0, slice_=3.0))["where"] == "system"


@pytest.mark.parametrize("system, slice_", [(None, None), (9.99, None), (10.0, 10.0), (0.0, 0.0), (None, 5.0)])
def test_pressure_at_or_under_the_threshold_or_not_observed_blocks_nothing(system, slice_):
    assert pressure_of(POLICY, world(system=system, slice_=slice_)) is None
    assert capacity(POLICY, Game(), world(system=system, slice_=slice_), [], NOW).fits(req(1))


def test_zero_ignores_pressure():
    # (A policy without the key, once read as 0, is no longer made: Rules, like Policy, needs every key.)
    off = replace(POLICY, pressure_full_pct=0)
    assert pressure_of(off, world(system=99.0, slice_=99.0)) is None
    assert kinds(run([req(1)], w=world(system=99.0), policy=off)) == [("start", "r-1")]


def test_under_pressure_nothing_new_fits_even_what_the_ledger_has_room_for():
    cap = capacity(POLICY, Game(), world(system=25.0), [], NOW)
    assert cap.mem_gb == pytest.approx(22.0)  # the ledger is untouched: 30 − 6 − 2
    assert not cap.fits(req(1, mem=0.1, cpus=0.1))
    assert not cap.fits(req(1, mem=0.1, force=True))  # --force passes the ledger, never the pressure
    assert not cap.never_fits(req(1, mem=20.0))
    assert cap.never_fits(req(1, mem=25.0))  # what can never fit is said so, pressure or not


def test_a_request_without_queue_is_refused_with_the_pressure_line():
    p = run([req(1)], w=world(system=25.0))
    assert kinds(p) == [("refuse", "r-1")]
    d = p.actions[0].detail
    assert (d["code"], d["resource"], d["short"], d["retry"]) == ("busy", "pressure", ["pressure"], "soon")
    assert d["pressure"] == {"pct": 25.0, "kind": "full", "window_s": 10, "limit": 10.0, "where": "system"}


def test_the_slices_own_pressure_is_named_as_such():
    p = run([req(1)], w=world(system=0.5, slice_=12.34))
    assert p.actions[0].detail["pressure"] == {"pct": 12.34, "kind": "full", "window_s": 10, "limit": 10.0,
                                               "where": "slice", "slice": "agents.slice"}


def test_force_and_notes_are_held_back_too():
    p = run([req(1, force=True), req(2, kind="note", owner_pid=42)], w=world(system=25.0, pids=[42]))
    assert kinds(p) == [("refuse", "r-1"), ("refuse", "r-2")]
    assert (p.actions[0].detail["force"], p.actions[0].detail["retry"]) == ("pressure", "soon")
    assert p.actions[1].detail["resource"] == "pressure"


def test_what_can_never_fit_is_refused_as_never_not_as_busy():
    p = run([req(1, mem=25.0)], w=world(system=25.0))
    assert p.actions[0].detail["code"] == "never_fits" and p.actions[0].never


def test_a_queued_job_waits_with_the_reason_and_no_start_estimate():
    p = run([req(1, queue=True), req(2, queue=True)], records=[queued(1), queued(2)], w=world(system=25.0))
    assert kinds(p) == [("wait", "r-1"), ("wait", "r-2")]
    head, behind = (a.detail for a in p.actions)
    assert head["waits_for"] == "pressure" and head["est_start"] is None
    assert behind["waits_for"] == "queue_head" and behind["est_start"] is None
    assert (head["position"], head["pressure"]["pct"], behind["position"], behind["head"]) == (1, 25.0, 2, "r-1")


def test_a_running_job_is_never_stopped_for_pressure():
    job = running(1, mem=4.0)
    w = world(system=95.0, slice_=95.0, jobs={"r-1": JobObs(state="active", mem_used_gb=3.9)})
    assert kinds(run([], records=[job], w=w)) == []


def test_nothing_jumps_the_queue_under_pressure():
    # r-1 waits for memory held by r-9 (ends in 5 min); r-2 would backfill (ends before then) without pressure
    hog = JobRecord(request=req(9, mem=20.0, est=300), phase=Phase.running, started=NOW, unit="res-r-9.service")
    w = lambda pct: world(system=pct, jobs={"r-9": JobObs(state="active", mem_used_gb=20.0)}, avail=12.0)  # noqa: E731
    entries = [req(1, mem=8.0, queue=True), req(2, mem=1.0, est=60, queue=True)]
    records = [hog, queued(1, mem=8.0), queued(2, mem=1.0, est=60)]
    assert kinds(run(entries, records=records, w=w(0.0))) == [("wait", "r-1"), ("start", "r-2")]
    assert kinds(run(entries, records=records, w=w(25.0))) == [("wait", "r-1"), ("wait", "r-2")]


def test_when_the_pressure_falls_the_queued_job_starts_and_a_waiting_one_is_looked_at_every_tick():
    rec = queued(1)
    assert kinds(run([rec.request], records=[rec], w=world(system=25.0))) == [("wait", "r-1")]
    # the PSI trigger tells only of rising pressure: the fall is seen by the pass every tick_s that an
    # entry waiting for room asks for (core/wake.py)
    assert next_pass_at(Desired(requests=[rec.request]), {rec.id: rec}, NOW, POLICY, 86400.0) == NOW + POLICY.tick_s
    assert kinds(run([rec.request], records=[rec], w=world(system=3.0))) == [("start", "r-1")]


# ---------------------------------------------------------------- the words


def test_status_says_it_while_it_holds_back_new_work():
    assert pressure_line(world(system=25.0), POLICY) == (
        "memory pressure 25 % (full, 10 s) is over pressure_full_pct (10 %): nothing new starts until it falls; "
        "running jobs go on")
    assert pressure_line(world(system=2.0), POLICY) is None
    assert pressure_line(world(), POLICY) is None
    assert pressure_line(None, POLICY) is None


# ---------------------------------------------------------------- the trigger the loop arms


def test_the_trigger_line_is_the_threshold_over_a_ten_second_window():
    assert TRIGGER_WINDOW_US == 10_000_000 and TRIGGER_WINDOW_US % 2_000_000 == 0  # unprivileged: multiples of 2 s
    assert trigger_line(10.0) == b"full 1000000 10000000\0"
    assert trigger_line(2.5) == b"full 250000 10000000\0"
    assert trigger_line(100.0) == b"full 10000000 10000000\0"  # never more than the window
    assert trigger_line(0.000001) == b"full 1 10000000\0"  # never 0 (the kernel refuses 0)


def test_with_overflow_to_the_cluster_what_pressure_holds_back_here_goes_there():
    """DESIGN §6b: a local request that cannot start here now goes to the cluster when the policy says
    so; pressure here is such a reason. The cluster's own pressure is Slurm's business."""
    policy = replace(POLICY, overflow="cluster")
    w = world(system=25.0)
    w.cluster_ok = True
    p = run([req(1, queue=True), req(2, on="local")], w=w, policy=policy)
    assert kinds(p) == [("start", "r-1"), ("refuse", "r-2")]
    assert p.actions[0].detail["code"] == "submit" and p.actions[0].detail["overflow"] is True
    assert p.actions[1].detail["resource"] == "pressure"  # asked for here only: held back
