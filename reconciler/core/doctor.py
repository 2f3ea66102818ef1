"""The rules of `res doctor`: from the facts gathered about this machine (commands/doctor.py reads
them), the lines to print and the exit code. Pure."""
from __future__ import annotations

import posixpath
from dataclasses import dataclass

WANTED = ("memory", "cpu", "io")  # the controllers res sets limits and weights with
# Without memory or cpu res's limits and shares are not applied: a gap. systemd delegates only
# `pids memory cpu` to a user manager by default (user@.service, every distribution): without io the
# agents slice's IOWeight does nothing, which is worth knowing, not a gap (docs/service.md).
NEEDED = ("memory", "cpu")
V1_NAMES = {"memory": "memory", "cpu": "cpu", "io": "blkio"}  # cgroup v1 hierarchy of each
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
    # The Slurm cluster (DESIGN §6b), checked where one is installed or the policy uses one.
    cluster_checked: bool = False
    cluster_error: str | None = None  # sinfo failed: what it said
    cluster_partitions: tuple[str, ...] = ()  # (up ones)
    cluster_partition: str = ""  # the policy's [cluster] partition ("": Slurm's default)
    cluster_logs: str = ""  # the logs directory cluster jobs write to
    cluster_shared: bool = False  # it is in the policy's [cluster] shared_dir (else: the state directory's logs/)
    cluster_write_error: str | None = None  # a job on a node could not write there (None: it could, or not tried)
    cluster_nodes_checked: tuple[str, ...] = ()  # the nodes that wrote there (each by name; empty: any one node)
    cluster_nodes_skipped: tuple[str, ...] = ()  # "node7 (drained)": not up for a job, so not asked
    # The agents' instructions in the repository doctor runs in (`res agent-rules`): "" outside one.
    rules_repo: str = ""
    rules_files: tuple[str, ...] = ()  # CLAUDE.md / AGENTS.md there
    rules_mention: tuple[str, ...] = ()  # those of them that mention res
    # The agent CLIs on this machine and the gate (`res hook install`): (cli, gated (None: its settings
    # file cannot be read), where it is gated or would be).
    gates: tuple[tuple[str, bool | None, str], ...] = ()
    # The gate's own code could not be loaded in this install (a module missing from it): `res hook`
    # then has no opinion on any command (it never gets in an agent's way), so every gate is open.
    gate_broken: str | None = None


def decide(f: Facts) -> tuple[int, list[str]]:
    """The doctor's lines and exit code, from gathered facts (no I/O)."""
    ok: list[tuple[bool, str]] = []

    def good(what: str) -> None:
        ok.append((True, f"ok   {' '.join(what.split())}"))

    def fix(what: str, how: str) -> None:
        ok.append((False, f"fix  {' '.join(what.split())}: {how}"))

    def note(what: str, how: str) -> None:  # worth knowing, not a gap: the exit code stays 0
        ok.append((True, f"note {' '.join(what.split())}: {how}"))

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
        elif any(c in NEEDED for c in missing):
            what = f"controllers {', '.join(missing)} not delegated to the user manager ({f.controllers_dir})"
            fix(what, DELEGATE_FIX if f.cgroup_version == 2 else V2_FIX)
        else:
            note(f"controllers {', '.join(NEEDED)} delegated to the user manager ({f.controllers_dir}); "
                 f"{', '.join(missing)} not (systemd's default): the agents slice's IOWeight does nothing, agents' "
                 "disk I/O competes evenly with yours", "to weigh it: " + DELEGATE_FIX)

    # Lingering and systemd-oomd are off on a stock Debian 12 (the guest tier, docs/guest.md) and res
    # works without either: what they change is said, and the exit code stays 0.
    if f.linger:
        good(f"lingering enabled for {f.user}: jobs survive logout")
    else:
        note(f"lingering off for {f.user} (the distribution's default): the loop and its jobs end when you log out "
             "and start again at your next login", f"to keep them running: loginctl enable-linger {f.user}")

    without = "res's pressure ladder and each job's MemoryMax act without it; the kernel's OOM killer is the last line"
    if f.oomd_running:
        good("systemd-oomd running: memory pressure held in the jobs slice ends a job, not your session")
    elif f.cgroup_version != 2:
        note(f"systemd-oomd cannot run without cgroup v2: {without}", V2_FIX)
    elif f.oomd_binary is None:
        note(f"systemd-oomd not installed: {without}", "for a second line: sudo apt install systemd-oomd (or your "
                                                       "distribution's package), then sudo systemctl enable --now systemd-oomd")
    else:
        note(f"systemd-oomd installed ({f.oomd_binary}) but not running: {without}",
             "for a second line: sudo systemctl enable --now systemd-oomd")

    if f.tmp_fstype == "tmpfs":
        good("/tmp is tmpfs: files there use RAM (res status warns above 25% of it; res clean frees stale scratch)")
    elif f.tmp_fstype:
        good(f"/tmp is {f.tmp_fstype}, not tmpfs: files there use disk, not RAM")
    else:
        good("/tmp: file system unknown (not in /proc/mounts)")

    if f.unit_path is None:
        fix(f"unit dir {f.unit_dir} in the user manager's search path not known", later)
    elif posixpath.normpath(f.unit_dir) in {posixpath.normpath(p) for p in f.unit_path}:
        good(f"unit dir {f.unit_dir} is in the user manager's search path")
    else:
        fix(f"unit dir {f.unit_dir} is not in the user manager's search path",
            "run res with the XDG_CONFIG_HOME the manager has (systemctl --user show-environment)")

    if f.cluster_checked:
        _cluster(f, good, fix)

    if f.gate_broken:
        fix(f"res hook cannot load its own code ({f.gate_broken}): every agent's heavy commands run as if "
            "res were not there", "install res again (python3 -m pip install --force-reinstall <its source>)")
    for cli, gated, where in f.gates:
        if gated:
            good(f"{cli}: gated (res hook in {where})")
        elif gated is None:
            note(f"{cli}: whether it is gated is not known", f"{where} cannot be read")
        else:
            note(f"{cli} is on this machine and not gated: its heavy commands run without asking res",
                 f"res hook install --agent {cli} (writes {where})")
    if f.rules_repo:
        _rules(f, good, note)
    for warning in f.policy_warnings:
        what, _, how = warning.partition("; ")
        fix(what, how)

    return (0 if all(g for g, _ in ok) else 1), [line for _, line in ok]


def _rules(f: Facts, good, note) -> None:
    """Whether the repository's instructions files tell agents about res (doctor never edits them)."""
    if f.rules_mention:
        good(f"{' and '.join(f.rules_mention)} in {f.rules_repo} tell{'s' if len(f.rules_mention) == 1 else ''} agents about res")
    elif f.rules_files:
        note(f"{' and '.join(f.rules_files)} in {f.rules_repo} do{'es' if len(f.rules_files) == 1 else ''} not mention res",
             "res agent-rules prints the lines to add (res never edits your files)")
    else:
        note(f"no CLAUDE.md or AGENTS.md in {f.rules_repo}",
             "res agent-rules prints the lines an agent's instructions need (res never writes them)")


def _cluster(f: Facts, good, fix) -> None:
    """The cluster's lines: sinfo answers, the partition exists and is up, a node can write the logs."""
    if f.cluster_error is not None:
        fix(f"slurm cluster unreachable ({f.cluster_error})",
            "check: scontrol ping (slurmctld), munge -n | unmunge (munge), SLURM_CONF; res run --on cluster waits until it answers")
        return
    want = f.cluster_partition
    if want and want not in f.cluster_partitions:
        fix(f"slurm partition {want!r} not found or not up (up: {', '.join(f.cluster_partitions) or 'none'})",
            "set [cluster] partition in the policy to one of them, or empty for Slurm's default")
        return
    good(f"slurm answers (sinfo): partition{'s' if len(f.cluster_partitions) != 1 else ''} "
         f"{', '.join(f.cluster_partitions) or 'none'} up" + (f", using {want}" if want else ""))
    if f.cluster_write_error is not None:
        fix(f"a cluster node cannot write {f.cluster_logs} ({f.cluster_write_error})",
            "set [cluster] shared_dir in the policy to a directory mounted at the same path on this host and every node"
            if f.cluster_shared else
            "set [cluster] shared_dir in the policy to a directory this host and the nodes share, "
            "or put the state directory (RES_STATE_DIR) on one")
    elif len(f.cluster_nodes_checked) > 1:
        skipped = f"; not checked: {', '.join(f.cluster_nodes_skipped)}" if f.cluster_nodes_skipped else ""
        good(f"every cluster node up ({len(f.cluster_nodes_checked)}: {', '.join(f.cluster_nodes_checked)}) can write "
             f"{f.cluster_logs} (cluster jobs' logs and exit records){skipped}")
    else:
        good(f"a cluster node can write {f.cluster_logs} (cluster jobs' logs and exit records)")
