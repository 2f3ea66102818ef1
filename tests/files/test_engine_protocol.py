"""The seams the loop's engine is handed across, typed: loop/tick.Engine is what the operations, the
loop's server and the commands' passes take (ops/engine.Engine, a Protocol), and every runtime says
what it talks to (Runtime.address). Real files (a state directory), no systemd."""
from __future__ import annotations

import asyncio

from fakeruntime import FakeRuntime

from reconciler.config.paths import Paths
from reconciler.loop.tick import Engine
from reconciler.ops import engine as seam
from ruleset import policy


def test_the_loops_engine_is_what_its_callers_take(tmp_path):
    e = Engine(Paths(tmp_path / "state"), policy(), runtime=FakeRuntime())
    try:
        assert isinstance(e, seam.Engine)
    finally:
        asyncio.run(e.close())


def test_every_runtime_says_what_it_talks_to(tmp_path):
    from reconciler.runtime.slurm import SlurmRuntime
    from reconciler.runtime.systemd import SystemdRuntime

    assert SystemdRuntime(unit_prefix="res", jobs_slice="agents-jobs.slice", logs_dir=tmp_path).address is None  # not connected
    assert SystemdRuntime(unit_prefix="res", jobs_slice="agents-jobs.slice", logs_dir=tmp_path,
                          bus_address="unix:path=/nonexistent").address is None  # only once connected
    assert SlurmRuntime(state_root=tmp_path, logs_dir=tmp_path).address is None
    assert FakeRuntime().address is None
