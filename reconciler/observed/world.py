"""Observe the live machine (DESIGN §2 step 3): memory, memory pressure, CPUs, note owners, and jobs via
the runtime."""
from __future__ import annotations

import os

from reconciler.config.paths import loop_unit_stem
from reconciler.core.models import LIVE, JobRecord, Phase, World
from reconciler.runtime import Runtime, RuntimeUnavailable

GIB_KB = 1024 * 1024


def meminfo() -> tuple[float, float]:
    """(MemTotal, MemAvailable) in GB from /proc/meminfo."""
    values = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                values[key] = int(rest.split()[0]) / GIB_KB
    return values["MemTotal"], values["MemAvailable"]


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def gone_holders(holders: set[str], host: str) -> list[str]:
    """The attachment holders (`host/pid/nonce[/start]`) on this host whose process is gone: its pid
    is not alive, or is another process (another start time). A holder elsewhere is never judged."""
    from reconciler.core.attachments import gone
    from reconciler.observed.procs import start_time

    return sorted(h for h in holders if gone(h, host, start_time))


def _is_file(path) -> bool:
    """A regular file (not a symlink someone planted) is there."""
    import stat

    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


async def observe_world(runtime: Runtime | None, records: dict[str, JobRecord], paths=None,
                        unknown: list[str] | None = None, cluster: Runtime | None = None,
                        ask_cluster: bool = False) -> World:
    """`unknown`: queue entries state.db has no record of; their units and logs are looked for too
    (after state.db was lost, they say which of them ran before). `cluster`: the cluster's runtime, asked when
    a cluster job is live or `ask_cluster` (a cluster request waits to be decided)."""
    import socket

    from reconciler.observed import pressure
    from reconciler.observed.procs import alive

    total, available = meminfo()
    owners = {r.request.owner_pid for r in records.values()
              if r.request.kind == "note" and r.phase == Phase.running and r.request.owner_pid}
    world = World(mem_total_gb=round(total, 3), mem_available_gb=round(available, 3), nproc=cpu_count(),
                  live_pids=sorted(p for p in owners if alive(p)),
                  gone_holders=gone_holders({r.attached_by for r in records.values()
                                             if r.phase in LIVE and r.attached_by}, socket.gethostname()),
                  pressure_full_pct=pressure.system_full_pct())  # (the agents slice's: observe_user_side)
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

DESKTOP_SLICES = ("session.slice", "background.slice")  # app.slice holds systemd-run services too


def tmp_tmpfs_used_gb(mounts_text: str | None = None) -> float | None:
    """/tmp in use when /tmp is a tmpfs (it is then RAM); None when it is not one."""
    if mounts_text is None:
        try:
            with open("/proc/self/mounts") as f:
                mounts_text = f.read()
        except OSError:
            return None
    from reconciler.observed.mounts import fstype_of

    if fstype_of("/tmp", mounts_text) != "tmpfs":  # the rule `res doctor` tells the user by
        return None
    try:
        st = os.statvfs("/tmp")
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize / GIB_KB / 1024


def stray_services(transient_dir: str, ours: tuple[str, ...], loop_prefix: str = "") -> list[str]:
    """Transient services (systemd-run without --scope) outside the agents slices, desktop ones
    (app-*, or in the desktop's slices) and res's own loop (`loop_prefix`*, started by the first
    call: loop/start.py) excepted. Read from the manager's transient unit files: one directory
    listing, no D-Bus call per unit."""
    out = []
    try:
        entries = sorted(os.listdir(transient_dir))
    except OSError:
        return out
    for name in entries:
        if not name.endswith(".service") or name.startswith("app-") or (loop_prefix and name.startswith(loop_prefix)):
            continue
        slice_name = "app.slice"  # systemd's default slice for user services
        complete = False
        try:
            with open(os.path.join(transient_dir, name)) as f:
                for line in f:
                    if line.startswith("Slice="):
                        slice_name = line[6:].strip()
                    elif line.startswith("ExecStart="):
                        complete = True
        except OSError:
            continue
        if not complete:
            continue  # being written (systemd appends setting by setting): judged on a later pass
        if slice_name in ours or slice_name in DESKTOP_SLICES or slice_name.startswith("app-"):
            continue
        out.append(name)
    return out


def unit_of_cgroup(cgroup_path: str, manager_cgroup: str) -> str:
    """The unit a cgroup belongs to: its first component that is not a slice, below the user
    manager's own cgroup when it is under it (`/app.slice/vte-spawn-1.scope/x` → vte-spawn-1.scope;
    a login's `/user.slice/user-1000.slice/session-2.scope` → session-2.scope)."""
    base = manager_cgroup.rstrip("/")
    rel = cgroup_path[len(base):] if base and cgroup_path.startswith(base + "/") else cgroup_path
    for part in rel.split("/"):
        if part and not part.endswith(".slice"):
            return part
    return ""


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
    if runtime_dir:
        world.stray_services = stray_services(os.path.join(runtime_dir, "systemd", "transient"),
                                              (policy.agents_slice, policy.jobs_slice),
                                              loop_unit_stem(policy.unit_prefix))
    side = runtime.user_side() if runtime is not None else None
    slice_cg = cgroup.slice_cgroup(side.manager_cgroup, policy.agents_slice) if side is not None else None
    # The agents slice's own memory pressure (DESIGN §5.9): its memory.pressure in the unified
    # hierarchy (RES_SLICE_PRESSURE_FILE replaces it), read before anything that can fail.
    if slice_cg is not None or os.environ.get(pressure.SLICE_ENV):
        world.slice_pressure_full_pct = pressure.slice_full_pct(slice_cg or "")
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
