"""The machine view (docs/watching.md) from an engine (the loop's: `build_view`), or without a loop from
state.db and the machine (`view_here`), and the history's cheap sample (`history_sample`). The view
itself is core/view.py's; what `res status` shows of it is ops/status.py's, called, not copied."""
from __future__ import annotations

import os
import time

from reconciler.config.paths import Paths
from reconciler.config.zone import zone_of
from reconciler.core.models import JobRecord
from reconciler.core.view import RES, Readings, Use, cheap_sample, job_key, local_jobs, machine_view, session_key
from reconciler.observed import usage
from reconciler.observed.cgroup import memory_dir, slice_cgroup, unit_cgroup
from reconciler.observed.machine import cpu_count

GIB = 1024**3


def read_usage(policy, manager_cgroup: str | None, records: dict[str, JobRecord], snap: dict,
               deep: bool = True, now: float | None = None) -> Readings:
    """The machine now. `manager_cgroup`: the user manager's ControlGroup (None: not known, then no
    unit's cgroup is read). `deep`: CPU times too, and the process trees of agent sessions not in a
    scope of their own (a walk of /proc); without it only /proc/meminfo and the cgroups' memory."""
    mem = usage.meminfo()
    busy = total = None
    if deep:
        busy, total = usage.cpu_times()
    use: dict[str, Use] = {}

    def cgroup_use(cg: str) -> Use | None:
        b = usage.cgroup_memory_bytes(cg)
        if b is None:
            return None
        return Use(gb=b / GIB, cpu_s=usage.cgroup_cpu_s(cg) if deep else None)

    if manager_cgroup is not None:
        for rec in local_jobs(records):
            if rec.unit:
                got = cgroup_use(unit_cgroup(manager_cgroup, policy.jobs_slice, rec.unit))
                if got is not None:
                    use[job_key(rec.id)] = got
    slice_cg = slice_cgroup(manager_cgroup, policy.agents_slice) if manager_cgroup is not None else None
    procs = None
    for s in (snap.get("world") or {}).get("sessions") or []:
        got = None
        if s.get("scope") and s.get("in_slice") and slice_cg is not None:
            got = cgroup_use(f"{slice_cg.rstrip('/')}/{s['scope']}")
        if got is None and deep:
            if procs is None:
                from reconciler.observed.procs import processes

                procs = processes()
            tree = usage.tree_usage(s["pid"], procs)
            got = Use(gb=tree[0] / GIB, cpu_s=tree[1]) if tree is not None else None
        if got is not None:
            use[session_key(s["pid"])] = got
    rss, cpu = usage.self_usage()
    use[RES] = Use(gb=rss / GIB, cpu_s=cpu if deep else None)
    return Readings(at=time.time() if now is None else now, total_gb=mem["total_gb"],
                    available_gb=mem["available_gb"], free_gb=mem["free_gb"], nproc=cpu_count(),
                    cpu_busy_s=busy, cpu_total_s=total, use=use)


def engine_manager_cgroup(engine) -> str | None:
    """The engine's user manager's ControlGroup, when its runtime is connected and has one."""
    side = engine.runtime.user_side() if engine.connected else None
    return side.manager_cgroup if side is not None else None


def guess_manager_cgroup(policy) -> str | None:
    """Without a connection to the manager: where its jobs slice is in the memory hierarchy, among a
    desktop's manager (`/user.slice/user-UID.slice/user@UID.service`) and a private one that owns the
    root; None if neither has it."""
    uid = os.getuid()
    for manager in (f"/user.slice/user-{uid}.slice/user@{uid}.service", ""):
        found = memory_dir(slice_cgroup(manager, policy.jobs_slice))
        if found is not None and found[0].is_dir():
            return manager
    return None


def build_view(engine, previous: Readings | None, actions: bool = False) -> tuple[dict, Readings]:
    """(the view, its readings) from the loop's engine: its store's records, the last pass's snapshot,
    its policy; `previous`: the readings of the view before (CPU use is the difference)."""
    from reconciler.ops.status import overview, read_status

    now = time.time()
    policy = engine.policy
    zone = zone_of(policy)
    records, snap, game, recent = read_status(engine.paths, now, engine.store)
    readings = read_usage(policy, engine_manager_cgroup(engine), records, snap, deep=True, now=now)
    status = overview(engine.paths, policy, records, snap, game, recent, now, zone).as_json()
    view = machine_view(readings, previous, records, snap, policy.rules(), game, zone, status=status,
                        loop={"pid": os.getpid(), "last_pass_at": engine.last_pass_at}, actions=actions)
    return view, readings


def history_sample(engine) -> dict:
    """The history's sample of now, cheaply: /proc/meminfo and the cgroups' memory, no walk of /proc,
    no status (the loop takes one at a pass while nobody watches)."""
    from reconciler.core.models import Game
    from reconciler.desired import lastgood

    now = time.time()
    policy = engine.policy
    zone = zone_of(policy)
    # What read_status reads, less the changes to show (file reads a sample does not need).
    store = engine.store
    records, snap, game = store.records(), store.get_meta_json("last_tick", {}), lastgood.game(store) or Game()
    readings = read_usage(policy, engine_manager_cgroup(engine), records, snap, deep=False, now=now)
    return cheap_sample(readings, records, snap, policy.rules(), game, zone)


def build_view_here(paths: Paths, policy, previous: Readings | None = None) -> tuple[dict, Readings]:
    """(the view, its readings) without a loop: state.db read-only, the machine read here; `"loop"`
    is null."""
    from reconciler.ops.status import overview, read_status

    now = time.time()
    zone = zone_of(policy)
    records, snap, game, recent = read_status(paths, now)
    readings = read_usage(policy, guess_manager_cgroup(policy), records, snap, deep=True, now=now)
    status = overview(paths, policy, records, snap, game, recent, now, zone).as_json()
    view = machine_view(readings, previous, records, snap, policy.rules(), game, zone, status=status, loop=None)
    return view, readings


def view_here(paths: Paths, policy, previous: Readings | None = None) -> dict:
    """The view without a loop (build_view_here's view alone)."""
    return build_view_here(paths, policy, previous)[0]
