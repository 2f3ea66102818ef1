"""The record store, state.db (file tier: tmp_path, no systemd)."""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from reconciler.core.models import LIVE, JobRecord, Phase, Request, copy
from reconciler.config.paths import Paths
from reconciler.recorded.errors import StoreError
from reconciler.recorded.schema import SCHEMA_VERSION
from reconciler.recorded.store import ABSENT, Store, max_number


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(tmp_path / "state")


def rec(n: int, phase: Phase = Phase.queued, **kw) -> JobRecord:
    req = Request(id=f"r-{n}", title=f'job "{n}"\n%h $HOME', mem_gb=1.5, est_s=60, created=1000.0 + n, cmd=["echo", "a;b"])
    return JobRecord(request=req, phase=phase, **kw)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_put_get_records(paths):
    with Store.open(paths) as s:
        assert s.records() == {} and s.get("r-1") is None
        a, b = rec(2), rec(10, Phase.running, unit="res-r-10.service", started=5.0, attached_by="h/1/x", lease_until=65.0)
        assert s.put(b) and s.put(a)
        assert s.get("r-10") == b and s.get("r-2") == a
        assert list(s.records()) == ["r-2", "r-10"]  # id order, numerically
        assert s.records(phases=LIVE) == {"r-10": b}
        assert s.records(phases=[]) == {}
        b2 = copy(b, **{"phase": Phase.exited, "rc": 0})
        assert s.put(b2) and s.get("r-10") == b2  # upsert
    assert stat.S_IMODE(paths.db.stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.root.stat().st_mode) == 0o700
    with Store.open(paths) as s:  # reopened: still there
        assert s.get("r-10").rc == 0 and s.get_meta("schema_version") == str(SCHEMA_VERSION)
        assert s._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_compare_and_set(paths):
    with Store.open(paths) as s:
        r = rec(1)
        assert s.put(r, expect_phase=ABSENT)
        assert not s.put(copy(r, **{"why": "again"}), expect_phase=ABSENT)  # a re-run enqueue
        starting = copy(r, **{"phase": Phase.starting, "attached_by": "h/1/a", "lease_until": 60.0})
        assert s.put(starting, expect_phase=Phase.queued)
        # a pass that was cut off and runs again with a stale view: refused, nothing changes
        assert not s.put(copy(r, **{"phase": Phase.starting, "attached_by": "h/2/b"}), expect_phase=Phase.queued)
        assert s.get("r-1") == starting
        # collections of phases, plain strings
        assert s.put(copy(starting, **{"lease_until": 80.0}), expect_phase=(Phase.starting, Phase.running))
        assert not s.put(starting, expect_phase="running")
        # the holder: only the instance that holds the attachment writes
        running = copy(s.get("r-1"), **{"phase": Phase.running, "log_offset": 100})
        assert not s.put(running, expect_holder="h/2/b")
        assert not s.put(running, expect_holder=None)
        assert s.put(running, expect_phase=Phase.starting, expect_holder="h/1/a")
        assert s.get("r-1").log_offset == 100
        # claiming an expired attachment: compare-and-set on the old holder
        claimed = copy(running, **{"attached_by": "h/3/c", "lease_until": 200.0})
        assert s.put(claimed, expect_holder="h/1/a")
        assert not s.put(copy(claimed, **{"attached_by": "h/4/d"}), expect_holder="h/1/a")
        assert s.get("r-1").attached_by == "h/3/c"
        # an expectation about a record that does not exist
        assert not s.put(rec(2), expect_phase=Phase.queued)
        assert s.put(rec(2), expect_holder=None)  # no record: held by nobody
        assert s.delete("r-2", expect_phase=Phase.running) is False and s.delete("r-2") is True
        assert s.get("r-2") is None and s.delete("r-2") is False


def test_transactions_commit_together_or_not_at_all(paths):
    with Store.open(paths) as s:
        with s.transaction():
            s.put(rec(1))
            with s.transaction():  # nested: joins the outer one
                s.put(rec(2))
            s.set_meta("k", "v")
        assert set(s.records()) == {"r-1", "r-2"}
        with pytest.raises(RuntimeError):
            with s.transaction():
                s.put(rec(3))
                s.put(rec(1, Phase.cancelled))
                s.set_meta("k", "w")
                raise RuntimeError("cut off")
        assert set(s.records()) == {"r-1", "r-2"} and s.get("r-1").phase == Phase.queued and s.get_meta("k") == "v"
        with Store.open(paths, readonly=True) as ro:  # another connection sees only committed state
            with s.transaction():
                s.put(rec(4))
                assert ro.get("r-4") is None
            assert ro.get("r-4") == rec(4)


def test_readonly_open_of_a_missing_db_creates_nothing(paths):
    with Store.open(paths, readonly=True) as s:
        assert s.records() == {} and s.get("r-1") is None and s.get_meta("x") is None
        assert s.history() == [] and s.max_number() == 0
        with pytest.raises(StoreError):
            s.put(rec(1))
        with pytest.raises(StoreError):
            s.set_meta("a", "b")
    assert not paths.root.exists()
    assert max_number(paths) == 0
    assert not paths.root.exists()


def test_readonly_open_does_not_change_the_db(paths):
    with Store.open(paths) as s:
        for n in range(1, 6):
            s.put(rec(n, Phase.running if n % 2 else Phase.done, ended=None if n % 2 else 50.0))
        s.set_meta("desired", '{"requests": []}')
    before, mtime = digest(paths.db), paths.db.stat().st_mtime_ns
    for _ in range(2):
        with Store.open(paths, readonly=True) as ro:
            assert len(ro.records()) == 5 and ro.get_meta("desired") == '{"requests": []}'
            assert ro.max_number() == 5 and ro.history() == []
            with pytest.raises(StoreError):
                ro.put(rec(9))
            with pytest.raises(StoreError):
                ro.prune(1e12)
    assert digest(paths.db) == before and paths.db.stat().st_mtime_ns == mtime
    # also while the writer has it open, with changes still in the WAL
    with Store.open(paths) as s:
        s.put(rec(6))
        with Store.open(paths, readonly=True) as ro:
            assert ro.get("r-6") == rec(6)
            with pytest.raises(sqlite3.OperationalError):  # the connection itself cannot write
                ro._conn.execute("INSERT INTO meta VALUES ('a', 'b')")


def test_prune_moves_old_finished_records_into_history(paths):
    with Store.open(paths) as s:
        s.put(rec(1, Phase.done, ended=100.0, rc=0))
        s.put(rec(2, Phase.refused, updated=90.0))  # never ran: no end time, counts by its update
        s.put(rec(3, Phase.cancelled, ended=5000.0))  # too recent
        s.put(rec(4, Phase.running, started=1.0))  # not finished
        s.put(rec(5, Phase.done, ended=150.0))
        assert s.prune(before=1000.0) == ["r-1", "r-2", "r-5"]
        assert set(s.records()) == {"r-3", "r-4"}
        assert [r.id for r in s.history()] == ["r-5", "r-1", "r-2"]  # latest ended first
        assert [r.id for r in s.history(limit=1)] == ["r-5"]
        assert s.history()[1] == rec(1, Phase.done, ended=100.0, rc=0)
        assert s.prune(before=1000.0) == []  # idempotent
        assert s.max_number() == 5
        assert s.prune(before=10_000.0) == ["r-3"] and s.max_number() == 5
    assert max_number(paths) == 5


def test_prune_by_id_moves_only_finished_records(paths):
    with Store.open(paths) as s:
        s.put(rec(1, Phase.done, ended=100.0))
        s.put(rec(2, Phase.running))
        s.put(rec(3, Phase.cancelled, ended=100.0))
        assert s.prune(ids=["r-1", "r-2", "r-9"]) == ["r-1"]
        assert set(s.records()) == {"r-2", "r-3"}
        assert s.prune(ids=[]) == [] and s.prune(ids=["r-1"]) == []
        assert s.prune(before=50.0, ids=["r-3"]) == [] and s.prune(before=500.0, ids=["r-3"]) == ["r-3"]
        with pytest.raises(ValueError):
            s.prune()


def test_meta(paths):
    with Store.open(paths) as s:
        assert s.get_meta("nope") is None and s.get_meta("nope", "d") == "d"
        s.set_meta("k", "1")
        s.set_meta("k", "2")
        assert s.get_meta("k") == "2"
        s.set_meta_json("snap", {"b": [1, 2], "a": None})
        assert s.get_meta_json("snap") == {"a": None, "b": [1, 2]} and s.get_meta_json("zz", 7) == 7
        with pytest.raises(TypeError):
            s.set_meta("k", 3)


def test_refuses_a_symlinked_db_and_a_newer_schema(paths, tmp_path):
    paths.ensure()
    target = tmp_path / "other.db"
    paths.db.symlink_to(target)
    for ro in (False, True):
        with pytest.raises(StoreError, match="symlink"):
            Store.open(paths, readonly=ro)
    assert not target.exists()
    paths.db.unlink()
    with Store.open(paths) as s:
        s.set_meta("schema_version", str(SCHEMA_VERSION + 1))
    for ro in (False, True):
        with pytest.raises(StoreError, match="newer"):
            Store.open(paths, readonly=ro)


def test_a_broken_record_is_named(paths):
    with Store.open(paths) as s:
        s.put(rec(1))
        s._conn.execute("UPDATE jobs SET record = '{\"phase\": \"queued\"}' WHERE id = 'r-1'")
        with pytest.raises(StoreError, match="r-1"):
            s.get("r-1")


def _race(root: str, k: int, start, out) -> None:
    start.wait()
    with Store.open(Paths(Path(root)), timeout=60) as s:
        won = s.put(rec(1, why=f"worker {k}"), expect_phase=ABSENT)
        for _ in range(25):  # read-modify-write under one transaction each
            with s.transaction():
                n = int(s.get_meta("counter", "0"))
                s.set_meta("counter", str(n + 1))
        out.put(won)


def test_concurrent_processes(paths):
    Store.open(paths).close()
    ctx = multiprocessing.get_context("fork")
    workers = 8
    start, out = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(paths.root), k, start, out)) for k in range(workers)]
    for p in procs:
        p.start()
    wins = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    assert wins.count(True) == 1  # exactly one enqueue of r-1 went through
    with Store.open(paths, readonly=True) as s:
        assert s.get_meta("counter") == str(workers * 25)  # no lost update
        assert list(s.records()) == ["r-1"]
    assert not [f for f in os.listdir(paths.root) if f.startswith("state.db") and f not in ("state.db", "state.db-wal", "state.db-shm")]


def test_log_dir_is_read_from_the_row_without_building_the_record(paths):
    """`res run --wait` looks for a queued job's log where it was started (a cluster job's shared
    directory) through this read; a row that is not ours to read says nothing, never raises."""
    with Store.open(paths) as s:
        assert s.put(rec(1)) and s.put(rec(2, Phase.running, where="cluster", log_dir="/nfs/scratch/res-0-abc"))
    with Store.open(paths, readonly=True) as ro:
        assert ro.log_dir("r-1") is None and ro.log_dir("r-9") is None
        assert ro.log_dir("r-2") == "/nfs/scratch/res-0-abc"
    conn = sqlite3.connect(paths.db)
    conn.execute("UPDATE jobs SET record = '[1, 2]' WHERE id = 'r-1'")
    conn.commit()
    conn.close()
    with Store.open(paths, readonly=True) as ro:
        assert ro.log_dir("r-1") is None


def test_log_follower_moves_to_where_a_queued_job_was_started(tmp_path):
    """The follower looks where the record says until it sees the log: a job queued here and started
    on the cluster writes to the shared directory, and its output is printed from there, once."""
    import io

    from reconciler.loop.waiting import LogFollower

    here, there = tmp_path / "logs" / "r-1.log", tmp_path / "shared" / "r-1.log"
    there.parent.mkdir()
    where = [here]
    started, out = [], io.BytesIO()
    follow = LogFollower(here, on_start=lambda: started.append(follow.path), out=out, locate=lambda: where[0])
    follow.poll()
    assert not follow.seen and out.getvalue() == b""
    there.write_bytes(b"one\n")
    where[0] = there  # the record now says: started, in the shared directory
    follow.poll(relocate=True)
    there.write_bytes(b"one\ntwo\n")
    follow.poll()
    assert started == [there] and out.getvalue() == b"one\ntwo\n"
    where[0] = here  # seen: the path is not asked again
    follow.poll(relocate=True)
    assert follow.path == there


def test_the_shared_folder_must_be_ours_and_private_or_the_cluster_waits(tmp_path):
    """A folder in a shared directory that someone else could have made first (or opened to others,
    or put a symlink at) is refused in one line: a planted exit record or FIFO there would be read."""
    from reconciler.runtime import RuntimeUnavailable
    from reconciler.runtime.slurm import SlurmRuntime

    shared = tmp_path / "shared"
    paths = Paths(tmp_path / "state")
    folder = paths.cluster_logs(str(shared))

    def check() -> str | None:
        rt = SlurmRuntime(paths.root, folder, shared_dir=str(shared))
        try:
            rt._make_logs()
        except RuntimeUnavailable as e:
            assert e.not_started and "\n" not in str(e)
            return str(e)
        return None

    assert "is not a directory here (not mounted?" in check()
    shared.mkdir()
    assert check() is None and stat.S_IMODE(folder.stat().st_mode) == 0o700
    folder.chmod(0o755)
    assert check() == f"slurm: {folder} is open to others (mode 755, not 700); refusing to use it"
    folder.rmdir()
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    folder.symlink_to(tmp_path / "elsewhere")
    assert check() == f"slurm: {folder} is a symlink; refusing to use it"


def test_a_request_id_is_found_by_its_index_and_an_older_database_gets_the_index(tmp_path):
    """issue 40: asking again with a request id looks it up at every submit: by an index, not a scan
    of every record; a state.db made before the index has it from its next open."""
    import sqlite3
    import time as _time

    from reconciler.core.lifecycle import transition
    from reconciler.core.models import Request

    paths = Paths(tmp_path / "state")
    with Store.open(paths) as store:
        for n in (1, 2, 3):
            req = Request(id=f"r-{n}", title="t", mem_gb=0.1, est_s=60, created=1.0, cmd=["true"],
                          request_id="q-x" if n == 2 else f"q-{n}")
            store.put(transition(None, "enqueue", _time.time(), request=req))
        assert list(store.with_request_id("q-x")) == ["r-2"] and store.with_request_id("q-none") == {}
    conn = sqlite3.connect(paths.db)
    conn.execute("DROP INDEX jobs_request_id_valid")
    conn.commit()
    conn.close()
    with Store.open(paths) as store:
        from reconciler.recorded.schema import REQUEST_ID_OF_RECORD

        plan = store._conn.execute(f"EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE {REQUEST_ID_OF_RECORD} = ?",
                                   ("q-x",)).fetchall()
        assert any("jobs_request_id_valid" in str(row) for row in plan), plan
        assert list(store.with_request_id("q-x")) == ["r-2"]
