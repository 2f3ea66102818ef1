"""A job knows its share (DESIGN §5.9), on a real unit through the real CLI: the variables a job sees
for its grant, the caller's own values reaching it unchanged, and GNU make itself running one recipe
at a time under a 1-CPU grant (and four at once when the caller says -j4)."""
from __future__ import annotations

import json
import shutil

import pytest

from clihelp import PY, res  # noqa: F401
from reconciler.core.share import share_env

pytestmark = pytest.mark.systemd

# Every name share_env may set: taken out of the environment the test's `res` calls pass on, so that
# what the job sees is the share, or what the test itself sets (not this shell's, nor a res job's).
NAMES = sorted(share_env(1, 1, {}))
PROBE = "import json, os, sys; print(json.dumps({k: os.environ.get(k) for k in sys.argv[1:]}))"


def job_sees(res, *names: str, env: dict | None = None, cpus: str = "1", mem: str = "512M") -> dict:
    r = res("run", "--wait", "--mem", mem, "--cpus", cpus, "--for", "1m", "--", PY, "-c", PROBE, *names, env=env)
    assert r.code == 0, str(r)
    return json.loads(r.out)


@pytest.fixture
def bare(res):
    for name in NAMES:
        res.env.pop(name, None)
    return res


def test_the_job_sees_its_share(bare):
    got = job_sees(bare, *NAMES)
    assert got == {"RES_CPUS": "1", "RES_MEM_MB": "512", "MAKEFLAGS": "-j1", "CARGO_BUILD_JOBS": "1",
                   "CMAKE_BUILD_PARALLEL_LEVEL": "1", "GOMAXPROCS": "1", "GOMEMLIMIT": "409MiB",
                   "PYTEST_XDIST_AUTO_NUM_WORKERS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                   "MKL_NUM_THREADS": "1", "NUMEXPR_NUM_THREADS": "1", "NODE_OPTIONS": "--max-old-space-size=384",
                   "GRADLE_OPTS": "-Dorg.gradle.workers.max=1", "MAVEN_OPTS": "-XX:ActiveProcessorCount=1"}


def test_what_the_caller_set_reaches_the_job_unchanged(bare):
    mine = {"PYTEST_XDIST_AUTO_NUM_WORKERS": "16", "MAKEFLAGS": "-k", "GOMEMLIMIT": "3GiB", "OMP_NUM_THREADS": "8",
            "NODE_OPTIONS": "--enable-source-maps"}
    got = job_sees(bare, *NAMES, env=mine)
    assert {k: got[k] for k in ("PYTEST_XDIST_AUTO_NUM_WORKERS", "MAKEFLAGS", "GOMEMLIMIT", "OMP_NUM_THREADS")} == \
        {k: mine[k] for k in ("PYTEST_XDIST_AUTO_NUM_WORKERS", "MAKEFLAGS", "GOMEMLIMIT", "OMP_NUM_THREADS")}
    assert got["OPENBLAS_NUM_THREADS"] is None  # the caller's OMP_NUM_THREADS=8 speaks for OpenBLAS too
    assert got["NODE_OPTIONS"] == "--enable-source-maps --max-old-space-size=384"  # theirs, then ours
    assert got["CARGO_BUILD_JOBS"] == "1"  # one the caller did not set is still told


# Each recipe leaves a start and an end line in `log`; how many ran at once is read back from it.
MAKEFILE = "all: a b c\na b c:\n\t@echo start $@ >> log; sleep 0.5; echo end $@ >> log\n"


def most_at_once(lines: list[str]) -> int:
    running = top = 0
    for line in lines:
        running += 1 if line.startswith("start ") else -1
        top = max(top, running)
    return top


@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
@pytest.mark.parametrize("callers", [{}, {"MAKEFLAGS": "-j4"}], ids=["the-share", "callers-j4"])
def test_make_runs_as_many_recipes_as_it_is_told(bare, callers):
    (bare.work / "Makefile").write_text(MAKEFILE)
    r = bare("run", "--wait", "--mem", "256M", "--cpus", "1", "--for", "1m", "--", "make", "-s", env=callers)
    assert r.code == 0, str(r)
    lines = (bare.work / "log").read_text().splitlines()
    assert sorted(lines) == sorted(f"{k} {t}" for k in ("start", "end") for t in "abc"), lines
    # MAKEFLAGS=-j1 on a 1-CPU grant: one recipe at a time; a caller's own -j4 reaches make unchanged
    # (each recipe lasts long enough for make to have started another meanwhile)
    if callers:
        assert most_at_once(lines) >= 2, lines
    else:
        assert most_at_once(lines) == 1, lines
