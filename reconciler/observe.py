"""Observe the live machine (DESIGN §2 step 3): memory, CPUs, note owners, and jobs via the runtime."""
from __future__ import annotations

import os

from .models import LIVE, JobRecord, Phase, World
from .runtime import Runtime, RuntimeUnavailable

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


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def observe_world(runtime: Runtime | None, records: dict[str, JobRecord]) -> World:
    total, available = meminfo()
    owners = {r.request.owner_pid for r in records.values()
              if r.request.kind == "note" and r.phase == Phase.running and r.request.owner_pid}
    world = World(mem_total_gb=round(total, 3), mem_available_gb=round(available, 3), nproc=cpu_count(),
                  live_pids=sorted(p for p in owners if pid_alive(p)))
    wanted = [r.id for r in records.values() if r.phase in LIVE and r.request.kind == "job"]
    if runtime is None:
        world.ok, world.errors = False, ["no runtime connected"]
        return world
    try:
        world.jobs = await runtime.observe(wanted)
    except RuntimeUnavailable as e:
        world.ok, world.errors = False, [str(e)]
    return world
