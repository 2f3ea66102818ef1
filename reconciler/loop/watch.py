"""The watchers of the machine view (docs/watching.md): the socket's `watch` op, the web page and
`res top` subscribe; while anyone does, one task builds a view after every pass and every
VIEW_EVERY_S and puts it in each subscriber's queue (the newest replaces one not yet taken). With
nobody watching nothing is built: a pass only adds the history's cheap sample, at most one every
HISTORY_MIN_S, saved to state/history.json (atomically, bounded: core/history.py). The history is a
cache: a file that cannot be read is said in one line and the history starts empty."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time

from reconciler.core import history as hist
from reconciler.core.view import view_sample

log = logging.getLogger("res.watch")

VIEW_EVERY_S = 2.0
HISTORY_MIN_S = 30.0
HISTORY_FILE = "history.json"


class Watchers:
    def __init__(self, engine, ticker=None):
        self.engine, self.ticker = engine, ticker
        self.queues: set[asyncio.Queue] = set()
        self.task: asyncio.Task | None = None
        self.wake = asyncio.Event()
        self.readings = None  # the last view's readings: the next view's CPU use is the difference
        self.last_view: dict | None = None
        self.sample_due = False  # a pass asked for a sample: the next view gives it
        self.last_sample_at: float | None = None
        self.failing: str | None = None  # the last build's error, logged once until it changes
        self.path = engine.paths.root / HISTORY_FILE
        self.samples = load_history(self.path)
        if self.samples:
            self.last_sample_at = self.samples[-1]["t"]

    # ------------------------------------------------------------ the interface (web, res top, serve)

    async def view(self) -> dict:
        """A fresh view, built now."""
        return self._build()

    def subscribe(self) -> asyncio.Queue:
        """A queue each new view is put in (maxsize 1: the newest replaces one not yet taken); the
        first comes at once (the last view while others watch already, else the task's first). None
        in it: the loop is ending, no view will follow."""
        q: asyncio.Queue = asyncio.Queue(maxsize=1)
        self.queues.add(q)
        if self.task is None or self.task.done():
            self.last_view = None
            self.task = asyncio.get_running_loop().create_task(self._pushing())
        elif self.last_view is not None:
            q.put_nowait(self.last_view)
        return q

    def unsubscribe(self, q: asyncio.Queue) -> None:
        self.queues.discard(q)
        if not self.queues and self.task is not None:
            self.task.cancel()
            self.task = None
            self.readings = None  # a later watcher's first CPU figures are not over the idle gap

    def history(self, hours: float) -> list[dict]:
        """The samples of the last `hours`, oldest first."""
        return hist.since(self.samples, time.time() - max(float(hours), 0.0) * 3600)

    def after_pass(self) -> None:
        """Called by the loop after every pass: a view now for the watchers, and the history's
        sample when one is due (with nobody watching, the cheap one, and nothing else)."""
        due = self.last_sample_at is None or time.time() - self.last_sample_at >= HISTORY_MIN_S
        if self.queues:
            self.sample_due = self.sample_due or due
            self.wake.set()
        elif due:
            try:
                from reconciler.ops.view import history_sample

                self._keep(history_sample(self.engine))
            except Exception as e:  # noqa: BLE001 - the history is a cache: the loop goes on
                self._failed(f"history sample: {e}")

    async def close(self) -> None:
        """Stop pushing (the loop is ending): each subscriber is handed None, its stream's end."""
        for q in self.queues:
            if q.full():
                q.get_nowait()
            q.put_nowait(None)
        self.queues.clear()
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None

    # ------------------------------------------------------------ inside

    def _build(self) -> dict:
        from reconciler.ops.view import build_view

        view, self.readings = build_view(self.engine, self.readings)
        self.last_view = view
        self.failing = None
        return view

    async def _pushing(self) -> None:
        """One task while anyone watches: a view at once, then after each pass and every VIEW_EVERY_S."""
        while self.queues:
            self.wake.clear()
            try:
                view = self._build()
            except Exception as e:  # noqa: BLE001 - one view failed: said once, the next is tried
                self._failed(f"building the view: {e}")
            else:
                if self.sample_due:
                    self.sample_due = False
                    self._keep(view_sample(view))
                for q in list(self.queues):
                    if q.full():
                        q.get_nowait()
                    q.put_nowait(view)
            try:
                await asyncio.wait_for(self.wake.wait(), VIEW_EVERY_S)
            except asyncio.TimeoutError:
                pass

    def _keep(self, sample: dict) -> None:
        self.samples = hist.add(self.samples, sample)
        self.last_sample_at = sample["t"]
        try:
            save_history(self.path, self.samples)
        except OSError as e:
            self._failed(f"saving {self.path}: {e}")

    def _failed(self, line: str) -> None:
        line = " ".join(line.split())
        if line != self.failing:
            log.warning("%s", line)
            self.failing = line


def load_history(path) -> list[dict]:
    """The saved samples; [] when there is none, or (one line in the log) when it cannot be used."""
    try:
        with open(path, "rb") as f:
            data = f.read(hist.MAX_BYTES * 2 + 1)
    except FileNotFoundError:
        return []
    except OSError as e:
        log.warning("history %s not read (%s): starting it empty", path, " ".join(str(e).split()))
        return []
    try:
        if len(data) > hist.MAX_BYTES * 2:
            raise ValueError("too big")
        samples = json.loads(data)
        if not isinstance(samples, list) or not all(hist.valid(s) for s in samples):
            raise ValueError("not a list of samples")
    except ValueError as e:  # json's errors are ValueErrors, and so is a bad UTF-8 byte
        log.warning("history %s is unusable (%s): starting it empty", path, " ".join(str(e).split())[:200])
        return []
    return hist.capped(hist.aged(samples, time.time()))


def save_history(path, samples: list[dict]) -> None:
    """Written atomically (a reader sees the old file or the new one); not fsynced: it is a cache."""
    from reconciler.desired.disk import write_atomic

    data = json.dumps(samples, separators=(",", ":")).encode()
    dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_atomic(dfd, path.name, data, durable=False)
    finally:
        os.close(dfd)
