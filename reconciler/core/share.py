"""A job's share, told to the tools it runs (DESIGN §5.9): the variables common build and test tools
read to size their parallelism and memory, set from the job's grant unless the caller set them.
Pure. (Filled in by issue 25's work; docs/job-share.md cites each tool's own documentation.)"""
from __future__ import annotations

import math


def share_env(cpus: float, mem_gb: float, caller: dict[str, str]) -> dict[str, str]:
    """The variables to add to a job's environment for a grant of `cpus` CPUs and `mem_gb` GB; none
    the caller (`caller`, the recorded environment) already has."""
    n = max(1, math.floor(cpus + 1e-9))
    told = {"RES_CPUS": str(n), "RES_MEM_MB": str(max(1, int(mem_gb * 1024)))}
    return {k: v for k, v in told.items() if k not in caller}
