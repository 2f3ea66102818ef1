"""Boot a private multi-node Slurm cluster for the tests (issue 28): munged and slurmctld on this host,
and one slurmd per node, each a host of its own: its own network namespace (an address on a private
bridge this file makes) and its own UTS namespace (its own hostname). They share this machine's
filesystem (the mount namespace is the host's), so a directory res writes is "shared" by construction.

    node1, node2   2 CPUs, 2048 MB   (Weight=1: Slurm fills these first)
    node3          4 CPUs, 8192 MB   the big node (Weight=10: taken last, as sites do with big nodes)

The figures are the configuration's, not the machine's: `SlurmdParameters=config_overrides` makes
each slurmd take what slurm.conf says. The addresses come from one /24 (10.213.N.0/24, N random per
boot) used only on that bridge; nothing but these test hosts is ever contacted. Everything is started
in the foreground and stopped by the pids recorded at start (tests/slurmcluster.py's daemons,
reused); a node's jobs are the processes in its network namespace (`ip netns pids`), so what a node
ran can be killed by pid without touching anything else. The bridge, the veth pairs and the network
namespaces are removed at stop.

    python3 tests/slurmnodes.py start DIR   -> prints `export SLURM_CONF=...`
    python3 tests/slurmnodes.py stop DIR    -> stops what `start DIR` started, removes its network
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import slurmcluster  # noqa: E402
from slurmcluster import _pids, _save_pids, _spawn, _until, end_pid, environment  # noqa: E402

# name -> (CPUs, RealMemory MB, Weight)
NODES = {"node1": (2, 2048, 1), "node2": (2, 2048, 1), "node3": (4, 8192, 10)}
BIG = "node3"
SLURMD_TIMEOUT_S = 10  # a node that stops answering is DOWN (and its jobs NODE_FAIL) after this


def missing() -> str | None:
    """Why no multi-node cluster can be booted here (None: it can)."""
    why = slurmcluster.missing()
    if why:
        return why
    for tool in ("ip", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install iproute2 util-linux): no network namespaces for the nodes"
    probe = f"res-probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return f"cannot make a network namespace here (ip netns add: {' '.join(r.stderr.split())[:200]})"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    r = subprocess.run(["unshare", "--uts", "true"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        return f"cannot make a UTS namespace here (unshare --uts: {' '.join(r.stderr.split())[:200]})"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {' '.join(r.stderr.split())[:300]}")
    return r


def _net(base: Path) -> dict:
    try:
        return json.loads((base / "net.json").read_text())
    except (OSError, ValueError):
        return {}


def _free_subnet() -> str:
    """10.213.N (N random) that no interface of this machine has an address in."""
    used = _ip("-o", "-4", "addr", "show").stdout
    for _ in range(100):
        prefix = f"10.213.{int.from_bytes(os.urandom(1), 'big')}"
        if f" {prefix}." not in used:
            return prefix
    raise RuntimeError("no free 10.213.N.0/24 on this machine")


def make_network(base: Path) -> dict:
    """The bridge (this host at .1) and one network namespace per node (node i at .10+i), each with a
    veth pair into the bridge. What is made is recorded first, so stop() removes a half-made one too."""
    tag = os.urandom(3).hex()
    prefix = _free_subnet()
    net = {"bridge": f"rb{tag}", "prefix": prefix, "host": f"{prefix}.1",
           "nodes": {name: {"ns": f"res-{tag}-{name}", "veth": f"rv{tag}{i}", "addr": f"{prefix}.{10 + i}"}
                     for i, name in enumerate(NODES, start=1)}}
    (base / "net.json").write_text(json.dumps(net))
    br = net["bridge"]
    _ip("link", "add", br, "type", "bridge")
    _ip("addr", "add", f"{net['host']}/24", "dev", br)
    _ip("link", "set", br, "up")
    for node in net["nodes"].values():
        ns, veth = node["ns"], node["veth"]
        _ip("netns", "add", ns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", veth + "p")
        _ip("link", "set", veth, "master", br, "up")
        _ip("link", "set", veth + "p", "netns", ns)
        _ip("-n", ns, "link", "set", veth + "p", "name", "eth0")
        _ip("-n", ns, "addr", "add", f"{node['addr']}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
    return net


def remove_cgroups() -> None:
    """The nodes' cgroup folders (/sys/fs/cgroup/CONTROLLER/slurm_NODE/…: Debian's slurmd keeps one
    tree per node name), emptied of processes by stop(): removed leaves first, with rmdir, which
    leaves alone any folder still in use (another run's cluster of the same node names)."""
    roots = [Path("/sys/fs/cgroup") / ctrl / f"slurm_{name}" for name in NODES
             for ctrl in (os.listdir("/sys/fs/cgroup") if os.path.isdir("/sys/fs/cgroup") else [])]
    for root in roots:
        if not root.is_dir() or root.is_symlink():
            continue
        for folder, subdirs, _ in sorted(os.walk(root), key=lambda t: -t[0].count("/")):
            try:
                os.rmdir(folder)
            except OSError:
                pass


def remove_network(base: Path) -> None:
    net = _net(base)
    for node in net.get("nodes", {}).values():
        _ip("netns", "del", node["ns"], check=False)  # its end of the veth pair goes with it, and so the pair
        _ip("link", "del", node["veth"], check=False)
    if net.get("bridge"):
        _ip("link", "del", net["bridge"], check=False)


def write_config(base: Path, net: dict, sizes: dict | None = None) -> Path:
    """slurm.conf and cgroup.conf; `sizes`: name -> (CPUs, RealMemory MB, Weight) replacing NODES'
    figures for those nodes (bench/crowd.py sizes its cluster to the machine)."""
    unknown = sorted(set(sizes or {}) - set(NODES))
    if unknown:
        raise ValueError(f"no such node: {', '.join(unknown)} (the nodes are {', '.join(NODES)})")
    slurmcluster.prepare(base)
    for name in NODES:
        (base / "spool" / f"slurmd-{name}").mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    nodes = [f"NodeName={name} NodeHostname={name} NodeAddr={net['nodes'][name]['addr']} CPUs={cpus} "
             f"RealMemory={mem} Weight={weight} State=UNKNOWN"
             for name, (cpus, mem, weight) in {**NODES, **(sizes or {})}.items()]
    conf = base / "slurm.conf"
    conf.write_text(slurmcluster.conf_text(
        base, f"{host}({net['host']})", nodes, ",".join(NODES),
        SlurmdLogFile=f"{base}/log/slurmd-%n.log",
        SlurmdParameters="config_overrides",  # each node is what slurm.conf says, not this machine's size
        SlurmdTimeout=str(SLURMD_TIMEOUT_S),
        # A node that answers again after it was DOWN (its slurmd restarted) takes jobs again.
        ReturnToService="2"))
    (base / "cgroup.conf").write_text(slurmcluster.CGROUP_CONF)
    return conf


def start_node(base: Path, name: str) -> int:
    """Start NAME's slurmd (again): in its node's network namespace, in a UTS namespace of its own
    named after it, in the foreground (nsenter, unshare and sh each exec the next: the pid recorded is
    slurmd's)."""
    base = Path(base)
    ns = _net(base)["nodes"][name]["ns"]
    argv = ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--uts", "sh", "-c",
            'hostname "$1" && exec "$2" -D -N "$1" -f "$3"', "sh", name, slurmcluster._exe("slurmd"),
            str(base / "slurm.conf")]
    pids = _pids(base)
    pids[f"slurmd-{name}"] = pid = _spawn(base, f"slurmd-{name}", argv, {**os.environ, **environment(base)})
    _save_pids(base, pids)
    return pid


def node_pids(base: Path, name: str) -> list[int]:
    """Every process in NAME's network namespace: its slurmd, and what it started (slurmstepd, jobs)."""
    ns = _net(Path(base)).get("nodes", {}).get(name, {}).get("ns")
    if not ns:
        return []
    r = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in r.stdout.split() if p.isdigit()]


def kill_node(base: Path, name: str) -> list[int]:
    """The node lost: its slurmd and every process it ran, SIGKILLed by pid (nothing says goodbye to
    slurmctld). Returns the pids killed."""
    base = Path(base)
    pids = _pids(base)
    pids.pop(f"slurmd-{name}", None)
    _save_pids(base, pids)
    killed = node_pids(base, name)
    for pid in killed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _until(lambda: not node_pids(base, name), 30, f"{name}'s processes did not end")
    return killed


def node_states(base: Path) -> dict[str, str]:
    r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%T"], env={**os.environ, **environment(base)},
                       capture_output=True, text=True, timeout=30)
    out = {}
    for line in r.stdout.splitlines():
        name, _, state = line.partition("|")
        out[name.strip()] = state.strip()
    return out


def nodes_ready(base: Path, names=None) -> bool:
    states = node_states(base)
    return all(states.get(n, "").rstrip("*") in ("idle", "mixed", "allocated") for n in (names or NODES))


def booted_here(conf: str | None) -> Path | None:
    """The directory of a cluster this file booted whose slurm.conf is `conf`, if its nodes answer."""
    if not conf:
        return None
    base = Path(conf).resolve().parent
    if not (base / "net.json").exists() or not _pids(base):
        return None
    try:
        return base if nodes_ready(base) else None
    except (OSError, subprocess.SubprocessError):
        return None


def start(base: Path, sizes: dict | None = None) -> dict[str, str]:
    """Boot the cluster under BASE (its nodes as NODES says, or as `sizes` says for those it names: see
    write_config); returns the environment its clients need."""
    base = Path(base).resolve()
    why = missing()
    if why:
        raise RuntimeError(why)
    base.mkdir(parents=True, exist_ok=True)
    try:
        net = make_network(base)
        write_config(base, net, sizes)
        for name in ("munged", "slurmctld"):
            slurmcluster.start_daemon(base, name)
        for name in NODES:
            start_node(base, name)
        _until(lambda: nodes_ready(base), 60, f"the nodes did not come up; see {base}/log")
    except Exception:
        stop(base)
        raise
    return environment(base)


def stop(base: Path) -> None:
    base = Path(base).resolve()
    for name in NODES:
        pid = _pids(base).get(f"slurmd-{name}")
        if pid is not None:
            end_pid(pid, signal.SIGTERM, 20)
            pids = _pids(base)
            pids.pop(f"slurmd-{name}", None)
            _save_pids(base, pids)
        # what the node ran and left behind (a job whose slurmd was killed): its namespace's pids
        for pid in node_pids(base, name):
            end_pid(pid, signal.SIGKILL, 10)
    for name in ("slurmctld", "munged"):
        slurmcluster.stop_daemon(base, name)
    remove_network(base)
    remove_cgroups()


def main(argv: list[str]) -> int:
    from bootcli import main as boot_main

    return boot_main(argv, start, stop)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
