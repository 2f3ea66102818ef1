"""Shared fixtures. The systemd tier needs a user manager: the one in the environment if reachable
(a desktop), else a private dbus-daemon + systemd --user booted once per run (DESIGN §9) and stopped by
pid at the end. Slice and unit names are unique per run, so a desktop is left as it was."""
from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import skips  # noqa: E402
import slurmcluster  # noqa: E402
import usermgr  # noqa: E402

RUN_TAG = "t" + secrets.token_hex(3)  # unique per test run
# A `res` call that finds no loop starts one (policy loop_autostart): in the tests only where a test
# asks for it (tests/systemd/test_autostart.py), so that every other test decides as it says, and no
# loop of a test outlives it.
os.environ["RES_LOOP_AUTOSTART"] = "false"


@pytest.fixture(autouse=True)
def _no_res_variable_leaks(request):
    """A test that leaves a RES_* variable changed in this process changes the policy of every test
    after it (environment beats file): named here, at the test that did it, not where it bites (a
    fresh-clone run once saw a later test's reserve and headroom at 0)."""
    before = {k: v for k, v in os.environ.items() if k.startswith("RES_")}
    yield
    after = {k: v for k, v in os.environ.items() if k.startswith("RES_")}
    if after != before:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        for k in changed:  # put back, so that one leak fails one test
            if k in before:
                os.environ[k] = before[k]
            else:
                os.environ.pop(k, None)
        pytest.fail(f"{request.node.nodeid} left RES_* variables changed in the test process: {changed}")

# The tier of a test is its folder (DESIGN §9): `python3 -m pytest -q tests/pure` runs in seconds with
# nothing booted; `-m "not systemd"` leaves out every test that needs a user manager.
TIER_MARKS = {"pure": ("pure",), "files": ("files",), "systemd": ("systemd",), "fault": ("fault", "systemd"),
              "hostile": ("hostile", "systemd"), "slurm": ("slurm", "systemd"),
              "agentcli": ("agentcli",)}


# The tiers that mostly wait run beside the rest, in a worker of their own and in their order
# (pyproject's addopts: `-n auto`, pytest-xdist; the scheduler below): the cluster tier waits on
# Slurm's periods, the kill tiers on SIGKILLs and leases (13 % and 30 % of both cores measured alone,
# docs/design-notes.md). Every other tier stays in one worker, in order, as before. Two workers, not
# three: each test beside one other at most (they share the one user manager and the machine's memory).
SIDE_BY_SIDE = {"slurm": "waits", "fault": "waits", "hostile": "waits"}
REST = "rest"
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        try:
            tier = Path(str(item.path)).relative_to(TESTS).parts[0]
        except ValueError:
            continue
        for mark in TIER_MARKS.get(tier, ()):
            item.add_marker(getattr(pytest.mark, mark))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduling with a tier group for a scope: each group goes whole to one worker,
    in its order (not `--dist loadgroup`: under pytest 9.2 its marks no longer reach the test ids)."""
    from xdist.scheduler import LoadScopeScheduling

    class TierGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return TierGroups(config, log)


def group_of(nodeid: str) -> str:
    """The worker group of a test by its id, or of a path under the checkout (`tests/slurm/test_x.py::
    test_y`, `tests/slurm`: the waiting tiers')."""
    parts = nodeid.split("::", 1)[0].split("/")
    return SIDE_BY_SIDE.get(parts[1], REST) if len(parts) > 1 and parts[0] == TESTS.name else REST


def run_groups(args: list[str], invoked_in: Path) -> set[str]:
    """The worker groups a run of `args` (pytest's paths) holds: all of them for tests/ or above it."""
    groups: set[str] = set()
    for arg in args:
        path = (invoked_in / arg.split("::")[0]).resolve()
        if TESTS.is_relative_to(path):
            groups |= {REST, *SIDE_BY_SIDE.values()}
        else:
            rel = path.relative_to(TESTS.parent).as_posix() if path.is_relative_to(TESTS.parent) else ""
            groups.add(group_of(rel))
    return groups


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per group the run holds (none where it holds one: the run is not split),
    at most PYTEST_XDIST_AUTO_NUM_WORKERS where that is set (as res sets it for its jobs)."""
    n = len(run_groups(config.args, config.invocation_params.dir))
    try:
        n = min(n, int(os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or n))
    except ValueError:
        pass
    return n if n >= 2 else 0


_BOOTED = pytest.StashKey[ExitStack]()  # the private manager pytest_configure booted


def pytest_configure(config):
    """A run split over workers boots the private user manager here, before they start, so that
    they share it (each would boot one of its own: two at once are not known to work, DESIGN §12)."""
    if getattr(config, "workerinput", None) is not None or not config.getoption("tx", None):
        return
    if usermgr.manager_reachable() or (os.geteuid() != 0 and not os.path.isdir("/run/systemd/system")):
        return
    stack = ExitStack()
    stack.enter_context(booted(usermgr, "res-usermgr-", "a private user manager"))
    config.stash[_BOOTED] = stack


def pytest_unconfigure(config):
    stack = config.stash.get(_BOOTED, None)
    if stack is not None:
        stack.close()


@contextmanager
def booted(harness, prefix: str, what: str):
    """(its environment, its directory) of something `harness` (usermgr, slurmcluster) boots under a
    temporary directory, with that environment in os.environ meanwhile; stopped by pid and removed
    after, and the environment put back."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        env = harness.start(base)
    except RuntimeError as e:
        harness.stop(base)
        pytest.fail(f"could not boot {what}: {e}")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env, base
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        harness.stop(base)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def user_manager():
    """Environment variables that reach a running systemd user manager."""
    if usermgr.manager_reachable():
        yield {k: os.environ[k] for k in ("XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS", "XDG_CONFIG_HOME")
               if k in os.environ}
        return
    if os.geteuid() != 0 and not os.path.isdir("/run/systemd/system"):
        pytest.skip("no systemd user manager reachable and cannot boot one (needs /run/systemd/system)")
    with booted(usermgr, "res-usermgr-", "a private user manager") as (env, _):
        yield env


@pytest.fixture(scope="session")
def slurm_cluster():
    """A private single-node Slurm cluster (tests/slurmcluster.py), booted once per run and stopped by
    pid at the end; SLURM_CONF in the environment points every Slurm tool (and res) at it. Skipped
    with the reason where Slurm's packages are not installed (`.ci/run` installs them)."""
    why = slurmcluster.missing()
    if why:
        pytest.skip(f"no Slurm cluster can be booted here: {why}")
    reused = slurmcluster.booted_here(os.environ.get("SLURM_CONF"))
    if reused is not None:  # one booted by hand for this shell (python3 tests/slurmcluster.py start DIR)
        yield reused
        return
    with booted(slurmcluster, "res-slurm-", "a private Slurm cluster") as (_, base):
        yield base


_counter = iter(range(1, 1 << 30))


def _remove_unit_files(tag: str) -> None:
    """Unit files a test installed under its unique names (slices, the loop's service), from the
    user's unit directory and from the manager's runtime drop-ins (SetUnitProperties)."""
    from reconciler.runtime.unitfiles import user_unit_dir

    dirs = [user_unit_dir()]
    if os.environ.get("XDG_RUNTIME_DIR"):
        dirs.append(Path(os.environ["XDG_RUNTIME_DIR"]) / "systemd" / "user.control")
    for d in dirs:
        for p in d.glob(f"*{tag}*"):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        for wants in d.glob("*.wants"):
            for p in wants.glob(f"*{tag}*"):
                p.unlink(missing_ok=True)


@pytest.fixture
def res_env(tmp_path, monkeypatch):
    """A private state dir, policy file and unique slice/unit names for one test.

    Reserves are set so that tests are about the rules, not about this machine's size: the tests
    that need particular numbers set RES_* themselves or plan against a literal World."""
    n = next(_counter)
    tag = f"{RUN_TAG}x{n}"
    state = tmp_path / "state"
    monkeypatch.setenv("RES_STATE_DIR", str(state))
    monkeypatch.setenv("RES_POLICY_FILE", str(tmp_path / "policy.toml"))
    monkeypatch.setenv("RES_AGENTS_SLICE", f"{tag}.slice")
    monkeypatch.setenv("RES_JOBS_SLICE", f"{tag}-jobs.slice")
    monkeypatch.setenv("RES_UNIT_PREFIX", f"res{tag}")
    monkeypatch.setenv("RES_USER_RESERVE_CPUS", "0")
    monkeypatch.setenv("RES_GAME_RESERVE_CPUS", "0")
    # The loop's automatic cleanup works on the real /tmp: off in tests (test_clean tests it on its own roots).
    monkeypatch.setenv("RES_CLEAN_EVERY_MINUTES", "0")
    # Nor may a test's pass move the developer's own claude sessions into its slice: the adoption
    # tests turn this on (and skip when a session they did not start runs).
    monkeypatch.setenv("RES_ADOPT_SESSIONS", "false")
    yield {"state": state, "tag": tag, "tmp": tmp_path}
    _remove_unit_files(tag)
