"""`res doctor`: what res needs from this machine, one line per check.

    ok   <what>
    fix  <what>: <how to fix it, in one line>

Checks: the systemd user manager over D-Bus; the cgroup version; the memory, cpu and io controllers
usable by the user manager (delegated); lingering; systemd-oomd; whether /tmp is tmpfs
(informational: never a fix); the user unit directory in the manager's unit search path; where
Slurm's tools are installed or the policy uses a cluster, that `sinfo` answers, the partition is up,
and a job on a node can write the logs directory.
Exit 0 when nothing needs fixing, 1 otherwise.

`gather()` reads the machine into `Facts`; `decide(facts)` (core/doctor.py) is pure and turns them
into the lines.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from reconciler.core.doctor import V1_NAMES, WANTED, Facts, decide
from reconciler.observed.cgroup import MemoryMount, _read_text, memory_dir, parse_memory_mount
from reconciler.observed.mounts import MountInfo, cgroup_mounts, fstype_of, parse_mountinfo
from reconciler.config.paths import Paths

LINGER_DIR = "/var/lib/systemd/linger"

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
        return None, version, rt.manager_cgroup, unit_path, rt.address
    except RuntimeUnavailable as e:
        why = str(e).removeprefix("systemd user manager unreachable").removeprefix(" at ").removeprefix(":")
        return why.strip() or "no answer", "", None, None, None
    except Exception as e:  # noqa: BLE001 - any failure to ask is "unreachable" to the user
        return " ".join(str(e).split()) or type(e).__name__, "", None, None, None
    finally:
        await rt.close()


def gather(paths: Paths, policy, read: Callable[[str], str | None] = lambda p: _read_text(Path(p))) -> Facts:
    import asyncio

    from reconciler.runtime.unitfiles import user_unit_dir

    from reconciler.core.capacity import reserve_warnings

    from reconciler.runtime.usermanager import bus_address, pids

    f = Facts(user=_user(), unit_dir=str(user_unit_dir()), policy_warnings=tuple(reserve_warnings(policy.rules())),
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
    from reconciler.runtime.unitfiles import OOMD_PATHS

    f.oomd_binary = next((b for b in OOMD_PATHS if os.path.exists(b)), None)
    f.oomd_running = _oomd_running()
    f.tmp_fstype = fstype_of("/tmp", read("/proc/mounts") or "")
    return f


def _run(argv: list[str], timeout: float) -> tuple[int, str]:
    import subprocess

    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        return 127, f"{argv[0]} is not installed"
    except subprocess.TimeoutExpired:
        return 124, f"{argv[0]} did not answer in {timeout:g} s"
    return r.returncode, " ".join((r.stdout if r.returncode == 0 else (r.stderr or r.stdout)).split())


def gather_cluster(f: Facts, paths: Paths, policy) -> None:
    """The cluster's facts, where Slurm's tools are installed or the policy sends work there."""
    import shutil

    conf = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    configured = shutil.which("sbatch") is not None and os.path.exists(conf)
    if not configured and policy.overflow != "cluster" and not policy.cluster.partition:
        return  # no cluster here, and none asked for: nothing to say
    logs = paths.cluster_logs(policy.cluster.shared_dir)
    f.cluster_checked, f.cluster_partition, f.cluster_logs = True, policy.cluster.partition, str(logs)
    f.cluster_shared = bool(policy.cluster.shared_dir)
    rc, out = _run(["sinfo", "--noheader", "--format=%R|%a"], 20)
    if rc != 0:
        f.cluster_error = out[:300] or f"sinfo exited {rc}"
        return
    f.cluster_partitions = tuple(sorted({line.split("|")[0] for line in out.replace(" ", "\n").splitlines()
                                         if line.endswith("|up")}))
    if f.cluster_partition and f.cluster_partition not in f.cluster_partitions:
        return
    if f.cluster_shared and not os.path.isdir(policy.cluster.shared_dir):
        f.cluster_write_error = f"{policy.cluster.shared_dir} is not a directory here (not mounted?)"
        return
    from reconciler.config.paths import make_private_dir

    why = make_private_dir(logs, parents=not f.cluster_shared)
    if why is not None:
        f.cluster_write_error = f"it {why}"
        return
    part = [f"--partition={f.cluster_partition}"] if f.cluster_partition else []
    up, f.cluster_nodes_skipped = _nodes_up(part)
    probe = logs / f".doctor-{os.getpid()}"
    argv = ["srun", "--ntasks-per-node=1", "--mem=16M", "--time=1", "--immediate=30", "--job-name=res-doctor", *part]
    # One job step on every node up (a bounded number of them: one srun, not one per node), each
    # writing a file named for its node, and this host must see each: a directory that is only
    # local somewhere (a mount point left empty by an unmount) fails, naming the node.
    argv += [f"--nodes={len(up)}", f"--nodelist={','.join(up)}"] if up else ["--nodes=1"]
    mark = '"$0.$SLURMD_NODENAME"' if up else '"$0.node"'
    rc, out = _run([*argv, "sh", "-c", f"echo res-doctor > {mark}", str(probe)], 60)
    seen, missing = [], []
    for node in up or ["node"]:
        mark = probe.with_name(f"{probe.name}.{node}")
        try:
            (seen if mark.read_text() == "res-doctor\n" else missing).append(node)
            mark.unlink()
        except OSError:
            missing.append(node)
    for stray in logs.glob(f"{probe.name}.*"):  # (a node of another name than sinfo's)
        stray.unlink(missing_ok=True)
    f.cluster_nodes_checked = tuple(seen) if up else ()
    if rc != 0:
        f.cluster_write_error = out[:300] or f"srun exited {rc}"
    elif missing:
        which = f" ({', '.join(missing)})" if up else ""
        f.cluster_write_error = f"a node{which} wrote a file there and this host does not see it: not the same filesystem"


PROBE_NODES_MAX = 64  # `res doctor` asks at most this many nodes (a large cluster: a sample, in one srun)


def _nodes_up(part: list[str]) -> tuple[list[str], tuple[str, ...]]:
    """(nodes that could run the probe now, "node (state)" of the others) of the partition, by
    `sinfo --Node`: idle or mixed and answering; drained, down, fully allocated ones are named."""
    rc, out = _run(["sinfo", "--Node", "--noheader", "--format=%N|%t", *part], 20)
    if rc != 0:
        return [], ()
    up, other = [], []
    for item in sorted(set(out.split())):
        node, _, state = item.partition("|")
        if state in ("idle", "mix"):
            up.append(node)
        elif node:
            other.append(f"{node} ({state})")
    return up[:PROBE_NODES_MAX], tuple(other + [f"{n} (past the first {PROBE_NODES_MAX})" for n in up[PROBE_NODES_MAX:]][:20])


RULES_FILES = ("CLAUDE.md", "AGENTS.md", ".claude/CLAUDE.md")


def gather_rules(f: Facts, cwd: str) -> None:
    """The agents' instructions files at the root of the checkout `cwd` is in, and whether they
    mention res (read, never written)."""
    import re

    from reconciler.config.gitrepo import checkout, read_regular
    from reconciler.render.rules import MENTIONS_RES

    found = checkout(cwd)
    if found is None:
        return
    f.rules_repo = found[0]
    present, mention = [], []
    for name in RULES_FILES:
        text = read_regular(os.path.join(found[0], name), 1 << 20)
        if text is None:
            continue
        present.append(name)
        if re.search(MENTIONS_RES, text):
            mention.append(name)
    f.rules_files, f.rules_mention = tuple(present), tuple(mention)


def cmd_doctor(paths: Paths, policy) -> tuple[int, list[str]]:
    facts = gather(paths, policy)
    try:
        gather_rules(facts, os.getcwd())
    except OSError:
        pass  # no cwd: nothing to say about a repository
    gather_cluster(facts, paths, policy)
    facts.gates = gather_gates(os.environ)
    facts.gate_broken = gate_load_error()
    return decide(facts)


def gate_load_error() -> str | None:
    """Why `res hook` could not load its own code here, if it could not: the gate's modules and every
    agent CLI's (an install that lacks one answers every hook with no opinion, silently)."""
    from importlib import import_module

    try:
        from reconciler.core.agentclis import CLIS, behaviour

        for name in ("reconciler.commands.hook", "reconciler.commands.hookloop", "reconciler.core.hooks",
                     "reconciler.core.hookrules", "reconciler.core.shellrules", "reconciler.config.agentsettings"):
            import_module(name)
        for cli in CLIS:
            behaviour(cli)
    except ImportError as e:
        return " ".join(f"{type(e).__name__}: {e}".split())[:200]
    return None


def gather_gates(environ) -> tuple[tuple[str, bool | None, str], ...]:
    """Each agent CLI (core/agentclis.py) installed here (on PATH, or its settings directory exists)
    and whether the gate is in its user settings (commands/hookinstall.py)."""
    import shutil

    from reconciler.commands.hookinstall import installed
    from reconciler.config.agenthome import settings_path
    from reconciler.core.agentclis import CLIS

    out = []
    for cli in CLIS:
        where = settings_path(cli, "user", environ)
        if shutil.which(cli) is None and not os.path.isdir(os.path.dirname(where)):
            continue
        out.append((cli, installed(cli, "user", environ), where))
    return tuple(out)
