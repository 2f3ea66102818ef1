"""What a pass keeps between passes, on real files and a real state.db (no manager): the last good
desired state (loop/tick.py `load_desired`, DESIGN §2 step 2: the text of the last queue.toml that
read well, beside state.db, and the game's JSON in state.db), what it publishes for `res status`
(`publish`), and what it tracked of the user's files (desired/changes.py `track`)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from reconciler.config.paths import Paths
from reconciler.core.models import Action, Game, Plan, World, dump
from reconciler.desired.changes import track
from reconciler.desired.reader import read_desired
from reconciler.desired.writer import Writer
from reconciler.loop.tick import load_desired, publish
from reconciler.recorded.store import Store

JOB = dict(title="make e2e", project="p", mem_gb=1.0, cpus=1.0, est_s=600, queue=True, cmd=["make"], cwd="/tmp")


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    p = Paths(tmp_path / "state")
    p.ensure()
    return p


def add(paths: Paths, n: int) -> list[str]:
    return [r.id for r in Writer(paths).add_many([(dict(JOB, title=f"t{i}"), "job", None) for i in range(n)])]


def test_a_broken_queue_is_read_as_its_last_good_version_even_by_a_new_loop(paths):
    ids = add(paths, 3)
    with Store.open(paths) as store:
        desired, _ = load_desired(paths, store)
        assert [r.id for r in desired.requests] == ids and desired.queue_ok
    assert paths.last_good_queue.read_text() == paths.queue.read_text()
    assert oct(paths.last_good_queue.stat().st_mode & 0o777) == "0o600"
    got = read_desired(paths)
    desired, game_error = got  # still unpacks as the pair it always was (bench c unpacks it so)
    assert got.queue_text == paths.queue.read_text() and game_error is None and desired.queue_ok
    good = paths.queue.read_text()
    paths.queue.write_text(good + "\n[[job]\n")  # a hand edit gone wrong
    with Store.open(paths) as store:  # a loop started afresh: nothing in memory
        desired, _ = load_desired(paths, store)
        assert not desired.queue_ok and "queue.toml" in desired.queue_error
        assert [r.id for r in desired.requests] == ids  # not read as empty
    assert paths.last_good_queue.read_text() == good  # a broken file never becomes the last good one


def test_the_last_good_copy_follows_each_good_version_and_is_written_only_when_it_changed(paths):
    add(paths, 2)
    with Store.open(paths) as store:
        load_desired(paths, store)
        first = paths.last_good_queue.stat().st_ino
        load_desired(paths, store)  # nothing changed: not written again
        assert paths.last_good_queue.stat().st_ino == first
        add(paths, 2)
        desired, _ = load_desired(paths, store)
        assert paths.last_good_queue.stat().st_ino != first
        assert len(desired.requests) == 4 and paths.last_good_queue.read_text() == paths.queue.read_text()
        load_desired(paths, store, save=False)  # a dry run keeps nothing
        assert paths.last_good_queue.read_text() == paths.queue.read_text()


def test_the_old_form_of_the_last_good_state_is_read_and_then_replaced(paths):
    """state.db of an earlier res: the whole desired state as one JSON value."""
    ids = add(paths, 2)
    with Store.open(paths) as store:
        reqs = load_desired(paths, store, save=False)[0].requests
        store.set_meta("desired_last_good", json.dumps({"requests": [dump(r) for r in reqs],
                                                         "game": dump(Game(on=True, until=4e9))}))
    paths.queue.write_text("not toml [")
    (paths.game).write_text("on = maybe\n")
    with Store.open(paths) as store:
        desired, notices = load_desired(paths, store)
        assert [r.id for r in desired.requests] == ids and desired.game == Game(on=True, until=4e9)
        assert notices and "keeping game mode as it was" in notices[0]
    paths.queue.unlink()
    paths.game.unlink()
    with Store.open(paths) as store:
        load_desired(paths, store)  # good reads: kept the new way, the old value dropped
        assert store.get_meta("desired_last_good") is None
        assert json.loads(store.get_meta("desired_last_good_game")) == dump(Game())


def test_a_symlink_planted_as_the_last_good_copy_is_neither_read_nor_written_through(paths, tmp_path):
    ids = add(paths, 1)
    target = tmp_path / "victim.toml"
    target.write_text("next_id = 1\n")
    os.symlink(target, paths.last_good_queue)
    paths.queue.write_text("broken [")
    with Store.open(paths) as store:
        desired, _ = load_desired(paths, store)
        assert not desired.queue_ok and desired.requests == []  # the planted file is not read
    paths.queue.unlink()
    add(paths, 1)
    with Store.open(paths) as store:
        load_desired(paths, store)
    assert target.read_text() == "next_id = 1\n"  # not written through
    assert not paths.last_good_queue.is_symlink() and "r-2" in paths.last_good_queue.read_text()
    assert ids == ["r-1"]


def test_what_a_pass_publishes_is_the_whole_plan_as_json_pass_after_pass(paths):
    def plan(est: float) -> Plan:
        return Plan(actions=[Action("wait", "r-1", detail={"code": "queued", "position": 1, "est_start": est,
                                                           "waits_for": "lock", "lock": 'k"@/x', "lock_holder": "r-0"}),
                             Action("enqueue", "r-2", detail={"code": "queued", "position": 2, "est_start": None,
                                                              "waits_for": "sessions", "block": {"resource": "sessions"}}),
                             Action("hold", "r-3", title="by hand", reason="added outside res"),
                             Action("start", "r-4", detail={"code": "fits", "free_gb": 3.0})],
                    budget_mem_gb=4.0, notices=["n\u00e9"])

    world = World(mem_total_gb=16, mem_available_gb=8, nproc=4)
    with Store.open(paths) as store:
        for est in (100.0, 100.0, 250.0):  # the same details again, then one changed
            p = plan(est)
            publish(store, world, p, 7.0)
            got = json.loads(store.get_meta("last_tick"))
            assert got["queue"] == {a.id: a.detail for a in p.actions if a.kind in ("wait", "enqueue")}
            assert got["queue"]["r-1"]["est_start"] == est
            assert got["held"] == [{"id": "r-3", "title": "by hand", "reason": "added outside res"}]
            assert (got["at"], got["budget_mem_gb"], got["notices"]) == (7.0, 4.0, ["n\u00e9"])
            assert got["world"] == dump(world)


def test_tracking_reads_its_own_last_value_again_when_another_process_changed_it(paths):
    """The loop keeps what it tracked parsed in memory; a one-shot pass (another process) that
    tracked meanwhile must not be overwritten from that memory."""
    add(paths, 1)
    policy = paths.root / "policy.toml"
    with Store.open(paths) as loop_store:
        track(paths, loop_store, policy, now=1.0)
        with Store.open(paths) as other:  # another process's pass: the user added an entry by hand
            paths.queue.write_text(paths.queue.read_text() + '\n[[job]]\nid = "r-9"\ntitle = "by hand"\n'
                                   'mem_gb = 1.0\nest_s = 60\ncreated = 1.0\ncmd = ["true"]\n')
            assert track(paths, other, policy, now=2.0) == {"r-9"}
        text = paths.queue.read_text()
        paths.queue.write_text(text.replace('title = "by hand"', 'title = "by hand, renamed"'))
        assert track(paths, loop_store, policy, now=3.0) == {"r-9"}  # still known as added by hand
        outside = [r[4] for r in loop_store.changes(0) if r[1] == "queue.toml" and r[2] == "outside"]
        assert outside == ["r-9 added", "r-9 edited"]  # edited: diffed against the other pass's snapshot


def test_something_planted_where_the_copy_goes_never_stops_a_pass(paths, caplog):
    """A directory (or anything that cannot be replaced by a file) at the copy's path or its
    temporary's: the pass reads the queue as usual and says why the copy was not kept."""
    ids = add(paths, 1)
    paths.last_good_queue.mkdir()
    (paths.last_good_queue / "x").write_text("kept")
    with Store.open(paths) as store:
        desired, _ = load_desired(paths, store)
        assert [r.id for r in desired.requests] == ids and desired.queue_ok
    assert "could not keep the last good queue.toml" in caplog.text
    assert (paths.last_good_queue / "x").read_text() == "kept"  # nothing of it removed
