"""The cluster tier: `res` on a real single-node Slurm cluster (tests/slurmcluster.py) and a real
systemd user manager. `cl` is the `res` fixture of tests/clihelp.py with the cluster in its
environment; every Slurm job a test's state directory submitted is cancelled at its end (by its
Slurm id, found by the comment res gives its jobs)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from clihelp import Res  # noqa: E402
import slurmcluster  # noqa: E402
from slurmcluster import slurm_jobs  # noqa: E402


@pytest.fixture
def cl(slurm_cluster, user_manager, res_env):
    r = Res(res_env)
    r.slurm = Path(slurm_cluster)
    r.comment = f"res:{r.state}"
    r.slurm_jobs = lambda: slurm_jobs(r.env, r.comment)
    try:
        yield r
    finally:
        try:
            live = [j["id"] for j in slurm_jobs(r.env, r.comment)
                    if j["state"] in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED")]
            if live:
                subprocess.run(["scancel", *live], env=r.env, capture_output=True, timeout=30)
        finally:
            r.cleanup()
            # slurmctld was stopped by a test and not started again: start it, for the next test
            pids = slurmcluster._pids(Path(slurm_cluster))
            for name in slurmcluster.DAEMONS:
                if name not in pids:
                    slurmcluster.start_daemon(Path(slurm_cluster), name)
            os.environ.setdefault("SLURM_CONF", str(Path(slurm_cluster) / "slurm.conf"))
