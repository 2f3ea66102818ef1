"""Many requests in one write (Writer.add_many, the loop's group commit in loop/group.py), and the
reader that parses each queue table once per process (desired/toml_in.py `loads_queue`)."""
from __future__ import annotations

import asyncio
import json
import random
import tomllib
from pathlib import Path

import pytest

from reconciler.config.paths import Paths
from reconciler.core.models import Request
from reconciler.desired import toml_in
from reconciler.desired.reader import DesiredError, read_desired
from reconciler.desired.writer import Writer
from reconciler.loop.group import GroupAdd

JOB = dict(title="make e2e", project="p", mem_gb=1.0, cpus=1.0, est_s=600, queue=True, cmd=["make"], cwd="/tmp")


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return Paths(tmp_path / "state")


def changes(paths: Paths) -> list[dict]:
    return [json.loads(line) for line in (paths.desired / ".changes.jsonl").read_text().splitlines()]


def test_add_many_writes_all_in_order_and_refuses_only_the_bad_one(paths):
    w = Writer(paths)
    got = w.add_many([(dict(JOB, title="a"), "job", "agent one"), (dict(JOB, mem_gb=-3), "job", "agent two"),
                      (dict(JOB, title="b"), "note", "agent two"), (dict(JOB, title="c"), "job", None)])
    assert [type(g) for g in got] == [Request, DesiredError, Request, Request]
    assert [g.id for g in got if isinstance(g, Request)] == ["r-1", "r-2", "r-3"]
    assert "mem_gb" in str(got[1])
    data = tomllib.loads(paths.queue.read_text())
    assert [e["id"] for e in data["job"]] == ["r-1", "r-3"] and [e["id"] for e in data["note"]] == ["r-2"]
    assert data["next_id"] == 4
    # one write, one change line per asker, all naming the file that write left
    lines = changes(paths)
    assert {(line["who"], tuple(line["ids"])) for line in lines} >= {("agent one", ("r-1",)), ("agent two", ("r-2",))}
    assert len({line["digest"] for line in lines}) == 1
    assert read_desired(paths).desired.requests == [g for g in got if isinstance(g, Request)]


def test_add_many_of_only_bad_requests_writes_nothing(paths):
    got = Writer(paths).add_many([(dict(JOB, est_s=0), "job", None)])
    assert isinstance(got[0], DesiredError)
    assert not paths.queue.exists()


def test_requests_that_arrive_together_share_a_write(paths):
    async def crowd():
        adder = GroupAdd(Writer(paths))
        made = await asyncio.gather(*(adder.add(dict(JOB, title=f"t{i}"), "job", f"agent {i}") for i in range(40)))
        return adder, made

    adder, made = asyncio.run(crowd())
    assert sorted(r.number for r in made) == list(range(1, 41))  # every one an id, none twice
    assert adder.requests == 40 and adder.batches < 40  # the first alone, the rest together
    assert [r.title for r in made] == [f"t{i}" for i in range(40)]  # each caller its own request back
    assert {r.id for r in read_desired(paths).desired.requests} == {r.id for r in made}


def test_a_refused_request_in_a_group_is_told_and_the_others_go_in(paths):
    async def crowd():
        adder = GroupAdd(Writer(paths))
        return await asyncio.gather(adder.add(dict(JOB), "job", None), adder.add(dict(JOB, cpus=-1), "job", None),
                                    adder.add(dict(JOB), "job", None), return_exceptions=True)

    got = asyncio.run(crowd())
    assert isinstance(got[1], DesiredError) and "cpus" in str(got[1])
    assert [g.id for g in (got[0], got[2])] == ["r-1", "r-2"]


class SlowWriter(Writer):
    """A real Writer whose every write takes a while longer (a slow disk), so that requests arrive
    while one is under way."""

    def add_many(self, items):
        import time

        time.sleep(0.05)
        return super().add_many(items)


def test_a_pass_waits_for_the_batch_queued_behind_the_write_under_way(paths):
    """A burst's first request is written alone and the rest queue behind it: the pass about to
    begin (GroupAdd.written) must find every one of them durable, not only the first."""
    async def burst():
        adder = GroupAdd(SlowWriter(paths))
        first = asyncio.ensure_future(adder.add(dict(JOB, title="first"), "job", None))
        await asyncio.sleep(0.01)  # its write is under way
        rest = [asyncio.ensure_future(adder.add(dict(JOB, title=f"t{i}"), "job", None)) for i in range(5)]
        await asyncio.sleep(0)
        await adder.written(5)
        return first.done(), [f.done() for f in rest], adder.batches

    first_done, rest_done, batches = asyncio.run(burst())
    assert first_done and rest_done == [True] * 5
    assert batches == 2  # the first alone, the five together
    assert len(read_desired(paths).desired.requests) == 6


def test_each_request_is_prepared_on_the_writes_thread_and_a_failed_one_alone_is_refused(paths):
    import threading

    seen: list[int] = []

    def scope(fields):
        seen.append(threading.get_ident())
        if fields["title"] == "bad":
            raise ValueError("cannot look at its cwd")
        return dict(fields, lock=f"gate@{fields['cwd']}")

    async def crowd():
        adder = GroupAdd(Writer(paths))
        return await asyncio.gather(*(adder.add(dict(JOB, title=t), "job", None, scope) for t in ("a", "bad", "b")),
                                    return_exceptions=True)

    got = asyncio.run(crowd())
    assert isinstance(got[1], ValueError) and "cwd" in str(got[1])
    assert [g.lock for g in (got[0], got[2])] == ["gate@/tmp", "gate@/tmp"]
    assert [g.id for g in (got[0], got[2])] == ["r-1", "r-2"]  # the refused one took no id
    assert seen and threading.get_ident() not in seen  # never on the event loop's thread


# ---------------------------------------------------------------- the reader's per-table parse

def test_the_tablewise_parse_is_the_whole_parse(paths):
    w = Writer(paths)
    w.add_many([(dict(JOB, title=f"x {i}", env={"A": str(i)}), "job" if i % 3 else "note", None) for i in range(60)])
    w.remove([f"r-{i}" for i in range(3, 60, 7)])
    text = paths.queue.read_text()
    rng = random.Random(7)
    variants = [text, text + "\nlock = 'x'\n", text + "\n[job.env]\nX = '1'\n", text + "\n[[job]]\nid = 'r-99'\n",
                text + "\n[other]\nx = 1\n", text + "\nnext_id = 5\n", text + "\n[[note]]\nid = 1\nid = 2\n",
                text.replace("[[job]]", "[[ job ]] # c", 3), text.replace("[[job]]", "[job]", 1),
                text.replace("[[note]]", "[[note]]\n'''x'''", 1), "[[job]]\n" + text]
    for _ in range(20):  # cut anywhere
        variants.append(text[:rng.randrange(len(text))])
    for v in variants:
        toml_in.loads_queue(text)  # the previous text seen is this one: its tail path is taken
        try:
            want = tomllib.loads(v)
        except tomllib.TOMLDecodeError:
            want = "invalid"
        try:
            got = toml_in.loads_queue(v)
        except tomllib.TOMLDecodeError:
            got = "invalid"
        assert got == want, v[-120:]


def test_a_hand_edit_of_an_entry_is_read_as_edited(paths):
    w = Writer(paths)
    w.add_many([(dict(JOB, title=f"x {i}"), "job", None) for i in range(5)])
    assert read_desired(paths).desired.requests[2].mem_gb == 1.0
    paths.queue.write_text(paths.queue.read_text().replace('title = "x 2"\n', 'title = "x 2"\nlock = "mine"\n'))
    got = read_desired(paths).desired.requests
    assert [r.lock for r in got] == [None, None, "mine", None, None]
