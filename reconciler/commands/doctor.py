"""`res doctor`: what res needs from this machine, one line per check (issue 4 item 8).

    ok   <what>
    fix  <what>: <how to fix it, in one line>

Checks: the systemd user manager over D-Bus; the cgroup version; the memory, cpu and io controllers
usable by the user manager (delegated); lingering; systemd-oomd; whether /tmp is tmpfs
(informational: never a fix); the user unit directory in the manager's unit search path.
Exit 0 when nothing needs fixing, 1 otherwise.

`gather()` reads the machine into `Facts`; `decide(facts)` is pure and turns them into the lines.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from reconciler.observed.cgroup import MemoryMount, _read_text, memory_dir, parse_memory_mount
from reconciler.observed.mounts import MountInfo, cgroup_mounts, fstype_of, parse_mountinfo
from reconciler.config.paths import Paths

WANTED = ("memory", "cpu", "io")  # the controllers res sets limits and weights with
V1_NAMES = {"memory": "memory", "cpu": "cpu", "io": "blkio"}  # cgroup v1 hierarchy of each
LINGER_DIR = "/var/lib/systemd/linger"
DELEGATE_FIX = ("sudo mkdir -p /etc/systemd/system/user@.service.d && printf '[Service]\\nDelegate=cpu cpuset io "
                "memory pids\\n' | sudo tee /etc/systemd/system/user@.service.d/delegate.conf && sudo systemctl "
                "daemon-reload, then log out and in again")
V2_FIX = "boot with systemd.unified_cgroup_hierarchy=1 on the kernel command line (cgroup v2)"


@dataclass
class Facts:
    user: str
    manager: str | None = None  # why the user manager is unreachable; None when it answered
    manager_version: str = ""
    cgroup_version: int | None = None  # of the memory controller: 2 unified, 1 legacy/hybrid, None: not found
    cgroup_hybrid: bool = False  # v1 controllers and a cgroup2 mount beside them
    memory_mount: str = ""
    controllers: frozenset[str] | None = None  # of WANTED, usable by the user manager; None: unknown
    controllers_dir: str = ""  # where that was read
    linger: bool = False
    oomd_binary: str | None = None
    oomd_running: bool = False
    tmp_fstype: str | None = None
    unit_dir: str = ""
    unit_path: tuple[str, ...] | None = None  # the manager's UnitPath; None: unknown
    policy_warnings: tuple[str, ...] = ()  # policy values that do not mean what they say
    private_manager: str | None = None  # "pid N": the manager reached is the private one res serve started
    private_allowed: bool = True  # policy private_manager = "auto"


# ---------------------------------------------------------------------------------- pure


def decide(f: Facts) -> tuple[int, list[str]]:
    """The doctor's lines and exit code, from gathered facts (no I/O)."""
    ok: list[tuple[bool, str]] = []

    def good(what: str) -> None:
        ok.append((True, f"ok   {' '.join(what.split())}"))

    def fix(what: str, how: str) -> None:
        ok.append((False, f"fix  {' '.join(what.split())}: {how}"))

    later = "fix the user manager first, then run res doctor again"
    if f.manager is None:
        version = f" (systemd {f.manager_version})" if f.manager_version else ""
        if f.private_manager:
            good(f"systemd user manager reachable over D-Bus{version}: the private one res serve started for this "
                 f"state directory ({f.private_manager}), as none other was reachable")
        else:
            good(f"systemd user manager reachable over D-Bus{version}")
    else:
        private = ("; or run res serve, which starts a private one for its state directory (policy "
                   "private_manager = \"auto\")") if f.private_allowed else ""
        fix(f"systemd user manager unreachable ({f.manager})",
            "log in through a systemd session (or export XDG_RUNTIME_DIR=/run/user/$(id -u)); "
            f"`systemctl --user status` must work{private}")

    if f.cgroup_version == 2:
        good(f"cgroup v2 (unified) at {f.memory_mount}")
    elif f.cgroup_version == 1:
        good(f"cgroup v1{' (hybrid)' if f.cgroup_hybrid else ''}: memory hierarchy at {f.memory_mount}")
    else:
        fix("no cgroup hierarchy with the memory controller", V2_FIX)

    if f.controllers is None:
        how = later if f.manager else V2_FIX if f.cgroup_version is None else f"could not read {f.controllers_dir}"
        fix("controllers delegated to the user manager not known", how)
    else:
        missing = [c for c in WANTED if c not in f.controllers]
        if not missing:
            good(f"controllers {', '.join(WANTED)} delegated to the user manager ({f.controllers_dir})")
        else:
            what = f"controllers {', '.join(missing)} not delegated to the user manager ({f.controllers_dir})"
            fix(what, DELEGATE_FIX if f.cgroup_version == 2 else V2_FIX)

    if f.linger:
        good(f"lingering enabled for {f.user}: jobs survive logout")
    else:
        fix(f"lingering off for {f.user} (jobs and the loop end at logout)", f"loginctl enable-linger {f.user}")

    if f.oomd_running:
        good("systemd-oomd running: memory pressure ends an agent job, not your session")
    elif f.cgroup_version != 2:
        fix("systemd-oomd unusable without cgroup v2 (the kernel OOM killer picks the victim)", V2_FIX)
    elif f.oomd_binary is None:
        fix("systemd-oomd not installed", "sudo apt install systemd-oomd (or your distribution's package), "
                                          "then sudo systemctl enable --now systemd-oomd")
    else:
        fix(f"systemd-oomd installed ({f.oomd_binary}) but not running", "sudo systemctl enable --now systemd-oomd")

    if f.tmp_fstype == "tmpfs":
        good("/tmp is tmpfs: files there use RAM (res status warns above 25% of it; res clean frees stale scratch)")
    elif f.tmp_fstype:
        good(f"/tmp is {f.tmp_fstype}, not tmpfs: files there use disk, not RAM")
    else:
        good("/tmp: file system unknown (not in /proc/mounts)")

    if f.unit_path is None:
        fix(f"unit dir {f.unit_dir} in the user manager's search path not known", later)
    elif os.path.normpath(f.unit_dir) in {os.path.normpath(p) for p in f.unit_path}:
        good(f"unit dir {f.unit_dir} is in the user manager's search path")
    else:
        fix(f"unit dir {f.unit_dir} is not in the user manager's search path",
            "run res with the XDG_CONFIG_HOME the manager has (systemctl --user show-environment)")

    for warning in f.policy_warnings:
        what, _, how = warning.partition("; ")
        fix(what, how)

    return (0 if all(g for g, _ in ok) else 1), [line for _, line in ok]


Mount = MountInfo  # a mount point and the cgroup path its top directory is


def v1_hierarchies(mountinfo: str) -> dict[str, Mount]:
    """cgroup v1 controller -> its hierarchy's mount, from the text of /proc/self/mountinfo."""
    return cgroup_mounts(parse_mountinfo(mountinfo))[0]


def v2_mount(mountinfo: str) -> Mount | None:
    return next(iter(cgroup_mounts(parse_mountinfo(mountinfo))[1]), None)


def cgroup_dir(mount: Mount, cgroup_path: str) -> str:
    """The directory of `cgroup_path` (e.g. the manager's ControlGroup) under `mount`."""
    return str(memory_dir(cgroup_path, MemoryMount(Path(mount.path), mount.root, 0))[0])  # version unused


# ---------------------------------------------------------------------------------- shell


def _oomd_running(proc: str = "/proc") -> bool:
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return False
    return any((_read_text(Path(proc, p, "comm")) or "").strip() == "systemd-oomd" for p in pids)


def _user() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return os.environ.get("USER") or str(os.getuid())


async def _ask_manager(paths: Paths, policy) -> tuple[str | None, str, str | None, tuple[str, ...] | None, str | None]:
    """(why unreachable or None, version, ControlGroup, UnitPath, the bus address reached)."""
    from reconciler.runtime import RuntimeUnavailable
    from reconciler.loop.tick import make_runtime

    rt = make_runtime(paths, policy)
    try:
        await rt.connect()
        version = str(await rt.manager_property("Version"))
        unit_path = tuple(str(p) for p in await rt.manager_property("UnitPath"))
        return None, version, rt.manager_cgroup, unit_path, getattr(rt, "address", None)
    except RuntimeUnavailable as e:
        why = str(e).removeprefix("systemd user manager unreachable").removeprefix(" at ").removeprefix(":")
        return why.strip() or "no answer", "", None, None, None
    except Exception as e:  # noqa: BLE001 - any failure to ask is "unreachable" to the user
        return " ".join(str(e).split()) or type(e).__name__, "", None, None, None
    finally:
        await rt.close()


def gather(paths: Paths, policy, read: Callable[[str], str | None] = lambda p: _read_text(Path(p))) -> Facts:
    import asyncio

    from reconciler.render.unitfiles import user_unit_dir

    from reconciler.core.capacity import reserve_warnings

    from reconciler.runtime.usermanager import bus_address, pids

    f = Facts(user=_user(), unit_dir=str(user_unit_dir()), policy_warnings=tuple(reserve_warnings(policy)),
              private_allowed=policy.private_manager == "auto")
    f.manager, f.manager_version, manager_cgroup, f.unit_path, reached = asyncio.run(_ask_manager(paths, policy))
    if reached is not None and reached == bus_address(paths.root):
        f.private_manager = f"systemd --user pid {pids(paths.root).get('systemd', '?')}"

    mountinfo = read("/proc/self/mountinfo") or ""
    mem = parse_memory_mount(mountinfo, read=lambda p: read(str(p)) or "")
    v2 = v2_mount(mountinfo)
    if mem is not None:
        f.cgroup_version, f.memory_mount = mem.version, str(mem.path)
        f.cgroup_hybrid = mem.version == 1 and v2 is not None
    if manager_cgroup is not None and mem is not None:
        if mem.version == 2:
            d = str(memory_dir(manager_cgroup, mem)[0])
            f.controllers_dir = d
            text = read(os.path.join(d, "cgroup.controllers"))
            if text is not None:
                f.controllers = frozenset(c for c in WANTED if c in text.split())
        else:
            # v1: the manager can use a controller if its cgroup directory in that hierarchy is its
            # own to write (delegated); otherwise limits set through it are not applied.
            hier = v1_hierarchies(mountinfo)
            usable = set()
            for c in WANTED:
                m = hier.get(V1_NAMES[c])
                if m is not None:
                    d = cgroup_dir(m, manager_cgroup)
                    if os.path.isdir(d) and os.access(d, os.W_OK):
                        usable.add(c)
            f.controllers = frozenset(usable)
            f.controllers_dir = f"{manager_cgroup or '/'} in the v1 hierarchies"

    f.linger = os.path.exists(os.path.join(LINGER_DIR, f.user))
    from reconciler.render.unitfiles import OOMD_PATHS

    f.oomd_binary = next((b for b in OOMD_PATHS if os.path.exists(b)), None)
    f.oomd_running = _oomd_running()
    f.tmp_fstype = fstype_of("/tmp", read("/proc/mounts") or "")
    return f


def cmd_doctor(paths: Paths, policy) -> tuple[int, list[str]]:
    return decide(gather(paths, policy))
