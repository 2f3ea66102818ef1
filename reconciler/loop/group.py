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
        self.waiting: list[tuple[dict, str, str | None, asyncio.Future]] = []
        self.writing: asyncio.Task | None = None
        self.under_way: asyncio.Future | None = None  # the write being made (done when it is durable)
        self.batches = self.requests = 0  # what the grouping achieved (requests per write)

    async def written(self, limit_s: float) -> None:
        """Return once the write under way now (if any) is done, or after `limit_s`: a pass about to
        begin waits for it, so that it decides these requests too rather than leave them to the next
        pass (under a crowd that halves the passes)."""
        under_way = self.under_way
        if under_way is not None and not under_way.done():
            await asyncio.wait([under_way], timeout=limit_s)

    async def add(self, fields: dict, kind: str, who: str | None):
        from reconciler.desired.reader import DesiredError

        future = asyncio.get_running_loop().create_future()
        self.waiting.append((fields, kind, who, future))
        if self.writing is None or self.writing.done():
            self.writing = asyncio.ensure_future(self._write_all())
        got = await future
        if isinstance(got, DesiredError):
            raise got
        return got

    async def _write_all(self) -> None:
        """Write what waits, one batch per write, until nothing does. The first request of an idle
        loop is written at once: grouping never delays a request, it only spares the later ones."""
        while self.waiting:
            batch, self.waiting = self.waiting, []
            self.batches += 1
            self.requests += len(batch)
            self.under_way = asyncio.ensure_future(asyncio.to_thread(self.writer.add_many,
                                                                     [(f, k, w) for f, k, w, _ in batch]))
            try:
                results = await self.under_way
            except Exception as e:  # noqa: BLE001 - each caller is told; nothing of the batch was written
                for *_, future in batch:
                    if not future.done():
                        future.set_exception(e)
                continue
            for (*_, future), got in zip(batch, results):
                if not future.done():
                    future.set_result(got)
