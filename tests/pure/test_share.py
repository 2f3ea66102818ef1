"""A job knows its share (DESIGN §5.9, core/share.py): the variables tools read, from the grant, never
over what the caller set. The tools' own readings of these values are in docs/job-share.md and
tests/systemd/test_share_systemd.py (a real make under a real unit)."""
from __future__ import annotations

import re

import pytest

from reconciler.core.share import share_env

BLAS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")
OPTION_LISTS = ("NODE_OPTIONS", "GRADLE_OPTS", "MAVEN_OPTS")


def told(n: int, mb: int, go_mib: int, node_mb: int) -> dict[str, str]:
    """Everything an empty caller environment is given for N CPUs and `mb` MiB."""
    return {"RES_CPUS": str(n), "RES_MEM_MB": str(mb), "MAKEFLAGS": f"-j{n}", "CARGO_BUILD_JOBS": str(n),
            "CMAKE_BUILD_PARALLEL_LEVEL": str(n), "GOMAXPROCS": str(n), "GOMEMLIMIT": f"{go_mib}MiB",
            "PYTEST_XDIST_AUTO_NUM_WORKERS": str(n), "OMP_NUM_THREADS": str(n),
            **dict.fromkeys(BLAS, str(n)), "NODE_OPTIONS": f"--max-old-space-size={node_mb}",
            "GRADLE_OPTS": f"-Dorg.gradle.workers.max={n}", "MAVEN_OPTS": f"-XX:ActiveProcessorCount={n}"}


GRANTS = [  # (cpus, mem_gb) -> N whole CPUs (floor, at least 1); GOMEMLIMIT 80 %, V8 old space 75 % of MiB
    pytest.param(1, 2, told(1, 2048, 1638, 1536), id="1cpu-2G"),
    pytest.param(0.5, 0.25, told(1, 256, 204, 192), id="half-a-cpu-is-one"),
    pytest.param(0.1, 0.5, told(1, 512, 409, 384), id="a-tenth-is-one"),
    pytest.param(3.7, 4, told(3, 4096, 3276, 3072), id="3.7-cpus-are-3"),
    pytest.param(3.0, 1.5, told(3, 1536, 1228, 1152), id="whole-3"),
    pytest.param(64, 200, told(64, 204800, 163840, 153600), id="big-machine"),
]


@pytest.mark.parametrize("cpus,mem_gb,expected", GRANTS)
def test_a_grant_tells_every_tool(cpus, mem_gb, expected):
    assert share_env(cpus, mem_gb, {}) == expected


@pytest.mark.parametrize("cpus,mem_gb", [(c, m) for c, m, _ in (p.values for p in GRANTS)] + [(1, 0.0001)])
def test_values_parse_as_the_tools_expect(cpus, mem_gb):
    env = share_env(cpus, mem_gb, {})
    assert all(isinstance(v, str) for v in env.values())
    n = int(env["RES_CPUS"])
    assert n >= 1
    counts = ("CARGO_BUILD_JOBS", "CMAKE_BUILD_PARALLEL_LEVEL", "GOMAXPROCS", "PYTEST_XDIST_AUTO_NUM_WORKERS",
              "OMP_NUM_THREADS", *BLAS)
    assert all(re.fullmatch(r"[1-9]\d*", env[k]) and int(env[k]) == n for k in counts), env
    assert re.fullmatch(rf"-j{n}", env["MAKEFLAGS"])  # make's short option, as MAKEFLAGS holds it
    m = re.fullmatch(r"([1-9]\d*)MiB", env["GOMEMLIMIT"])  # Go: bytes with an IEC suffix
    assert m
    mb = int(env["RES_MEM_MB"])
    # well under the unit's MemoryMax, so that Go collects before the kernel kills
    assert int(m.group(1)) < 0.9 * mb or mb == 1
    assert re.fullmatch(r"--max-old-space-size=[1-9]\d*", env["NODE_OPTIONS"])  # node: MiB
    assert re.fullmatch(rf"-Dorg\.gradle\.workers\.max={n}", env["GRADLE_OPTS"])
    assert re.fullmatch(rf"-XX:ActiveProcessorCount={n}", env["MAVEN_OPTS"])


SIMPLE = ("RES_CPUS", "RES_MEM_MB", "MAKEFLAGS", "CARGO_BUILD_JOBS", "CMAKE_BUILD_PARALLEL_LEVEL", "GOMAXPROCS",
          "GOMEMLIMIT", "PYTEST_XDIST_AUTO_NUM_WORKERS", "OMP_NUM_THREADS", *BLAS)


@pytest.mark.parametrize("name", SIMPLE)
@pytest.mark.parametrize("value", ["16", "", "-k"])  # any value, even an empty one, is the caller's choice
def test_a_variable_the_caller_set_is_not_told(name, value):
    caller = {name: value}
    env = share_env(1, 2, caller)
    assert name not in env  # job_env lays this over the caller's: absent here, the caller's stands
    assert caller == {name: value}  # and the caller's record is not touched
    assert set(env) == set(told(1, 2048, 1638, 1536)) - {name} - (set(BLAS) if name == "OMP_NUM_THREADS" else set())


def test_the_callers_omp_threads_speak_for_the_blas_libraries():
    """OpenBLAS, MKL and NumExpr read OMP_NUM_THREADS when their own variable is unset, and their own
    wins over it: telling them N would undo the caller's OMP_NUM_THREADS=8."""
    env = share_env(1, 2, {"OMP_NUM_THREADS": "8"})
    assert not set(BLAS) & set(env)
    # one of them set alone leaves the others (and OMP_NUM_THREADS) told
    env = share_env(1, 2, {"MKL_NUM_THREADS": "4"})
    assert "MKL_NUM_THREADS" not in env
    assert env["OMP_NUM_THREADS"] == env["OPENBLAS_NUM_THREADS"] == env["NUMEXPR_NUM_THREADS"] == "1"


@pytest.mark.parametrize("name,theirs,expected", [
    # ours joins the caller's other options (the tools read the list in order; theirs stay)
    ("NODE_OPTIONS", "--require ./trace.js", "--require ./trace.js --max-old-space-size=1536"),
    ("NODE_OPTIONS", "  ", "--max-old-space-size=1536"),
    ("GRADLE_OPTS", "-Xmx2g", "-Xmx2g -Dorg.gradle.workers.max=1"),
    ("MAVEN_OPTS", "-Xmx1g -Dfoo=bar", "-Xmx1g -Dfoo=bar -XX:ActiveProcessorCount=1"),
    # the caller's list already says it: left as it is
    ("NODE_OPTIONS", "--max-old-space-size=8192", None),
    ("NODE_OPTIONS", "--inspect --max_old_space_size=8192", None),  # node takes underscores too
    ("GRADLE_OPTS", "-Xmx2g -Dorg.gradle.workers.max=8", None),
    ("MAVEN_OPTS", "-XX:ActiveProcessorCount=4", None),
])
def test_option_lists_join_the_callers(name, theirs, expected):
    env = share_env(1, 2, {name: theirs})
    if expected is None:
        assert name not in env
    else:
        assert env[name] == expected
    others = set(OPTION_LISTS) - {name}
    assert all(k in env for k in others)  # each list is its own


def test_a_callers_makeflags_is_left_whole():
    """A `res run` in a make recipe carries make's MAKEFLAGS (its jobserver): no -j is added to it."""
    caller = {"MAKEFLAGS": " --jobserver-auth=fifo:/tmp/GMfifo1"}
    assert "MAKEFLAGS" not in share_env(4, 8, caller)


def test_a_gated_jobs_guessed_size_sets_no_heap_limit():
    """The gate books a guess, not a limit: no variable may end a command at it (V8's heap would)."""
    env = share_env(1, 0.25, {"NODE_OPTIONS": "--enable-source-maps"}, mem_enforced=False)
    assert "GOMEMLIMIT" not in env and "NODE_OPTIONS" not in env
    assert env["MAKEFLAGS"] == "-j1" and env["PYTEST_XDIST_AUTO_NUM_WORKERS"] == "1" and env["RES_MEM_MB"] == "256"
