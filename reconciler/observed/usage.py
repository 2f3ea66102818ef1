"""The readings the machine view needs beyond a pass's World (docs/watching.md): /proc/meminfo and
/proc/stat whole, a cgroup's memory and CPU time, a process tree's RSS and CPU time, this process's
own. Each is one or two small file reads; only `tree_usage` walks /proc, and only when asked (the
view of an agent session that is not in a scope of its own). Stdlib only."""
from __future__ import annotations

import functools
import os
from pathlib import Path

from reconciler.observed import cgroup
from reconciler.observed.mounts import cgroup_mounts, parse_mountinfo

GIB = 1024**3
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def parse_meminfo(text: str) -> dict[str, float]:
    """{"total_gb", "available_gb", "free_gb"} from the text of /proc/meminfo (kB values)."""
    keys = {"MemTotal": "total_gb", "MemAvailable": "available_gb", "MemFree": "free_gb"}
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in keys:
            out[keys[key]] = int(rest.split()[0]) / (1024 * 1024)
    missing = [k for k, v in keys.items() if v not in out]
    if missing:
        raise ValueError(f"/proc/meminfo without {', '.join(missing)}")
    return out


def meminfo() -> dict[str, float]:
    """The machine's memory now, in GB (/proc/meminfo)."""
    with open("/proc/meminfo") as f:
        return parse_meminfo(f.read())


def parse_cpu_times(text: str) -> tuple[float, float]:
    """(busy, total) CPU seconds of all CPUs since boot, from the `cpu` line of /proc/stat: total is
    user..steal (guest time is inside user already), busy is total less idle and iowait."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            ticks = [int(v) for v in fields[1:9]]
            ticks += [0] * (8 - len(ticks))
            total = sum(ticks)
            return (total - ticks[3] - ticks[4]) / CLK_TCK, total / CLK_TCK
    raise ValueError("/proc/stat without a cpu line")


def cpu_times() -> tuple[float, float]:
    with open("/proc/stat") as f:
        return parse_cpu_times(f.read())


def cgroup_memory_bytes(cgroup_path: str) -> int | None:
    """Memory in use by the cgroup (observed/cgroup.py's reading); None if it cannot be read."""
    return cgroup.memory_used_bytes(cgroup_path)


@functools.lru_cache(maxsize=1)
def _cpu_hierarchies() -> tuple[tuple[str, str, int], ...]:
    """(mount point, its root, version) where a cgroup's CPU time can be read: the cgroup2 mounts
    (cpu.stat's usage_usec is there with or without the cpu controller), then v1's cpuacct."""
    try:
        with open(cgroup.MOUNTINFO) as f:
            v1, v2 = cgroup_mounts(parse_mountinfo(f.read()))
    except OSError:
        return ()
    out = [(m.path, m.root, 2) for m in v2]
    if "cpuacct" in v1:
        out.append((v1["cpuacct"].path, v1["cpuacct"].root, 1))
    return tuple(out)


def parse_usage_usec(text: str | None) -> int | None:
    """`usage_usec` from the text of a cgroup v2 cpu.stat."""
    for line in (text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == "usage_usec":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def cgroup_cpu_s(cgroup_path: str) -> float | None:
    """CPU seconds the cgroup has used (v2 cpu.stat usage_usec, else v1 cpuacct.usage); None if
    neither can be read."""
    for mount, root, version in _cpu_hierarchies():
        rel = cgroup_path
        root = root.rstrip("/")
        if root and (rel == root or rel.startswith(root + "/")):
            rel = rel[len(root):]
        d = Path(mount) / rel.lstrip("/")
        try:
            if version == 2:
                usec = parse_usage_usec((d / "cpu.stat").read_text())
                if usec is not None:
                    return usec / 1e6
            else:
                return int((d / "cpuacct.usage").read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    return None


def process_usage(pid: int) -> tuple[int, float] | None:
    """(RSS bytes, CPU seconds of user and system time) of one process; None if it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            rss = int(f.read().split()[1]) * PAGE
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
        rest = text[text.rindex(")") + 2:].split()
        return rss, (int(rest[11]) + int(rest[12])) / CLK_TCK  # fields 14, 15: utime, stime
    except (OSError, ValueError, IndexError):
        return None


def tree_usage(pid: int, procs=None) -> tuple[int, float] | None:
    """(RSS bytes, CPU seconds) of `pid` and all its descendants: walks /proc (`procs`: a process
    table read already, observed/procs.processes()). The RSS sum counts pages shared between them
    more than once: an upper bound. None if `pid` is gone."""
    from reconciler.observed.procs import descendants, processes

    own = process_usage(pid)
    if own is None:
        return None
    rss, cpu = own
    for child in descendants(procs if procs is not None else processes(), pid):
        got = process_usage(child)
        if got is not None:
            rss, cpu = rss + got[0], cpu + got[1]
    return rss, cpu


def self_usage() -> tuple[int, float]:
    """(RSS bytes, CPU seconds) of this process."""
    t = os.times()
    try:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        rss = 0
    return rss, t.user + t.system
