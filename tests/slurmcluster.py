"""Boot a private single-node Slurm cluster for the tests (DESIGN §9, §12): munged, slurmctld and
slurmd, each in the foreground in its own session, with their own slurm.conf, munge socket, ports,
state and logs under DIR, and stopped by the pids recorded at start. Only what this file started is
ever stopped. Needs Debian's `slurmctld slurmd slurm-client munge` (`.ci/run` installs them) and root
(slurmd runs jobs as their submitter).

    python3 tests/slurmcluster.py start DIR   -> prints `export SLURM_CONF=...`
    python3 tests/slurmcluster.py stop DIR    -> stops what `start DIR` started
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from reconciler.runtime.usermanager import end_pid  # noqa: E402

DAEMONS = ("munged", "slurmctld", "slurmd")
REAL_MEMORY_MB = 4096  # what the node offers: below this machine's RAM (a larger figure drains the node)


def missing() -> str | None:
    """Why no cluster can be booted here (None: it can)."""
    for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "sinfo"):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"{tool} is not installed (apt-get install slurmctld slurmd slurm-client munge)"
    if os.geteuid() != 0:
        return "slurmd must run as root to run jobs as their submitter"
    if not os.path.isdir("/sys/fs/cgroup/memory") and not os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return "no cgroup memory controller for Slurm's task/cgroup"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _exe(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def prepare(base: Path) -> None:
    """BASE's folders and its munge key (made once)."""
    for d in ("state", "spool", "log", "run", "munge"):
        (base / d).mkdir(parents=True, exist_ok=True)
    os.chmod(base / "munge", 0o700)
    key = base / "munge" / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)


def conf_text(base: Path, controller: str, nodes: list[str], partition_nodes: str, **settings: str) -> str:
    """slurm.conf of a private cluster under BASE: `controller` (SlurmctldHost), the NodeName lines,
    the nodes of its one partition; `settings` replace or add keys (SlurmdTimeout="10")."""
    # Job ids of their own: two clusters booted at once on one machine (two test runs) never share a
    # job's cgroup (/sys/fs/cgroup/memory/slurm/uid_0/job_N).
    first_job = int.from_bytes(os.urandom(3), "big") % 900_000 + 1000
    keys = {
        "ClusterName": "restest", "FirstJobId": str(first_job), "SlurmctldHost": controller,
        "SlurmUser": "root", "SlurmdUser": "root", "SlurmctldPort": str(_free_port()),
        "SlurmdPort": str(_free_port()), "AuthType": "auth/munge", "AuthInfo": f"socket={base}/munge/munge.sock",
        "CredType": "cred/munge", "StateSaveLocation": f"{base}/state", "SlurmdSpoolDir": f"{base}/spool/slurmd-%n",
        "SlurmctldPidFile": f"{base}/run/slurmctld.pid", "SlurmdPidFile": f"{base}/run/slurmd-%n.pid",
        "SlurmctldLogFile": f"{base}/log/slurmctld.log", "SlurmdLogFile": f"{base}/log/slurmd.log",
        "SlurmctldDebug": "info", "SlurmdDebug": "info", "ProctrackType": "proctrack/cgroup",
        "TaskPlugin": "task/cgroup", "SelectType": "select/cons_tres", "SelectTypeParameters": "CR_Core_Memory",
        "SchedulerType": "sched/backfill", "SchedulerParameters": "batch_sched_delay=0", "ReturnToService": "2",
        "MpiDefault": "none", "JobAcctGatherType": "jobacct_gather/cgroup", "JobAcctGatherFrequency": "1",
        "AccountingStorageType": "accounting_storage/none", "JobCompType": "jobcomp/none", "MinJobAge": "300",
        "KillWait": "5", "InactiveLimit": "0", "SlurmctldTimeout": "30", "SlurmdTimeout": "60",
    }
    keys.update(settings)
    lines = ["# A private cluster for res's tests (tests/slurmcluster.py, tests/slurmnodes.py)."]
    lines += [f"{k}={v}" for k, v in keys.items()]
    lines += nodes
    lines.append(f"PartitionName=debug Nodes={partition_nodes} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


CGROUP_CONF = """\
CgroupAutomount=yes
ConstrainCores=no
ConstrainRAMSpace=yes
ConstrainSwapSpace=yes
AllowedSwapSpace=0
"""


def write_config(base: Path) -> Path:
    host = socket.gethostname()
    prepare(base)
    cpus = os.cpu_count() or 1
    conf = base / "slurm.conf"
    conf.write_text(conf_text(base, host, [f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={REAL_MEMORY_MB} State=UNKNOWN"],
                              host))
    (base / "cgroup.conf").write_text(CGROUP_CONF)
    return conf


def _spawn(base: Path, name: str, argv: list[str], env: dict[str, str]) -> int:
    out = open(base / "log" / f"{name}.out", "ab")
    # cwd: its own directory (a daemon started from a directory removed later makes every job step
    # print "Unable to get current working directory" into the job's output).
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, cwd=str(base))
    out.close()
    return proc.pid


def _pids(base: Path) -> dict[str, int]:
    try:
        return json.loads((base / "pids.json").read_text())
    except (OSError, ValueError):
        return {}


def _save_pids(base: Path, pids: dict[str, int]) -> None:
    (base / "pids.json").write_text(json.dumps(pids))


def environment(base: Path) -> dict[str, str]:
    return {"SLURM_CONF": str(Path(base) / "slurm.conf")}


def start_daemon(base: Path, name: str) -> None:
    """Start one daemon (again), in the foreground in its own session; its pid is recorded."""
    base = Path(base)
    conf = base / "slurm.conf"
    env = {**os.environ, **environment(base)}
    argv = {
        "munged": [_exe("munged"), "-F", "--force", f"--socket={base}/munge/munge.sock",
                   f"--key-file={base}/munge/munge.key", f"--pid-file={base}/run/munged.pid",
                   f"--log-file={base}/log/munged.log", f"--seed-file={base}/munge/seed"],
        "slurmctld": [_exe("slurmctld"), "-D", "-f", str(conf)],
        "slurmd": [_exe("slurmd"), "-D", "-f", str(conf)],
    }[name]
    pids = _pids(base)
    pids[name] = _spawn(base, name, argv, env)
    _save_pids(base, pids)
    if name == "munged":
        _until(lambda: (base / "munge" / "munge.sock").exists(), 10, "munged did not make its socket")


def stop_daemon(base: Path, name: str, sig: int = signal.SIGTERM, wait_s: float = 20) -> None:
    """Stop one daemon this file started, by its recorded pid (and wait for it to end)."""
    pids = _pids(Path(base))
    pid = pids.pop(name, None)
    if pid is None:
        return
    end_pid(pid, sig, wait_s)
    _save_pids(Path(base), pids)


def _until(ok, seconds: float, why: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ok():
            return
        time.sleep(0.05)
    raise RuntimeError(why)


def node_ready(base: Path) -> bool:
    r = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env={**os.environ, **environment(base)},
                       capture_output=True, text=True, timeout=10)
    return r.returncode == 0 and r.stdout.strip() in ("idle", "mixed", "allocated")


def booted_here(conf: str | None) -> Path | None:
    """The directory of a cluster this file booted whose slurm.conf is `conf` (SLURM_CONF), if its
    node answers: reused by the tests rather than a second one booted."""
    if not conf:
        return None
    base = Path(conf).resolve().parent
    if not (base / "pids.json").exists() or not _pids(base):
        return None
    try:
        return base if node_ready(base) else None
    except (OSError, subprocess.SubprocessError):
        return None


def start(base: Path) -> dict[str, str]:
    """Boot the cluster under BASE; returns the environment its clients need."""
    base = Path(base).resolve()
    why = missing()
    if why:
        raise RuntimeError(why)
    base.mkdir(parents=True, exist_ok=True)
    write_config(base)
    try:
        for name in DAEMONS:
            start_daemon(base, name)
        _until(lambda: node_ready(base), 30, f"the node did not come up; see {base}/log")
    except Exception:
        stop(base)
        raise
    return environment(base)


def slurm_jobs(env: dict, comment: str) -> list[dict]:
    """Every job Slurm knows (ended ones too) whose comment is `comment`: id, name, state, node."""
    r = subprocess.run(["squeue", "--noheader", "--states=all", "--format=%i|%j|%T|%N|%k"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    out = []
    for line in r.stdout.splitlines():
        sid, name, state, node, k = (line.split("|", 4) + [""] * 5)[:5]
        if k.strip() == comment:
            out.append({"id": sid.strip(), "name": name.strip(), "state": state.strip(), "node": node.strip()})
    return out


def stop(base: Path) -> None:
    base = Path(base).resolve()
    for name in reversed(DAEMONS):
        stop_daemon(base, name)


def main(argv: list[str]) -> int:
    from bootcli import main as boot_main

    return boot_main(argv, start, stop)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
