"""Where a unit's memory lives in the cgroup tree, and how much it uses (DESIGN §6, §12).

Small, pure-ish file reads, stdlib only. Two layouts exist:

- cgroup v1 (this machine): the memory controller has its own hierarchy, usually
  /sys/fs/cgroup/memory; a unit's directory is <mount>/<unit cgroup path>, usage is
  memory.usage_in_bytes, the peak memory.max_usage_in_bytes.
- cgroup v2 (desktops): one hierarchy, usually /sys/fs/cgroup, with `memory` listed in its
  cgroup.controllers; usage is memory.current, the peak memory.peak (kernel >= 5.19).
  A hybrid layout mounts cgroup2 at /sys/fs/cgroup/unified *without* the memory controller:
  that one is never used for memory.

A unit's cgroup path is the manager's own ControlGroup (Manager property; "" or "/" for a private
manager that owns the root, /user.slice/user-1000.slice/user@1000.service on a desktop) + the slice
path + the unit name.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import NamedTuple

from reconciler.observed.mounts import cgroup_mounts, parse_mountinfo

MOUNTINFO = "/proc/self/mountinfo"


class MemoryMount(NamedTuple):
    path: Path  # where the hierarchy is mounted
    root: str  # the cgroup path that the mount's top directory is (mountinfo field 4), usually "/"
    version: int  # 1 or 2


def slice_path(slice_name: str) -> str:
    """The relative directory of a slice: "a-b-c.slice" -> "a.slice/a-b.slice/a-b-c.slice"; "-.slice" -> ""."""
    if not slice_name.endswith(".slice"):
        raise ValueError(f"not a slice name: {slice_name!r}")
    stem = slice_name[: -len(".slice")]
    if stem in ("", "-"):
        return ""
    parts = stem.split("-")
    return "/".join("-".join(parts[: i + 1]) + ".slice" for i in range(len(parts)))


def unit_cgroup(manager_cgroup: str, slice_name: str, unit: str) -> str:
    """The absolute cgroup path of `unit` in `slice_name` under a manager whose ControlGroup is given."""
    parts = [p for p in (manager_cgroup.strip("/"), slice_path(slice_name), unit) if p]
    return "/" + "/".join(parts)


def parse_memory_mount(mountinfo: str, read=lambda p: Path(p).read_text()) -> MemoryMount | None:
    """The mount that carries the memory controller, from the text of /proc/self/mountinfo.

    A v1 `cgroup` mount with `memory` among its super options wins (when it exists, v2 cannot have
    the controller); otherwise a `cgroup2` mount whose cgroup.controllers lists `memory`."""
    v1, v2 = cgroup_mounts(parse_mountinfo(mountinfo))
    if "memory" in v1:
        return MemoryMount(Path(v1["memory"].path), v1["memory"].root, 1)
    for m in v2:
        try:
            if "memory" in read(Path(m.path) / "cgroup.controllers").split():
                return MemoryMount(Path(m.path), m.root, 2)
        except OSError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def memory_mount() -> MemoryMount | None:
    """This machine's memory-controller mount (cached: it does not change while we run)."""
    try:
        with open(MOUNTINFO) as f:
            found = parse_memory_mount(f.read())
    except OSError:
        found = None
    if found is not None:
        return found
    # No mountinfo (odd sandboxes): the conventional places.
    if os.path.isdir("/sys/fs/cgroup/memory"):
        return MemoryMount(Path("/sys/fs/cgroup/memory"), "/", 1)
    try:
        if "memory" in Path("/sys/fs/cgroup/cgroup.controllers").read_text().split():
            return MemoryMount(Path("/sys/fs/cgroup"), "/", 2)
    except OSError:
        pass
    return None


def memory_dir(cgroup_path: str, mount: MemoryMount | None = None) -> tuple[Path, int] | None:
    """(directory, cgroup version) of `cgroup_path` in the memory hierarchy; None without one."""
    mount = mount or memory_mount()
    if mount is None:
        return None
    rel = cgroup_path
    root = mount.root.rstrip("/")
    if root and (rel == root or rel.startswith(root + "/")):
        rel = rel[len(root):]
    return mount.path / rel.lstrip("/"), mount.version


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _memory_file(cgroup_path: str, v1: str, v2: str, mount: MemoryMount | None) -> int | None:
    found = memory_dir(cgroup_path, mount)
    if found is None:
        return None
    d, version = found
    return _read_int(d / (v1 if version == 1 else v2))


def memory_used_bytes(cgroup_path: str, mount: MemoryMount | None = None) -> int | None:
    """Memory in use by the cgroup (v1 memory.usage_in_bytes, v2 memory.current); None if unknown."""
    return _memory_file(cgroup_path, "memory.usage_in_bytes", "memory.current", mount)


def slice_cgroup(manager_cgroup: str, slice_name: str) -> str:
    """The absolute cgroup path of a slice of the manager whose ControlGroup is given."""
    parts = [p for p in (manager_cgroup.strip("/"), slice_path(slice_name)) if p]
    return "/" + "/".join(parts)


def memory_file_cache_bytes(cgroup_path: str, mount: MemoryMount | None = None) -> int | None:
    """The page-cache part of the cgroup's memory that the kernel can reclaim under pressure: file
    pages minus shared memory (tmpfs, shm), which cannot go without swap (v1 memory.stat
    total_cache − total_shmem, v2 file − shmem); None if unknown."""
    found = memory_dir(cgroup_path, mount)
    if found is None:
        return None
    d, version = found
    return reclaimable_cache(_read_text(d / "memory.stat"), version)


def reclaimable_cache(stat_text: str | None, version: int) -> int | None:
    cache_key, shmem_key = ("total_cache", "total_shmem") if version == 1 else ("file", "shmem")
    values = {}
    for line in (stat_text or "").splitlines():
        name, _, value = line.partition(" ")
        if name in (cache_key, shmem_key):
            try:
                values[name] = int(value)
            except ValueError:
                return None
    if cache_key not in values:
        return None
    return max(values[cache_key] - values.get(shmem_key, 0), 0)


def memory_pressure_some_avg60(cgroup_path: str, mount: MemoryMount | None = None) -> float | None:
    """`some avg60` of the cgroup's memory.pressure (percent of the last minute in which some task
    stalled on memory). cgroup v2 only; None on v1 or when it cannot be read."""
    found = memory_dir(cgroup_path, mount)
    if found is None or found[1] != 2:
        return None
    return parse_pressure_some_avg60(_read_text(found[0] / "memory.pressure"))


def parse_pressure_some_avg60(text: str | None) -> float | None:
    """From `some avg10=0.00 avg60=21.50 avg300=3.00 total=123`."""
    for line in (text or "").splitlines():
        fields = line.split()
        if fields and fields[0] == "some":
            for f in fields[1:]:
                if f.startswith("avg60="):
                    try:
                        return float(f[6:])
                    except ValueError:
                        return None
    return None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def process_unit_cgroup(proc_cgroup: str) -> str | None:
    """The cgroup that systemd placed a process in, from the text of /proc/PID/cgroup: the
    `name=systemd` hierarchy on v1/hybrid machines, else the unified `0::` one."""
    unified = None
    for line in proc_cgroup.splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if controllers == "name=systemd":
            return path
        if controllers == "":
            unified = path
    return unified
