"""The machine's own readings a pass's `World` is made of (DESIGN §2 step 3): memory, CPUs, the
attachment holders gone, /tmp as a tmpfs, transient services, the unit of a cgroup. No runtime: the
World is assembled from these and the runtime's answers in loop/world.py."""
from __future__ import annotations

import os
import re

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


_ESCAPED_FROM = re.compile(r"RES_ESCAPED_FROM=(r-[1-9][0-9]{0,9})\b")
# What res's own units carry in their environment: a job its exit record's path (runtime/jobunit.py),
# a loop its state directory (loop/start.py). Such a unit outside these slices is another res's (a
# second state directory: a test run's, a checkout's own), budgeted by that one, not an escape from this.
_ANOTHER_RES = re.compile(r"(?:^|[\s\"])RES_(?:EXIT_RECORD|STATE_DIR)=")


def stray_units(transient_dir: str, ours: tuple[str, ...], loop_prefix: str = "") -> list[tuple[str, str, str | None]]:
    """(name, slice, the job it was started from) of each transient service (systemd-run without
    --scope) outside the agents slices, desktop ones (app-*, or in the desktop's slices), res's own
    loop (`loop_prefix`*, started by the first call: loop/start.py) and another res's jobs and loops
    (_ANOTHER_RES) excepted. The job is the one its environment names (RES_ESCAPED_FROM, set by a job's
    systemd-run: apply/escape.py), else None; a unit that names one is listed whatever else it
    carries. Read from the manager's transient unit files: one directory listing, no D-Bus call per
    unit."""
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
        escaped_from = None
        res_own = False
        try:
            with open(os.path.join(transient_dir, name)) as f:
                for line in f:
                    if line.startswith("Slice="):
                        slice_name = line[6:].strip()
                    elif line.startswith("ExecStart="):
                        complete = True
                    elif line.startswith("Environment="):
                        if escaped_from is None:
                            m = _ESCAPED_FROM.search(line)
                            escaped_from = m.group(1) if m else None
                        res_own = res_own or _ANOTHER_RES.search(line[12:]) is not None
        except OSError:
            continue
        if not complete:
            continue  # being written (systemd appends setting by setting): judged on a later pass
        if slice_name in ours or slice_name in DESKTOP_SLICES or slice_name.startswith("app-"):
            continue
        if res_own and escaped_from is None:
            continue
        out.append((name, slice_name, escaped_from))
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
