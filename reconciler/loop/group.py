"""Group commit of the loop's new requests: the `res run` / `res note` requests that arrive while one
write of queue.toml is under way share the next one (one lock, one durable write, one change line per
asker), instead of each waiting its turn for a write of its own. Each is answered only after its write
is durable: the caller's id is given out by then, never before."""
from __future__ import annotations

import asyncio


class GroupAdd:
    """`await add(fields, kind, who) -> Request` (DesiredError if refused), through one Writer."""

    def __init__(self, writer):
        self.writer = writer
        self.waiting: list[tuple] = []  # (fields, kind, who, prepare, the caller's future)
        self.writing: asyncio.Task | None = None
        self.batches = self.requests = 0  # what the grouping achieved (requests per write)

    async def written(self, limit_s: float) -> None:
        """Return once every request written or waiting to be written now is durable (the writes
        under way and the batch queued behind them), or after `limit_s`: a pass about to begin waits
        for them, so that it decides these requests too rather than leave them to the next pass. Not
        only the write under way: under a crowd the first request of a burst is written alone, the
        rest of the burst a moment later in one batch, and a pass that waited only for the first
        wrote one and left sixty to a pass of their own (twice the passes)."""
        writing = self.writing
        if writing is not None and not writing.done():
            await asyncio.wait([writing], timeout=limit_s)

    async def add(self, fields: dict, kind: str, who: str | None, prepare=None):
        """`prepare(fields) -> fields`: what the request needs done off the event loop before it is
        written (its lock's scope: stats of its cwd); run on the write's worker thread, so a crowd's
        requests take one thread hop per write rather than one each (64 hops queued on the default
        executor kept the first write of a burst waiting ~20 ms)."""
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((fields, kind, who, prepare, future))
        if self.writing is None or self.writing.done():
            self.writing = asyncio.ensure_future(self._write_all())
        got = await future
        if isinstance(got, Exception):  # a DesiredError (refused), or its preparation failed
            raise got
        return got

    async def _write_all(self) -> None:
        """Write what waits, one batch per write, until nothing does. The first request of an idle
        loop is written at once: grouping never delays a request, it only spares the later ones."""
        while self.waiting:
            batch, self.waiting = self.waiting, []
            self.batches += 1
            self.requests += len(batch)
            try:
                results = await asyncio.to_thread(self._write, [item[:4] for item in batch])
            except Exception as e:  # noqa: BLE001 - each caller is told; nothing of the batch was written
                for *_, future in batch:
                    if not future.done():
                        future.set_exception(e)
                continue
            for (*_, future), got in zip(batch, results):
                if not future.done():
                    future.set_result(got)

    def _write(self, batch: list) -> list:
        """On the worker thread: each request prepared, then those prepared written in one edit."""
        out: list = [None] * len(batch)
        items, where = [], []
        for i, (fields, kind, who, prepare) in enumerate(batch):
            try:
                items.append((prepare(fields) if prepare is not None else fields, kind, who))
                where.append(i)
            except Exception as e:  # noqa: BLE001 - that request's answer; the others are written
                out[i] = e
        if items:
            for i, got in zip(where, self.writer.add_many(items)):
                out[i] = got
        return out
