"""The mount table, parsed in one place: /proc/self/mountinfo (cgroup hierarchies) and /proc/self/mounts
(the file system a path is on).

Stdlib only and import-free of the package: exit_record.py, which runs isolated inside each job's unit,
loads this file by its path.
"""
from __future__ import annotations

from collections import namedtuple

# path: the mount point; root: what the mount's top directory is inside its file system (field 4; a
# cgroup path for cgroups); fstype; options: the super options (for a v1 cgroup mount: its
# controllers), a tuple. A collections.namedtuple, not typing's: `typing` alone costs exit_record.py,
# which runs at every job's end, ~20 ms of start-up.
MountInfo = namedtuple("MountInfo", "path root fstype options")


def unescape(field: str) -> str:
    """The kernel writes space, tab, newline and backslash in mount fields as \\ooo."""
    out, i = [], 0
    while i < len(field):
        code = field[i + 1:i + 4]
        if field[i] == "\\" and len(code) == 3 and all(c in "01234567" for c in code):
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[MountInfo]:
    """Each well-formed line of /proc/self/mountinfo, in order."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        lf, rf = left.split(), right.split()
        if sep and len(lf) >= 5 and len(rf) >= 3:
            out.append(MountInfo(unescape(lf[4]), unescape(lf[3]), rf[0], tuple(rf[2].split(","))))
    return out


def cgroup_mounts(mounts: list[MountInfo]) -> tuple[dict[str, MountInfo], list[MountInfo]]:
    """(v1 controller -> its hierarchy's first mount, the cgroup2 mounts)."""
    v1: dict[str, MountInfo] = {}
    v2 = []
    for m in mounts:
        if m.fstype == "cgroup":
            for controller in m.options:
                v1.setdefault(controller, m)
        elif m.fstype == "cgroup2":
            v2.append(m)
    return v1, v2


def fstype_of(path: str, mounts_text: str) -> str | None:
    """The file system type `path` is on, from the text of /proc/self/mounts: the longest mount point
    that holds it (the last such mount wins, as it covers the earlier ones); None when none does."""
    best, best_len = None, -1
    for line in mounts_text.splitlines():
        f = line.split()
        if len(f) < 3:
            continue
        mnt = unescape(f[1])
        inside = path == mnt or mnt == "/" or path.startswith(mnt.rstrip("/") + "/")
        if inside and len(mnt) >= best_len:
            best, best_len = f[2], len(mnt)
    return best
