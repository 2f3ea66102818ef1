"""A pass that runs while a writer is between replacing queue.toml and logging its change must not
take the writer's own entry for one added by hand (it would be held, never started). Found by
tests/systemd/test_concurrency.py under load: 16 `res run --queue` at once, one answered
"accepted; not decided yet". Real files, the in-memory runtime."""
from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruntime import FakeRuntime  # noqa: E402

from reconciler.config.paths import Paths  # noqa: E402
from reconciler.config.policy import load_policy  # noqa: E402
from reconciler.desired.writer import Writer  # noqa: E402
from reconciler.loop import tick  # noqa: E402

JOB = dict(title="build", project="p", mem_gb=0.1, cpus=0.1, est_s=60, cmd=["true"], cwd="/", created=1.0)


def test_a_pass_in_the_middle_of_a_writers_edit_holds_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setattr(tick, "WRITER_WAIT_S", 0.2)
    engine = tick.Engine(Paths(tmp_path / "state"), load_policy(), runtime=FakeRuntime())

    def judged() -> tuple[list[str], list[str]]:
        """(held as added by hand, not started this pass for want of a check), as a pass judges."""
        desired, _ = tick.load_desired(engine.paths, engine.store, save=False)
        asyncio.run(engine.track_changes(time.time(), desired, engine.store.records()))
        return desired.hand_added, desired.unchecked

    try:
        judged()  # the files as they are, known
        engine.writer.add(JOB)  # one entry the pass has seen written by the writer
        assert judged() == ([], [])
        between = []
        real = Writer._log_change

        def pass_before_the_log_line(self, *args):
            between.append(judged())  # another process's pass
            return real(self, *args)

        monkeypatch.setattr(Writer, "_log_change", pass_before_the_log_line)
        second = engine.writer.add(JOB)
        monkeypatch.setattr(Writer, "_log_change", real)
        after = judged()
    finally:
        asyncio.run(engine.close())
    # the pass waited for the writer, then judged nothing new: the new entry is neither held as
    # added by hand nor started unchecked
    assert between == [([], [second.id])]
    assert after == ([], [])  # once logged, the entry is the writer's
