"""A hand edit that reaches the writer before any pass has seen it (DESIGN §5.7): the writer records
the change made outside res (with its diff) and holds a forged queue entry before it writes, so its
own change line never vouches for the forged entry, which is never started. Real files and
state.db, the in-memory runtime."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fakeruntime import FakeRuntime  # noqa: E402

from reconciler.config.paths import Paths  # noqa: E402
from reconciler.config.policy import load_policy  # noqa: E402
from reconciler.loop import oneshot, tick  # noqa: E402

JOB = dict(title="build", project="p", mem_gb=0.1, cpus=0.1, est_s=60, cmd=["true"], cwd="/", created=1.0)
FORGED = '\n[[job]]\nid = "r-7"\ntitle = "forged"\nmem_gb = 0.1\nest_s = 60\ncreated = 1.0\ncmd = ["/bin/true"]\n'


@pytest.fixture
def engine(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("RES_POLICY_FILE", str(tmp_path / "policy.toml"))
    e = tick.Engine(Paths(tmp_path / "state"), load_policy(), runtime=FakeRuntime())
    asyncio.run(e.tick())  # the first look: the files as they are
    try:
        yield e
    finally:
        asyncio.run(e.close())


def _outside(engine, file: str) -> list[str]:
    return [summary for _, f, how, _, summary in engine.store.changes(0.0, None) if f == file and how == "outside"]


@pytest.mark.parametrize("write", ["add", "remove"])
def test_a_forged_entry_the_writer_meets_before_any_pass_is_held_and_logged(engine, write):
    first = engine.writer.add(JOB)
    asyncio.run(engine.tick())  # a pass has seen the writer's file
    queue = engine.paths.queue
    queue.write_text(queue.read_text() + FORGED)  # by hand; the very next thing is a writer's edit
    if write == "add":
        made = engine.writer.add(JOB)
        assert made.id == "r-8"  # past the forged id: ids are never reused
    else:
        assert engine.writer.remove([first.id]) == [first.id]
    # recorded by the writer itself, before any pass: the diff, and the entry held
    assert _outside(engine, "queue.toml") == ["r-7 added"]
    assert engine.store.get_meta_json("hand_added", []) == ["r-7"]
    p = asyncio.run(engine.tick())
    assert [a.kind for a in p.for_id("r-7")] == ["hold"]
    assert engine.store.get("r-7") is None  # never recorded, never started
    if write == "add":
        assert engine.store.get("r-8") is not None and engine.store.get("r-8").phase.value != "queued"
    asyncio.run(engine.tick())
    assert engine.store.get("r-7") is None and _outside(engine, "queue.toml") == ["r-7 added"]  # logged once


def test_a_hand_edit_of_game_toml_the_writer_meets_first_is_logged_as_outside(engine):
    engine.writer.set_game(False)
    asyncio.run(engine.tick())
    game = engine.paths.game
    game.write_text(game.read_text().replace("on = false", "on = true"))
    engine.writer.set_game(False)  # before any pass saw the edit
    assert _outside(engine, "game.toml") == ["on false → true"]


def test_the_writers_own_last_file_is_not_checked_again(engine, monkeypatch):
    engine.writer.add(JOB)
    from reconciler.desired import changes

    calls = []
    monkeypatch.setattr(changes, "record_outside", lambda paths: calls.append(paths))
    engine.writer.add(JOB)  # the file is what the writer left: no state.db opened on the hot path
    assert calls == []
    queue = engine.paths.queue
    queue.write_text(queue.read_text() + "# a comment by hand\n")
    engine.writer.add(JOB)
    assert len(calls) == 1


def test_a_check_that_cannot_be_made_writes_nothing(engine, monkeypatch):
    from reconciler.desired import changes
    from reconciler.desired.reader import DesiredError

    def broken(paths):
        raise OSError("disk on fire")

    engine.writer.add(JOB)
    monkeypatch.setattr(changes, "record_outside", broken)
    queue = engine.paths.queue
    queue.write_text(queue.read_text() + FORGED)
    before = queue.read_bytes()
    with pytest.raises(DesiredError, match=r"could not check it for changes made outside res \(disk on fire\); "
                                           r"nothing was changed$"):
        engine.writer.add(JOB)
    assert queue.read_bytes() == before


# ---------------------------------------------------------------- before any pass (issue 40 item 3)

FORGED_ONLY = ('next_id = 8\n\n[[job]]\nid = "r-7"\ntitle = "forged"\nmem_gb = 0.1\nest_s = 60\ncreated = 1.0\n'
               'cmd = ["/bin/true"]\n')


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A state directory where no pass has ever run; engine(): the reconciler's first instance."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("RES_POLICY_FILE", str(tmp_path / "policy.toml"))
    paths = Paths(tmp_path / "state")
    made = []

    def engine():
        made.append(tick.Engine(paths, load_policy(), runtime=FakeRuntime()))
        return made[-1]

    try:
        yield paths, engine
    finally:
        for e in made:
            asyncio.run(e.close())


def _started(engine) -> list[str]:
    return [s.job_id for s in engine.runtime.specs]


def test_init_a_hand_edit_then_res_run_holds_the_forged_entry(fresh):
    from reconciler.desired.writer import Writer

    paths, engine = fresh
    Writer(paths).init()  # `res init`: the templates, no pass
    paths.queue.write_text(paths.queue.read_text() + FORGED)
    e = engine()
    made = e.writer.add(JOB)  # `res run`: the writer, then the first pass ever
    p = asyncio.run(e.tick())
    assert [a.kind for a in p.for_id("r-7")] == ["hold"] and p.for_id("r-7")[0].detail == {"code": "hand_added"}
    assert _started(e) == [made.id] and e.store.get("r-7") is None
    asyncio.run(e.tick())
    assert _started(e) == [made.id]


def test_a_queue_written_wholly_by_hand_starts_nothing(fresh):
    paths, engine = fresh
    paths.ensure()
    paths.queue.write_text(FORGED_ONLY)
    e = engine()
    p = asyncio.run(e.tick())
    assert [a.kind for a in p.for_id("r-7")] == ["hold"]
    made = e.writer.add(JOB)
    asyncio.run(e.tick())
    assert _started(e) == [made.id] and made.id == "r-8"


def test_the_first_pass_of_a_loop_after_init_and_a_hand_edit_holds_it(fresh):
    from reconciler.desired.writer import Writer

    paths, engine = fresh
    Writer(paths).init()
    paths.queue.write_text(paths.queue.read_text() + FORGED)
    e = engine()
    for _ in range(3):
        p = asyncio.run(e.tick())
    assert [a.kind for a in p.for_id("r-7")] == ["hold"] and _started(e) == []
    assert e.store.get_meta_json("hand_added", []) == ["r-7"]


def test_a_dry_run_before_any_pass_shows_the_hand_edit_held(fresh):
    from reconciler.core.models import World
    from reconciler.desired.writer import Writer

    paths, _ = fresh
    Writer(paths).init()
    paths.queue.write_text(paths.queue.read_text() + FORGED)
    p, _ = asyncio.run(oneshot.dry_run(paths, load_policy(), World(mem_available_gb=64.0, mem_total_gb=64.0, nproc=8)))
    assert [a.kind for a in p.for_id("r-7")] == ["hold"]
    assert not paths.db.exists()  # read-only: nothing made


def test_the_writers_own_entries_after_init_start_from_the_first_pass(fresh):
    from reconciler.desired.writer import Writer

    paths, engine = fresh
    Writer(paths).init()
    first = Writer(paths).add(JOB)  # written by res, before any pass (no state.db yet)
    second = Writer(paths).add({**JOB, "title": "two"})
    e = engine()
    asyncio.run(e.tick())
    assert _started(e) == [first.id, second.id]


def test_an_entry_that_ran_before_is_recovered_not_held_after_state_db_is_lost(fresh):
    paths, engine = fresh
    e = engine()
    made = e.writer.add(JOB)
    asyncio.run(e.tick())
    assert _started(e) == [made.id]
    runtime = e.runtime
    asyncio.run(e.close())
    for p in paths.root.glob("state.db*"):
        p.unlink()
    (paths.desired / ".changes.jsonl").unlink()  # the writer's log gone too: nothing vouches for it
    e2 = tick.Engine(paths, load_policy(), runtime=runtime)
    try:
        p = asyncio.run(e2.tick())
        assert [a.kind for a in p.for_id(made.id)] == ["recover"]
        assert e2.store.get(made.id).phase.value == "running" and _started(e2) == [made.id]  # not again
    finally:
        asyncio.run(e2.close())


def test_a_pass_that_cannot_check_starts_nothing_unchecked(fresh, monkeypatch):
    from reconciler.config import locks

    paths, engine = fresh
    e = engine()
    asyncio.run(e.tick())  # a pass has seen the file (none yet)
    made = e.writer.add(JOB)
    monkeypatch.setattr(tick, "WRITER_WAIT_S", 0.05)
    with locks.locked(paths.writer_lock, timeout=5):  # a writer at work for longer than the pass waits
        p = asyncio.run(e.tick())
    assert [(a.kind, a.detail["code"]) for a in p.for_id(made.id)] == [("hold", "unchecked")]
    assert _started(e) == []
    asyncio.run(e.tick())
    assert _started(e) == [made.id]
