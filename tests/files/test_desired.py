"""The desired-state files: reader and writer (file tier: tmp_path, no systemd)."""
from __future__ import annotations

import fcntl
import multiprocessing
import os
import re
import stat
import tomllib
from pathlib import Path

import pytest

from reconciler.desired import queue_edits
from reconciler.desired.reader import DesiredError, DesiredRead, read_desired, read_game, read_queue
from reconciler.desired.writer import Writer
from reconciler.core.models import Game, Request, dump
from reconciler.config.paths import Paths

JOB = dict(title="make e2e", project="proj-a", mem_gb=10.0, cpus=1.0, est_s=2400, queue=True, cmd=["make", "e2e"], cwd="/home/u/proj-a")
NOTE = dict(title="debugging", mem_gb=4, cpus=2, est_s=3600, owner_pid=4321)


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(tmp_path / "state")


@pytest.fixture
def writer(paths: Paths) -> Writer:
    return Writer(paths)


def toml(paths: Paths) -> dict:
    return tomllib.loads(paths.queue.read_text(encoding="utf-8"))


def one_line(msg: str) -> bool:
    return "\n" not in msg and "\r" not in msg and msg.strip() == msg


# ---------------------------------------------------------------- empty, init


def test_missing_state_is_empty_and_reading_creates_nothing(paths):
    got = read_desired(paths)
    assert isinstance(got, DesiredRead)
    assert got.desired.requests == [] and got.desired.queue_ok and got.desired.queue_error is None
    assert got.desired.game == Game() and got.game_error is None
    assert not paths.root.exists()
    paths.ensure()
    got = read_desired(paths, last_good=[])
    assert got.desired.queue_ok and got.desired.requests == []
    assert read_queue(paths) == []


def test_init_lays_down_annotated_templates(paths, writer):
    written = writer.init()
    assert written == [paths.queue, paths.game]
    for f in (paths.queue, paths.game, paths.writer_lock):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
    for d in (paths.root, paths.desired):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700
    text = paths.queue.read_text()
    assert "next_id" in text and text.count("#") > 20  # annotated
    assert toml(paths) == {"next_id": 1}
    assert tomllib.loads(paths.game.read_text()) == {"on": False}
    got = read_desired(paths)
    assert got.desired.queue_ok and got.desired.requests == [] and not got.desired.game.on
    before = paths.queue.read_bytes()
    assert writer.init() == []  # present: left alone
    assert paths.queue.read_bytes() == before


def test_init_force_keeps_the_old_files_and_the_counter(paths, writer):
    writer.init()
    for _ in range(3):
        writer.add(JOB)
    assert writer.init(force=True) == [paths.queue, paths.game]
    backups = sorted(p.name for p in paths.desired.glob("queue.toml.bak-*"))
    assert len(backups) == 1
    assert len(tomllib.loads((paths.desired / backups[0]).read_text())["job"]) == 3
    assert read_desired(paths).desired.requests == []
    assert writer.add(JOB).id == "r-4"  # the counter carried on


# ---------------------------------------------------------------- round trip


def test_add_job_and_note_round_trip(paths, writer):
    job = writer.add({**JOB, "lock": "e2e", "env": {"PATH": "/usr/bin", "LANG": "C.UTF-8"}, "created": 1764480000.0}, "job")
    note = writer.add(NOTE, "note")
    assert (job.id, job.kind, note.id, note.kind) == ("r-1", "job", "r-2", "note")
    data = toml(paths)
    assert data["next_id"] == 3
    assert data["job"] == [
        {
            "id": "r-1",
            "title": "make e2e",
            "project": "proj-a",
            "mem_gb": 10.0,
            "cpus": 1.0,
            "est_s": 2400,
            "created": 1764480000.0,
            "queue": True,
            "lock": "e2e",
            "force": False,
            "cmd": ["make", "e2e"],
            "cwd": "/home/u/proj-a",
            "agent": "none",
            "env": {"PATH": "/usr/bin", "LANG": "C.UTF-8"},
        }
    ]
    (n,) = data["note"]
    assert n["id"] == "r-2" and n["owner_pid"] == 4321 and n["mem_gb"] == 4.0 and n["cpus"] == 2.0
    assert "cmd" not in n and "kind" not in n and "kind" not in data["job"][0]
    assert isinstance(n["created"], float) and n["created"] > 1.7e9
    got = read_desired(paths).desired
    assert got.queue_ok and got.requests == [job, note]
    text = paths.queue.read_text()
    assert 'env = { PATH = "/usr/bin", LANG = "C.UTF-8" }' in text  # an inline table
    assert stat.S_IMODE(paths.queue.stat().st_mode) == 0o600
    assert not [p for p in paths.desired.iterdir() if ".tmp-" in p.name]


HOSTILE = [
    'say "hi"',
    "it's",
    "two\nlines\r\nand a tab\t.",
    "back\\slash \\n not a newline",
    "%h %% %n $HOME ${HOME} $(rm -rf /) `id` ; && | > <",
    '"""',
    "'''",
    "[[job]]",
    'next_id = 1',
    "ctl \x01\x1b[31m\x7f end",
    "ünïcødé ✓ 🎮 \u2028 \ufeff",
    "#not a comment",
    "",
]


@pytest.mark.parametrize("title", HOSTILE)
def test_hostile_text_round_trips_exactly(paths, writer, title):
    cmd = ["sh", "-c", title or "true", "%h", "$HOME", ";", "a b", "", "--x='y'"]
    env = {"A": title, "WEIRD KEY": "v", "Ü": "x", "X.Y": "z"}
    req = writer.add({**JOB, "title": title, "project": title, "cmd": cmd, "cwd": "/tmp/" + title.replace("\n", ""), "env": env})
    (entry,) = toml(paths)["job"]
    assert entry["title"] == title and entry["project"] == title and entry["cmd"] == cmd and entry["env"] == env
    got = read_desired(paths).desired
    assert got.queue_ok and got.requests == [req]
    # and the file is still one the writer edits as plain text
    req2 = writer.add(JOB)
    assert [r.id for r in read_queue(paths)] == [req.id, req2.id]
    assert writer.remove([req.id]) == [req.id]
    assert [r.id for r in read_queue(paths)] == [req2.id]


def test_ten_kb_title_is_refused_and_nothing_is_written(paths, writer):
    with pytest.raises(DesiredError) as e:
        writer.add({**JOB, "title": "x" * 10_000})
    assert "title" in str(e.value) and "200" in str(e.value) and one_line(str(e.value))
    assert not paths.queue.exists()
    writer.init()
    before = paths.queue.read_bytes()
    with pytest.raises(DesiredError):
        writer.add({**JOB, "title": "y\n" * 5000})
    assert paths.queue.read_bytes() == before


@pytest.mark.parametrize(
    "fields, word",
    [
        ({"mem_gb": 0}, "mem_gb"),
        ({"mem_gb": "x"}, "mem_gb"),
        ({"mem_gb": float("nan")}, "mem_gb"),
        ({"created": float("inf")}, "created"),
        ({"est_s": 0}, "est_s"),
        ({"est_s": 10**12}, "est_s"),
        ({"cpus": -1}, "cpus"),
        ({"unknown": 1}, "unknown"),
        ({"id": "r-5"}, "id"),
        ({"kind": "note"}, "kind"),
        ({"cmd": ["a\x00b"]}, "cmd[0]"),
        ({"cmd": ["caf\udce9"]}, "UTF-8"),
        ({"env": {"A=B": "x"}}, "env"),
        ({"lock": "k" * 4401}, "lock"),
    ],
)
def test_invalid_requests_are_refused_before_writing(paths, writer, fields, word):
    writer.init()
    before = paths.queue.read_bytes()
    with pytest.raises(DesiredError) as e:
        writer.add({**JOB, **fields})
    assert word in str(e.value) and one_line(str(e.value))
    assert paths.queue.read_bytes() == before


# ---------------------------------------------------------------- user edits survive

HAND = """\
# my queue, edited by hand
next_id = 7   # do not lower

# the nightly e2e run
[[job]]
id = "r-5"
title = "nightly"   # keep this title
mem_gb = 8.0
est_s = 600
created = 1764480000.0
cmd = ["make", "nightly"]
env = { A = "1" }

# a shell I keep open
[[note]]
id = "r-6"
title = "shell"
mem_gb = 2.0
est_s = 3600
created = 1764480001.0
owner_pid = 99

# trailing comment
"""


def test_user_comments_and_formatting_survive_add_and_remove(paths, writer):
    paths.ensure()
    paths.queue.write_text(HAND)
    a = writer.add(JOB)
    b = writer.add(NOTE, "note")
    assert (a.id, b.id) == ("r-7", "r-8")
    text = paths.queue.read_text()
    for comment in ("# my queue, edited by hand", "# do not lower", "# the nightly e2e run", "# keep this title",
                    "# a shell I keep open", "# trailing comment"):
        assert comment in text
    assert text.startswith(HAND.replace("next_id = 7", "next_id = 9"))  # only the counter changed above
    assert writer.remove(["r-5", "r-404"]) == ["r-5"]
    text = paths.queue.read_text()
    assert 'title = "nightly"' not in text and "# keep this title" not in text  # inside the removed table
    for comment in ("# my queue, edited by hand", "# do not lower", "# the nightly e2e run", "# a shell I keep open",
                    "# trailing comment"):
        assert comment in text
    assert "\n\n\n" not in text
    data = toml(paths)
    assert data["next_id"] == 9
    assert [e["id"] for e in data["job"]] == ["r-7"] and [e["id"] for e in data["note"]] == ["r-6", "r-8"]
    assert [r.id for r in read_queue(paths)] == ["r-6", "r-7", "r-8"]  # id order = FIFO order


def test_files_plain_edits_cannot_handle_go_through_tomlkit(paths, writer):
    """Multi-line strings and a missing counter: the tomlkit path, checked against the intended data."""
    paths.ensure()
    paths.queue.write_text('# hand\n[[job]]\nid = "r-3"\ntitle = """two\nlines"""\nmem_gb = 1.0\nest_s = 60\ncreated = 1.0\n'
                           '# [[job]] in a comment\n')
    assert writer.add(JOB).id == "r-4"
    assert writer.remove(["r-3"]) == ["r-3"]
    data = toml(paths)
    assert data["next_id"] == 5 and [e["id"] for e in data["job"]] == ["r-4"]
    assert "# hand" in paths.queue.read_text()
    assert writer.add(JOB).id == "r-5"

    paths.queue.write_text('next_id = 2\njob = [ { id = "r-1", title = "x", mem_gb = 1.0, est_s = 5, created = 1.0 } ]\n')
    before = paths.queue.read_bytes()
    with pytest.raises(DesiredError) as e:
        writer.add(JOB)
    assert "inline array" in str(e.value) and one_line(str(e.value))
    assert paths.queue.read_bytes() == before
    assert writer.remove(["r-1"]) == ["r-1"]
    assert toml(paths) == {"next_id": 2}


# ---------------------------------------------------------------- ids


def test_ids_are_never_reused(paths, writer):
    ids = [writer.add(JOB).id for _ in range(3)]
    assert ids == ["r-1", "r-2", "r-3"]
    assert writer.remove(ids) == ids
    assert toml(paths)["next_id"] == 4 and "job" not in toml(paths)
    assert writer.add(JOB).id == "r-4"


def test_the_counter_follows_the_highest_id_present(paths, writer):
    paths.ensure()
    # no next_id at all, as a user might write it
    paths.queue.write_text('[[job]]\nid = "r-41"\ntitle = "x"\nmem_gb = 1.0\nest_s = 5\ncreated = 1.0\n')
    assert writer.remove(["r-41"]) == ["r-41"]
    assert toml(paths)["next_id"] == 42  # removing the highest id keeps the counter past it
    assert writer.add(JOB).id == "r-42"
    # a counter lowered by hand is overruled by the ids present
    text = paths.queue.read_text().replace("next_id = 43", "next_id = 1")
    paths.queue.write_text(text)
    assert writer.add(JOB).id == "r-43"


def test_ids_continue_past_state_db_and_a_moved_away_queue(paths, writer):
    from reconciler.core.models import JobRecord, Phase
    from reconciler.recorded.store import Store

    with Store.open(paths) as store:
        req = Request(id="r-90", title="old", mem_gb=1, est_s=5, created=1.0)
        store.put(JobRecord(request=req, phase=Phase.done, ended=2.0))
    assert writer.add(JOB).id == "r-91"  # no queue.toml, but state.db has seen r-90
    paths.queue.unlink()  # "move it away"
    assert writer.add(JOB).id == "r-92"  # the writer's note remembers r-91
    paths.queue.unlink()
    writer.init()
    assert toml(paths) == {"next_id": 93}
    assert writer.add(JOB).id == "r-93"
    for f in (paths.queue, paths.desired / ".queue.toml.ok"):
        f.unlink()
    assert writer.add(JOB).id == "r-91"  # only state.db is left to go by


# ---------------------------------------------------------------- broken files

GOOD = '''next_id = 3

[[job]]
id = "r-1"
title = "a"
mem_gb = 1.0
est_s = 60
created = 1.0
cmd = ["true"]

[[job]]
id = "r-2"
title = "b"
mem_gb = 1.0
est_s = 60
created = 2.0
cmd = ["true"]
'''

BROKEN = {
    # The file itself is unusable: never read as empty; nothing started or stopped because of it.
    # name: (text, the line to blame, a word the error must contain)
    "bad syntax": (GOOD.replace('title = "b"', "title = b"), 13, "TOML"),
    "cut mid-string": (GOOD[: GOOD.index('title = "b"') + 10], 13, "TOML"),
    "duplicate id": (GOOD.replace('id = "r-2"', 'id = "r-1"'), 12, "duplicate"),
    "unknown top-level key": ("nxt_id = 3\n" + GOOD, 1, "nxt_id"),
    "job not tables": ('next_id = 3\njob = "x"\n', 2, "job"),
    "bad counter": (GOOD.replace("next_id = 3", "next_id = -3"), 1, "next_id"),
    "empty": ("", 1, "empty"),
    "not utf-8": (None, 13, "UTF-8"),
}

SET_ASIDE = {
    # One entry is unusable: it is set aside (one line naming it), its id held (neither started nor
    # taken as released), and every other entry goes on. (text, line, word, the id held or None)
    "cut at a line end": (GOOD[: GOOD.index('title = "b"')], 11, "title", "r-2"),
    "wrong type": (GOOD.replace("mem_gb = 1.0\nest_s = 60\ncreated = 2.0", 'mem_gb = "x"\nest_s = 60\ncreated = 2.0'), 14, "mem_gb", "r-2"),
    "invalid id": (GOOD.replace('id = "r-2"', 'id = "r-0"'), 12, "id", None),
    "unknown key": (GOOD.replace('cmd = ["true"]\n\n', 'cmd = ["true"]\ntitel = "x"\n\n', 1), 10, "titel", "r-1"),
    "kind in the wrong array": (GOOD.replace('title = "b"', 'title = "b"\nkind = "note"'), 14, "kind", "r-2"),
    "datetime": (GOOD.replace("created = 2.0", "created = 2025-01-01T00:00:00Z"), 16, "created", "r-2"),
    "infinite": (GOOD.replace("created = 2.0", "created = inf"), 16, "created", "r-2"),
    "a pid past pid_max": (GOOD.replace("created = 2.0", "created = 2.0\nowner_pid = 99999999999999999999"), 17, "owner_pid", "r-2"),
    "an epoch past the year 3000": (GOOD.replace("created = 2.0", "created = 1e308"), 16, "created", "r-2"),
    "a tiny --mem": (GOOD.replace("mem_gb = 1.0\nest_s = 60\ncreated = 2.0", "mem_gb = 1e-300\nest_s = 60\ncreated = 2.0"), 14, "mem_gb", "r-2"),
    "a tiny --cpus": (GOOD.replace("created = 2.0", "created = 2.0\ncpus = 1e-300"), 17, "cpus", "r-2"),
}


def _write_broken(paths: Paths, name: str) -> bytes:
    paths.ensure()
    text = {**BROKEN, **SET_ASIDE}[name][0]
    data = GOOD.replace('title = "b"', 'title = "\x00"').encode().replace(b"\x00", b"\xff") if text is None else text.encode()
    paths.queue.write_bytes(data)
    return data


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_queue_is_never_read_as_empty(paths, name):
    last_good = [Request(id="r-1", title="a", mem_gb=1, est_s=60, created=1.0, cmd=["true"])]
    _write_broken(paths, name)
    got = read_desired(paths, last_good=last_good, last_good_game=Game(on=True))
    d = got.desired
    assert d.queue_ok is False and d.requests == last_good
    assert d.game == Game()  # game.toml is missing: off, independently of the queue
    _, line, word = BROKEN[name]
    assert d.queue_error.startswith(f"{paths.queue}:{line}: "), d.queue_error
    assert word in d.queue_error and one_line(d.queue_error)
    # without a last good version: still not "empty and fine"
    d = read_desired(paths).desired
    assert d.queue_ok is False and d.requests == []
    with pytest.raises(DesiredError):
        read_queue(paths)


@pytest.mark.parametrize("name", sorted(SET_ASIDE))
def test_one_bad_entry_is_set_aside_and_the_rest_goes_on(paths, writer, name):
    data = _write_broken(paths, name)
    _, line, word, held = SET_ASIDE[name]
    d = read_desired(paths).desired
    assert d.queue_ok is True and d.queue_error is None
    (aside,) = d.set_aside
    assert aside.startswith(f"{paths.queue}:{line}: ") and word in aside and one_line(aside), aside
    assert d.held == ([held] if held else [])
    good = {"r-1", "r-2"} - {held} - ({"r-2"} if name == "invalid id" else set())
    assert {r.id for r in d.requests} == good
    # the writer still adds (and never gives out the held id again), and keeps the bad entry verbatim
    added = writer.add(JOB)
    assert added.id == "r-3"
    text = paths.queue.read_bytes()
    assert text.startswith(data.rstrip(b"\n")) or data.split(b"[[job]]")[-1].strip() in text
    assert [r.id for r in read_desired(paths).desired.requests] == sorted(good | {"r-3"})
    # and `res release` of a held id removes it
    if held:
        assert writer.remove([held]) == [held]
        assert read_desired(paths).desired.set_aside == []


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_writer_refuses_a_broken_queue_and_changes_nothing(paths, writer, name):
    data = _write_broken(paths, name)
    for attempt in (lambda: writer.add(JOB), lambda: writer.add(NOTE, "note"), lambda: writer.remove(["r-1", "r-2"])):
        with pytest.raises(DesiredError) as e:
            attempt()
        msg = str(e.value)
        assert msg.startswith(f"{paths.queue}:{BROKEN[name][1]}: ") and msg.endswith("fix it or move it away, nothing was changed")
        assert one_line(msg)
        assert paths.queue.read_bytes() == data
    assert writer.init() == [paths.game]  # init leaves a present (even broken) queue alone


def test_the_writers_own_shortcut_never_hides_a_hand_edit(paths, writer):
    writer.add(JOB)  # the writer now knows this file's digest
    text = paths.queue.read_text().replace("mem_gb = 10.0", 'mem_gb = "ten"')
    paths.queue.write_text(text)
    assert writer.add(JOB).id == "r-2"  # a full read: the hand-edited entry is found and set aside
    assert paths.queue.read_text().count('mem_gb = "ten"') == text.count('mem_gb = "ten"')  # kept as written
    d = read_desired(paths).desired
    assert d.held == ["r-1"] and "mem_gb" in d.set_aside[0] and [r.id for r in d.requests] == ["r-2"]


def _symlinked(paths: Paths) -> None:
    paths.ensure()
    target = paths.root / "elsewhere.toml"
    target.write_text(GOOD)
    paths.queue.symlink_to(target)


def _fifo(paths: Paths) -> None:
    paths.ensure()
    os.mkfifo(paths.queue)


def _directory(paths: Paths) -> None:
    paths.ensure()
    paths.queue.mkdir()


@pytest.mark.parametrize("make, word", [(_symlinked, "symlink"), (_fifo, "regular file"), (_directory, "regular file")])
def test_odd_files_are_refused(paths, writer, make, word):
    make(paths)
    d = read_desired(paths, last_good=[]).desired
    assert not d.queue_ok and d.queue_error.startswith(f"{paths.queue}: ") and word in d.queue_error
    with pytest.raises(DesiredError, match=word):
        writer.add(JOB)
    if paths.queue.is_symlink():
        assert (paths.root / "elsewhere.toml").read_text() == GOOD
        assert paths.queue.is_symlink()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_queue(paths, writer):
    paths.ensure()
    paths.queue.write_text(GOOD)
    paths.queue.chmod(0)
    try:
        d = read_desired(paths).desired
        assert not d.queue_ok and "ermission" in d.queue_error
        with pytest.raises(DesiredError):
            writer.add(JOB)
    finally:
        paths.queue.chmod(0o600)


def test_symlinked_desired_dir_or_lock_is_refused(paths, tmp_path, writer):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    paths.root.mkdir(mode=0o700)
    paths.desired.symlink_to(elsewhere)
    d = read_desired(paths).desired
    assert not d.queue_ok and "symlink" in d.queue_error
    with pytest.raises(DesiredError, match="symlink"):
        writer.add(JOB)
    assert list(elsewhere.iterdir()) == []

    paths.desired.unlink()
    paths.ensure()
    paths.writer_lock.symlink_to(tmp_path / "lock-target")
    with pytest.raises(DesiredError, match="symlink"):
        writer.add(JOB)
    assert not (tmp_path / "lock-target").exists() and not paths.queue.exists()


def test_writer_waits_for_the_lock_and_gives_up_cleanly(paths):
    writer = Writer(paths, timeout=0.3)
    writer.init()
    before = paths.queue.read_bytes()
    fd = os.open(paths.writer_lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(DesiredError) as e:
            writer.add(JOB)
        assert "another writer" in str(e.value) and one_line(str(e.value))
        assert paths.queue.read_bytes() == before
    finally:
        os.close(fd)
    assert writer.add(JOB).id == "r-1"


# ---------------------------------------------------------------- game


def test_game_on_off(paths, writer):
    assert writer.set_game(True, 1764494400.0) == Game(on=True, until=1764494400.0)
    got = read_desired(paths)
    assert got.desired.game == Game(on=True, until=1764494400.0) and got.game_error is None
    assert "# until: optional" in paths.game.read_text()  # the template's comments
    writer.set_game(True)
    assert tomllib.loads(paths.game.read_text()) == {"on": True}
    writer.set_game(False)
    assert read_game(paths) == (Game(on=False), None)
    assert stat.S_IMODE(paths.game.stat().st_mode) == 0o600
    with pytest.raises(DesiredError):
        writer.set_game(True, float("nan"))


@pytest.mark.parametrize(
    "text, line",
    [("on = yes\n", 1), ("on = true\nuntil = \"soon\"\n", 2), ("on = true\nuntill = 5.0\n", 2), ("on = tr", 1), ("", 1)],
)
def test_broken_game_file_keeps_the_last_good_setting(paths, writer, text, line):
    writer.init()
    paths.game.write_text(text)
    last = Game(on=True, until=99.0)
    got = read_desired(paths, last_good=None, last_good_game=last)
    assert got.desired.game == last and got.desired.queue_ok
    assert got.game_error.startswith(f"{paths.game}:{line}: ") and one_line(got.game_error)
    with pytest.raises(DesiredError, match="nothing was changed"):
        writer.set_game(False)
    assert paths.game.read_text() == text


# ---------------------------------------------------------------- concurrency


def _add_many(root: str, worker: int, n: int, start, out) -> None:
    start.wait()
    w = Writer(Paths(Path(root)))
    ids = [w.add({**JOB, "title": f"w{worker}-{i}"}).id for i in range(n)]
    out.put((worker, ids))


def test_sixteen_concurrent_writers_lose_nothing(paths):
    ctx = multiprocessing.get_context("fork")
    workers, each = 16, 20
    start = ctx.Barrier(workers)
    out = ctx.Queue()
    procs = [ctx.Process(target=_add_many, args=(str(paths.root), k, each, start, out)) for k in range(workers)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    returned = [i for ids in results.values() for i in ids]
    assert len(returned) == len(set(returned)) == workers * each
    data = toml(paths)
    in_file = [e["id"] for e in data["job"]]
    assert sorted(in_file) == sorted(returned)
    assert data["next_id"] == workers * each + 1
    assert {e["title"] for e in data["job"]} == {f"w{k}-{i}" for k in range(workers) for i in range(each)}
    for ids in results.values():  # each writer's ids increase
        assert [int(i[2:]) for i in ids] == sorted(int(i[2:]) for i in ids)
    got = read_desired(paths).desired
    assert got.queue_ok and len(got.requests) == workers * each
    assert not [p for p in paths.desired.iterdir() if ".tmp-" in p.name]


def test_error_lines_name_file_and_line_for_hand_written_entries(paths):
    paths.ensure()
    paths.queue.write_text(GOOD.replace('cmd = ["true"]\n\n[[job]]', 'cmd = "true"\n\n[[job]]'))
    (err,) = read_desired(paths).desired.set_aside
    assert re.fullmatch(re.escape(str(paths.queue)) + r":9: job r-1: cmd = \"true\": not a list; allowed: .+", err), err


def test_sub_tables_and_an_env_variable_called_id(paths, writer):
    paths.ensure()
    paths.queue.write_text(
        'next_id = 3\n\n[[job]]\nid = "r-1"\ntitle = "a"\nmem_gb = 1.0\nest_s = 5\ncreated = 1.0\n[job.env]\nid = "r-2"\n'
        '# about r-2\n\n[[job]]\nid = "r-2"\ntitle = "b"\nmem_gb = 1.0\nest_s = 5\ncreated = 1.0\n[job.env]\nX = "1"\n'
    )
    assert writer.add(JOB).id == "r-3"  # a full read; the writer's note now vouches for the file
    assert writer.remove(["r-2"]) == ["r-2"]  # the writer's shortcut: must not take r-1's env for r-2
    data = toml(paths)
    assert [e["id"] for e in data["job"]] == ["r-1", "r-3"] and data["job"][0]["env"] == {"id": "r-2"}
    assert "# about r-2" in paths.queue.read_text()
    assert writer.remove(["r-1"]) == ["r-1"]
    assert [e["id"] for e in toml(paths)["job"]] == ["r-3"] and "[job.env]" not in paths.queue.read_text()


def test_random_edits_match_a_model(paths, writer):
    """Adds, removes and hand edits in a random order (fixed seed): the file always reads back as the
    model says, whichever way (plain text, the writer's note, tomlkit) each edit went."""
    import random

    rng = random.Random(7)
    model: dict[str, dict] = {}
    highest = 0
    for step in range(150):
        r = rng.random()
        if r < 0.55:
            kind = rng.choice(["job", "note"])
            fields = dict(NOTE) if kind == "note" else dict(JOB)
            fields["title"] = rng.choice(HOSTILE) + str(step)
            req = writer.add(fields, kind)
            assert int(req.id[2:]) > highest
            highest = int(req.id[2:])
            model[req.id] = dump(req)
        elif r < 0.85 and model:
            doomed = rng.sample(sorted(model), k=min(len(model), rng.randint(1, 3))) + ["r-999999"]
            assert sorted(writer.remove(doomed)) == sorted(d for d in doomed if d in model)
            for d in doomed:
                model.pop(d, None)
        else:  # a hand edit: a comment somewhere, or a multi-line string (forces the tomlkit path)
            text = paths.queue.read_text() if paths.queue.exists() else ""
            lines = text.split("\n")
            at = rng.randrange(len(lines) + 1)
            lines.insert(at, f"# hand edit {step}")
            edited = "\n".join(lines)
            if tomllib.loads(edited) != tomllib.loads(text):
                continue  # the comment landed inside a multi-line string: not a comment
            if rng.random() < 0.3 and model:
                victim = rng.choice(sorted(model))
                old = f'id = "{victim}"\ntitle = '
                if old in edited:
                    line_end = edited.index("\n", edited.index(old) + len(old))
                    edited = edited[: edited.index(old) + len(old)] + '"""hand\nmade"""' + edited[line_end:]
                    model[victim]["title"] = "hand\nmade"
            paths.queue.write_text(edited)
        got = read_desired(paths).desired
        assert got.queue_ok, got.queue_error
        assert {r.id: dump(r) for r in got.requests} == model


def test_a_save_by_an_editor_during_an_edit_is_not_lost(paths, writer, monkeypatch):
    """Editors do not take the writer's lock: if the file changes between the writer reading and
    replacing it, the writer starts over from the new file."""
    writer.add(JOB)
    real = queue_edits.appended_plain
    calls = []

    def editor_saves_meanwhile(path, q, entries, next_id):
        if not calls:
            text = paths.queue.read_text() + "\n# saved by an editor meanwhile\n"
            tmp = paths.desired / "editor.tmp"
            tmp.write_text(text)
            os.replace(tmp, paths.queue)
        calls.append(entries[0][1]["id"])
        return real(path, q, entries, next_id)

    monkeypatch.setattr(queue_edits, "appended_plain", editor_saves_meanwhile)
    assert writer.add(JOB).id == "r-2"
    assert calls == ["r-2", "r-2"]  # started over once
    assert "# saved by an editor meanwhile" in paths.queue.read_text()
    assert [e["id"] for e in toml(paths)["job"]] == ["r-1", "r-2"]


def test_ending_game_mode_never_undoes_an_extension_made_meanwhile(paths, writer):
    """The reconciler clears an expired game mode only if the file still says what it planned on."""
    writer.set_game(True, 1000.0)
    writer.set_game(True, 5000.0)  # `res game on` again, between the plan and the write
    assert writer.set_game(False, None, if_until=1000.0) == Game(on=True, until=5000.0)
    assert read_game(paths) == (Game(on=True, until=5000.0), None)
    assert writer.set_game(False, None, if_until=5000.0) == Game(on=False)
    assert read_game(paths) == (Game(on=False), None)


def test_restore_writes_entries_back_with_their_own_ids(paths, writer):
    a = writer.add(JOB)
    b = writer.add(NOTE, "note")
    assert [a.id, b.id] == ["r-1", "r-2"]
    paths.queue.unlink()  # deleted by hand
    assert writer.restore([a, b]) == ["r-1", "r-2"]
    d = read_desired(paths).desired
    assert d.requests == [a, b] and toml(paths)["next_id"] == 3
    assert writer.restore([a]) == []  # present: left alone
    assert writer.add(JOB).id == "r-3"  # the counter goes on past them
    writer.init(force=True)  # laid down again: empty
    assert writer.restore([b, a]) == ["r-2", "r-1"]
    assert [r.id for r in read_desired(paths).desired.requests] == ["r-1", "r-2"]
    assert writer.add(JOB).id == "r-4"
