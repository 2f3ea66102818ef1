"""A job's share, told to the tools it runs (DESIGN §5.9): the variables common build and test tools
read to size their parallelism and memory, set from the job's grant unless the caller set them.
Pure and import-light (on the job start path). docs/job-share.md cites each tool's own documentation
for its variable and says why the fractions below are what they are."""
from __future__ import annotations

import math

# Of the memory grant: below the unit's MemoryHigh (0.9 x MemoryMax, runtime/systemd.py), so that the
# runtime collects before the kernel throttles, and the rest is for memory the limit does not count.
GO_MEM_FRACTION = 0.80  # GOMEMLIMIT: the Go runtime's soft limit (binary mappings, cgo, the OS's share outside it)
NODE_HEAP_FRACTION = 0.75  # --max-old-space-size: V8's old space only (young space, code, Buffers are outside it)

# Threads: each is the whole share, N; libraries with their own variable read OMP_NUM_THREADS when it
# is unset (OpenBLAS, MKL, NumExpr), and their own takes precedence over it.
OMP = "OMP_NUM_THREADS"
FALLS_BACK_ON_OMP = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def share_env(cpus: float, mem_gb: float, caller: dict[str, str], mem_enforced: bool = True) -> dict[str, str]:
    """The variables to add to a job's environment for a grant of `cpus` CPUs and `mem_gb` GB; none
    the caller (`caller`, the recorded environment) already has. N is the whole CPUs of the grant
    (at least 1); sizes are in MiB (res's GB are GiB). `mem_enforced` False (a gated job: its size is
    the gate's guess, booked but not a limit): no heap limits, which would end at the guess a command
    that would have run (GOMEMLIMIT is soft, but said only with a real limit, like NODE_OPTIONS)."""
    n = str(max(1, math.floor(cpus + 1e-9)))
    mb = max(1, int(mem_gb * 1024))
    told = {
        "RES_CPUS": n,
        "RES_MEM_MB": str(mb),
        # GNU make runs one job at a time unless told; a caller's MAKEFLAGS (e.g. a recipe's, with
        # make's jobserver in it) is left whole.
        "MAKEFLAGS": f"-j{n}",
        "CARGO_BUILD_JOBS": n,
        "CMAKE_BUILD_PARALLEL_LEVEL": n,
        "GOMAXPROCS": n,
        "GOMEMLIMIT": f"{max(1, int(mb * GO_MEM_FRACTION))}MiB",
        "PYTEST_XDIST_AUTO_NUM_WORKERS": n,  # what `pytest -n auto` / `-n logical` start
        OMP: n,
    }
    if OMP not in caller:  # the caller's OMP_NUM_THREADS speaks for the libraries that fall back on it
        told.update(dict.fromkeys(FALLS_BACK_ON_OMP, n))
    if not mem_enforced:
        del told["GOMEMLIMIT"]
    out = {k: v for k, v in told.items() if k not in caller}
    # Variables that hold a list of options: ours is added to the caller's list unless that list
    # already sets the same thing (then the caller's stands); a later option wins in each tool.
    lists = [("GRADLE_OPTS", "org.gradle.workers.max", f"-Dorg.gradle.workers.max={n}"),
             ("MAVEN_OPTS", "ActiveProcessorCount", f"-XX:ActiveProcessorCount={n}")]
    if mem_enforced:
        lists.insert(0, ("NODE_OPTIONS", "--max-old-space-size", f"--max-old-space-size={max(1, int(mb * NODE_HEAP_FRACTION))}"))
    for name, key, ours in lists:
        theirs = caller.get(name, "")
        if key not in theirs.replace("_", "-"):  # node takes --max_old_space_size too
            out[name] = f"{theirs} {ours}" if theirs.strip() else ours
    return out
