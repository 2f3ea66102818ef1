"""The World a pass reads (DESIGN §2 step 3), assembled from the machine's readings (observed/) and
the runtime's answers: memory, memory pressure, CPUs, note owners, and jobs via the runtime; the
user's side (the agents slice, sessions, /tmp, stray transient services)."""
from __future__ import annotations

import os

from reconciler.config.paths import loop_unit_stem
from reconciler.core.models import LIVE, JobRecord, Phase, World
from reconciler.observed.machine import (GIB_KB, cpu_count, gone_holders, meminfo, stray_units,
                                         tmp_tmpfs_used_gb, unit_of_cgroup)
from reconciler.runtime import Runtime, RuntimeUnavailable


def _is_file(path) -> bool:
    """A regular file (not a symlink someone planted) is there."""
    import stat

    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


async def observe_world(runtime: Runtime | None, records: dict[str, JobRecord], paths=None,
                        unknown: list[str] | None = None, cluster: Runtime | None = None,
                        ask_cluster: bool = False, peaks: dict[str, float] | None = None) -> World:
    """`unknown`: queue entries state.db has no record of; their units and logs are looked for too
    (after state.db was lost, they say which of them ran before). `cluster`: the cluster's runtime, asked when
    a cluster job is live or `ask_cluster` (a cluster request waits to be decided). `peaks`: the most each
    booking in place was seen using so far (the caller's, kept from pass to pass; updated here)."""
    import socket

    from reconciler.observed import pressure
    from reconciler.observed.procs import alive, in_place_use

    total, available = meminfo()
    notes = [r for r in records.values() if r.request.kind == "note" and r.phase == Phase.running and r.request.owner_pid]
    owners = {r.request.owner_pid for r in notes}
    world = World(mem_total_gb=round(total, 3), mem_available_gb=round(available, 3), nproc=cpu_count(),
                  live_pids=sorted(p for p in owners if alive(p)),
                  gone_holders=gone_holders({r.attached_by for r in records.values()
                                             if r.phase in LIVE and r.attached_by}, socket.gethostname()))
    in_place = {r.id: (r.request.owner_pid, r.request.created) for r in notes if r.request.in_place}
    if in_place:  # read right after MemAvailable: the two describe the same moment
        world.note_use_gb = {i: round(gb, 4) for i, gb in in_place_use(in_place).items()}
    if peaks is not None:
        for i in [i for i in peaks if i not in in_place]:
            del peaks[i]  # ended: its peak went into its record
        for i, gb in world.note_use_gb.items():
            peaks[i] = max(peaks.get(i, 0.0), gb)
        world.note_peak_gb = {i: peaks[i] for i in in_place}
    # (the agents slice's: observe_user_side)
    world.pressure_full_pct, world.pressure_full_avg60_pct = pressure.system_full()
    live = [r for r in records.values() if r.phase in LIVE and r.request.kind == "job"]
    wanted = [r.id for r in live if r.where != "cluster"]
    remote = [r.id for r in live if r.where == "cluster"]
    if paths is not None and unknown:
        world.ran_before = sorted(i for i in unknown if _is_file(paths.log(i)))
    if runtime is None:
        world.ok, world.errors = False, ["no runtime connected"]
        return world
    try:
        world.jobs = await runtime.observe(wanted + [i for i in world.ran_before if i not in wanted])
    except RuntimeUnavailable as e:
        world.ok, world.errors = False, [str(e)]
    if remote or (ask_cluster and cluster is not None):
        await _observe_cluster(world, cluster, remote)
    if paths is not None:
        for job_id in wanted + remote:  # how much each running job has written: the log size limit
            obs = world.jobs.get(job_id)
            if obs is not None:
                try:
                    obs.log_bytes = os.lstat(paths.log(job_id, records[job_id].log_dir)).st_size
                except OSError:
                    pass
    return world


async def _observe_cluster(world: World, cluster: Runtime | None, remote: list[str]) -> None:
    """The cluster's jobs into `world`; when it cannot be asked, its jobs are `unobserved` (nothing is
    decided for them) and local work goes on."""
    if cluster is None:
        world.cluster_ok, world.cluster_error, world.unobserved = False, "no cluster runtime", list(remote)
        return
    try:
        seen = await cluster.observe(remote)
    except RuntimeUnavailable as e:
        world.cluster_ok, world.cluster_error, world.unobserved = False, str(e), list(remote)
        return
    world.cluster_ok = True
    for job_id, obs in seen.items():
        if job_id in remote or job_id not in world.jobs:
            world.jobs[job_id] = obs


# ---------------------------------------------------------------- the user's side (DESIGN §5.6)


async def observe_user_side(runtime, world: World, policy) -> list[str]:
    """The agents slice, the agent sessions, /tmp and stray transient services, into `world`. What
    cannot be observed stays None, and nothing is then changed for it; returns what went wrong."""
    from reconciler.observed import cgroup, pressure
    from reconciler.core.models import SessionObs, SliceObs
    from reconciler.core.agents import is_session
    from reconciler.observed.procs import cgroup_of, descendants, inside_session, processes
    from reconciler.core.sessions import movable_from

    world.tmp_tmpfs_used_gb = tmp_tmpfs_used_gb()
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    strays = []
    if runtime_dir:
        strays = stray_units(os.path.join(runtime_dir, "systemd", "transient"), (policy.agents_slice, policy.jobs_slice),
                             loop_unit_stem(policy.unit_prefix))
        world.stray_services = [name for name, _, _ in strays]
        world.stray_from = {name: job for name, _, job in strays if job is not None}
    side = runtime.user_side() if runtime is not None else None
    if side is not None:  # what each holds (docs/escaping.md: counted as its job's project's in the view)
        for name, slice_name, _ in strays:
            used = cgroup.memory_used_bytes(cgroup.unit_cgroup(side.manager_cgroup, slice_name, name))
            if used is not None:
                world.stray_mem_gb[name] = round(used / GIB_KB / 1024, 4)
    slice_cg = cgroup.slice_cgroup(side.manager_cgroup, policy.agents_slice) if side is not None else None
    # The agents slice's own memory pressure (DESIGN §5.9): its memory.pressure in the unified
    # hierarchy (RES_SLICE_PRESSURE_FILE replaces it), read before anything that can fail.
    if slice_cg is not None or os.environ.get(pressure.SLICE_ENV):
        world.slice_pressure_full_pct, world.slice_pressure_full_avg60_pct = pressure.slice_full(slice_cg or "")
    if side is None:
        return []
    try:
        props = await side.unit_properties(policy.agents_slice, "Slice")
    except Exception as e:  # noqa: BLE001 - unobserved: nothing is set this pass
        return [f"could not observe the agents slice {policy.agents_slice}: {' '.join(str(e).split())}"]
    used = cgroup.memory_used_bytes(slice_cg) or 0
    cache = cgroup.memory_file_cache_bytes(slice_cg) or 0
    world.agents_slice = SliceObs(name=policy.agents_slice, cpu_weight=props.get("CPUWeight"),
                                  io_weight=props.get("IOWeight"), memory_high=props.get("MemoryHigh"),
                                  mem_used_gb=round(used / GIB_KB / 1024, 3), mem_file_gb=round(cache / GIB_KB / 1024, 3))

    me = os.getuid()
    procs = processes()
    sessions = []
    for p in procs.values():
        if not is_session(p.name) or p.uid != me or inside_session(procs, p.pid):
            continue  # not a session, not ours, or a process inside a session (it goes where that goes)
        cg = cgroup_of(p.pid)
        if cg is None:
            continue
        unit = unit_of_cgroup(cg, side.manager_cgroup)
        # Only children in the session's own cgroup go with it: one the agent put in a unit of its
        # own (systemd-run --scope -p MemoryMax=…) keeps that unit and its limits.
        kids = [k for k in descendants(procs, p.pid) if procs[k].uid == me and cgroup_of(k) == cg]
        s = SessionObs(pid=p.pid, in_slice=cg.startswith(slice_cg.rstrip("/") + "/"), unit=unit,
                       movable=movable_from(unit), children=kids)
        if policy.ladder_session_gb > 0:
            s.outside = heavy_children(procs, p.pid, kids, policy.ladder_session_gb)
        if s.in_slice:
            first = cg[len(slice_cg.rstrip("/")) + 1:].split("/")[0]
            if first.endswith(".scope"):
                s.scope = first
                try:
                    s.scope_memory_high = (await side.unit_properties(first, "Scope")).get("MemoryHigh")
                except Exception:  # noqa: BLE001 - the session ended meanwhile: the next pass sees
                    continue
        sessions.append(s)
    world.sessions = sessions
    return []


def heavy_children(procs, session: int, kids: list[int], over_gb: float) -> list[dict]:
    """The session's children (each with its whole subtree among `kids`, the session's descendants in
    its own cgroup: outside any job's unit) whose memory (RSS, summed: an upper bound) is over
    `over_gb`, largest first."""
    from reconciler.observed.procs import start_time
    from reconciler.observed.usage import process_usage

    root_of: dict[int, int] = {}
    top: dict[int, list[int]] = {}
    for pid in kids:  # parents before children: each goes under the child of the session it is under
        parent = procs[pid].ppid if pid in procs else None
        root = pid if parent == session else root_of.get(parent)
        if root is None:
            continue
        root_of[pid] = root
        top.setdefault(root, []).append(pid)
    out = []
    for root, tree in top.items():
        rss = sum((process_usage(pid) or (0, 0.0))[0] for pid in tree)
        gb = rss / GIB_KB / 1024
        start = start_time(root)
        if gb > over_gb and start is not None:
            out.append({"pid": root, "start": start, "name": procs[root].name if root in procs else "?",
                        "gb": round(gb, 3), "pids": tree})
    return sorted(out, key=lambda o: -o["gb"])
