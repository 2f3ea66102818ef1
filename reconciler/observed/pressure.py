"""Memory pressure (PSI, DESIGN §5.9): the share of the last 10 s in which every non-idle task waited
for memory at once (`full avg10`, in %), system-wide and in the agents slice's own cgroup.

The kernel's format (Documentation/accounting/psi.rst), the same in /proc/pressure/memory and in a
cgroup v2 directory's memory.pressure:

    some avg10=0.00 avg60=0.00 avg300=0.00 total=0
    full avg10=0.00 avg60=0.00 avg300=0.00 total=0

Where it is read from:

- the machine: /proc/pressure/memory (Linux >= 4.20 with CONFIG_PSI; absent or unreadable: None,
  which blocks nothing);
- the agents slice: `memory.pressure` of its directory in the cgroup2 (unified) hierarchy. PSI is
  accounted in the unified hierarchy whatever hierarchy the memory controller is on, so a hybrid
  machine (cgroup v1 memory, cgroup2 at /sys/fs/cgroup/unified, as here) has it too; a machine with
  no cgroup2 mount has none (None).

Tests (and anyone reproducing a decision) point the reader at files of their own:
`RES_PRESSURE_FILE` replaces /proc/pressure/memory, `RES_SLICE_PRESSURE_FILE` the slice's
memory.pressure. Read each pass by `loop/world.py`; the loop's PSI trigger (loop/events.py) is
armed only on the kernel's own file, never on a replacement. Stdlib only.
"""
from __future__ import annotations

import functools
import os

SYSTEM_FILE = "/proc/pressure/memory"
SYSTEM_ENV = "RES_PRESSURE_FILE"
SLICE_ENV = "RES_SLICE_PRESSURE_FILE"
MOUNTINFO = "/proc/self/mountinfo"
WINDOW_S = 10  # avg10: the window the threshold is compared with (the words say it: "(full, 10 s)")


def parse_full_avg10(text: str | None, window: str = "avg10") -> float | None:
    """`full avg10` (%) from the text of a PSI file (or `window` "avg60": the last minute's); None
    when there is no such field or it is not a number (a kernel without `full` for this resource, a
    truncated or foreign file)."""
    for line in (text or "").splitlines():
        fields = line.split()
        if not fields or fields[0] != "full":
            continue
        for f in fields[1:]:
            if f.startswith(window + "="):
                try:
                    value = float(f[len(window) + 1:])
                except ValueError:
                    return None
                return value if 0.0 <= value <= 100.0 else None  # (nan fails both: None)
        return None
    return None


def read_full(path: str | None) -> tuple[float | None, float | None]:
    """(`full avg10`, `full avg60`) of the PSI file at `path`; None each when it cannot be read."""
    text = _read(path)
    return parse_full_avg10(text), parse_full_avg10(text, "avg60")


def read_full_avg10(path: str | None) -> float | None:
    """`full avg10` of the PSI file at `path`; None when it cannot be read (or path is None)."""
    return parse_full_avg10(_read(path))


def _read(path: str | None) -> str | None:
    if not path:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        return None
    return data.decode("ascii", "replace")


def system_file() -> str:
    """The machine's memory PSI file: /proc/pressure/memory, or what RES_PRESSURE_FILE names."""
    return os.environ.get(SYSTEM_ENV) or SYSTEM_FILE


def is_kernel_file(path: str) -> bool:
    """Whether `path` is the kernel's own PSI file (a trigger may be armed on it), not a stand-in."""
    return os.path.realpath(path) == SYSTEM_FILE


def unified_root(mountinfo: str) -> tuple[str, str] | None:
    """(mount point, the cgroup path its top is) of the first cgroup2 mount in the text of
    /proc/self/mountinfo; None without one."""
    from reconciler.observed.mounts import cgroup_mounts, parse_mountinfo

    _, v2 = cgroup_mounts(parse_mountinfo(mountinfo))
    return (v2[0].path, v2[0].root) if v2 else None


@functools.lru_cache(maxsize=1)
def _unified() -> tuple[str, str] | None:
    try:
        with open(MOUNTINFO) as f:
            return unified_root(f.read())
    except OSError:
        return None


def cgroup_file(cgroup_path: str, unified: tuple[str, str] | None) -> str | None:
    """The memory.pressure file of `cgroup_path` (an absolute cgroup path, as systemd names it) in
    the unified hierarchy mounted as `unified`; None without one."""
    if unified is None:
        return None
    mount, root = unified
    rel = cgroup_path
    root = root.rstrip("/")
    if root and (rel == root or rel.startswith(root + "/")):
        rel = rel[len(root):]
    return os.path.join(mount, rel.lstrip("/"), "memory.pressure")


def slice_file(slice_cgroup: str) -> str | None:
    """The agents slice's memory.pressure: RES_SLICE_PRESSURE_FILE, else its directory in the unified
    hierarchy (None without a cgroup2 mount)."""
    return os.environ.get(SLICE_ENV) or cgroup_file(slice_cgroup, _unified())


def system_full_pct() -> float | None:
    """The machine's memory pressure, `full avg10` in % (None: not observed)."""
    return read_full_avg10(system_file())


def system_full() -> tuple[float | None, float | None]:
    """The machine's memory pressure, `full` (avg10, avg60) in % (None: not observed)."""
    return read_full(system_file())


def slice_full_pct(slice_cgroup: str) -> float | None:
    """The agents slice's own memory pressure, `full avg10` in % (None: not observed: no cgroup2, or
    the slice has no directory yet)."""
    return read_full_avg10(slice_file(slice_cgroup))


def slice_full(slice_cgroup: str) -> tuple[float | None, float | None]:
    """The agents slice's own memory pressure, `full` (avg10, avg60) in %."""
    return read_full(slice_file(slice_cgroup))
