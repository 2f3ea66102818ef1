"""The loop's answer to each request on its socket: HANDLERS, one handler per op of loop/protocol.py
(tests/pure/test_protocol.py fails for an op without one), each given the request's record and the
connection it came on (Call) and returning its Answer. loop/serve.py reads and checks the line, and
writes what comes back."""
from __future__ import annotations

import asyncio
import math
import os
import time
from typing import TYPE_CHECKING

from reconciler.core.errors import HeldElsewhere, RetryLater
from reconciler.loop.protocol import (REQUESTS, Accepted, Answer, Gate, Ping, Release, ReleaseRequest, Session,
                                      Status, Submit, Tick, Wait, Watch, Web, answer_line)
from reconciler.ops import requests as ops

if TYPE_CHECKING:
    from reconciler.loop.serve import Ticker
    from reconciler.ops.engine import Engine


class Call:
    """What a handler has of its request's connection: the engine and ticker; the caller's reader (a
    wait or a watch ends when the caller hangs up); say(obj), a line before the answer; the writer and
    the watchers (the machine view) where the loop's own socket has them."""

    __slots__ = ("engine", "ticker", "reader", "say", "writer", "watchers")

    def __init__(self, engine: Engine, ticker: Ticker, reader=None, say=None, writer=None, watchers=None):
        self.engine, self.ticker, self.reader, self.say = engine, ticker, reader, say
        self.writer, self.watchers = writer, watchers


async def answer_request(engine: Engine, ticker: Ticker, req: dict, reader=None, say=None, writer=None,
                         watchers=None) -> dict | None:
    """The answer to one request (its JSON object, checked by protocol.read_request), as its JSON
    object; None when there is none to send (the caller hung up on a wait, a watch ended). `say(obj)`
    sends a line before it (the id a submit was given)."""
    op = req.get("op")
    handler = HANDLERS.get(op)
    if handler is None:
        return _unknown(op).to_wire()
    answer = await handler(Call(engine, ticker, reader, say, writer, watchers), REQUESTS[op].from_wire(req))
    return None if answer is None else answer.to_wire()


def _unknown(op) -> Answer:
    return Answer(2, f"res: unknown request {str(op)[:40]!r}", data=None)


def _who(who) -> str | None:
    """The caller's process chain as it says it (for the record of who changed queue.toml)."""
    return " ".join(who.split())[:300] if isinstance(who, str) and who.strip() else None


async def _submit(call: Call, r: Submit) -> Answer:
    """`res run` / `res note`: answered by the caller's deadline (its fields' `answer_by`, and at most
    the policy's answer_timeout_s from now): decided, or said not to start and never started (a
    --queue request: said to be queued). A request that arrives past its deadline (the loop was
    stopped while its caller waited) is not written at all."""
    engine, ticker, say = call.engine, call.ticker, call.say
    fields = dict(r.fields)
    rid = fields.get("request_id")
    now = time.time()
    by = fields.get("answer_by")
    if isinstance(by, float) and not math.isfinite(by):
        return Answer(2, "res: answer_by: not a finite time; allowed: seconds since the epoch, or none", data=None)
    if isinstance(by, (int, float)) and now >= by:
        return Answer(1, f"res: request {rid or '(no id)'} reached the reconciler loop after its caller "
                         "stopped waiting; not written, never started", data=None)
    deadline = min(by if isinstance(by, (int, float)) else now + engine.policy.answer_timeout_s,
                   now + engine.policy.answer_timeout_s)
    fields["answer_by"] = deadline  # on the entry: no pass starts it once its caller is gone

    given: list[str] = []

    def accepted(job_id: str) -> None:
        given.append(job_id)
        if say is not None:
            say(Accepted(job_id, max(deadline - time.time(), 0.0)).to_wire())

    # (a pass another process's hold ended is raised: the answer names the holder, not "no pass decided it")
    work = asyncio.ensure_future(ops.submit(engine, lambda: ticker.pass_after_now(held=True), r.kind, fields,
                                            on_accept=accepted, who=_who(r.who), deadline=deadline))
    try:
        # A moment past the deadline: the submit answers by it itself; this covers a pass that hangs.
        code, line, data = await asyncio.wait_for(asyncio.shield(work), max(deadline - time.time(), 0.0) + 1.0)
    except asyncio.TimeoutError:
        if not given:  # (its write, on a worker thread, checks the deadline under the lock: not written after)
            return Answer(1, f"res: request {rid or '(no id)'} was not written in time; it never starts", data=None)
        work.cancel()
        code, line, data = await ops.undecided(engine, _Req(given[0], fields), r.kind, "a pass did not end in time")
    hint = ops.request_hint(engine, r.kind, r.fields)
    return Answer(code, line, data=data, **({"hint": hint} if hint else {}))


class _Req:
    """What ops.undecided needs of a request the submit wrote and did not decide in time."""

    def __init__(self, job_id: str, fields: dict):
        self.id, self.queue, self.answer_by = job_id, bool(fields.get("queue")), fields.get("answer_by")


async def _release(call: Call, r: Release) -> Answer:
    code, line, data = await ops.release(call.engine, call.ticker.pass_after_now, r.id, bool(r.stop), who=_who(r.who))
    return Answer(code, line, data=data)


async def _release_request(call: Call, r: ReleaseRequest) -> Answer:
    """`res hook` after a command admitted in place ran."""
    code, line, data = await ops.release_request(call.engine, call.ticker.pass_after_now, r.request_id,
                                                 who=_who(r.who))
    return Answer(code, line, data=data)


async def _wait(call: Call, r: Wait) -> Answer | None:
    timeout = None if r.timeout is None else float(r.timeout)
    return await wait_answer(call.engine, call.ticker, str(r.id), timeout, call.reader)


async def wait_answer(engine: Engine, ticker: Ticker, job_id: str, timeout: float | None, reader=None) -> Answer | None:
    """Answer once the entry is finished (checked after every pass) or `timeout` passed; None if the
    caller hung up meanwhile."""
    from reconciler.loop.waiting import finished
    from reconciler.recorded.errors import StoreBusy

    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    gone = asyncio.ensure_future(reader.read(1)) if reader is not None else None
    try:
        while True:
            held = ticker.failure if isinstance(ticker.failure, HeldElsewhere) else None
            try:
                decided = finished(engine.store, engine.paths, job_id, deadline is not None and loop.time() >= deadline,
                                   timeout, held=held)
            except StoreBusy as e:  # not even readable (a holder in exclusive locking mode)
                if deadline is None or loop.time() < deadline:
                    decided = None
                else:
                    from reconciler.loop.waiting import _held_answer

                    decided = _held_answer(job_id, timeout, e)
            if decided is not None:
                code, line, data = decided
                return Answer(code, line, data=data)
            if gone is not None and gone.done():
                return None
            wake = 30.0 if deadline is None else max(min(deadline - loop.time(), 30.0), 0.0)
            async with ticker.done:
                try:
                    await asyncio.wait_for(ticker.done.wait(), wake)
                except asyncio.TimeoutError:
                    pass
    finally:
        if gone is not None:
            gone.cancel()


async def _tick(call: Call, r: Tick) -> Answer:
    # `res adopt`: the very pass that answers adopts (not one already under way, whose plan
    # would not be the answer).
    engine, ticker = call.engine, call.ticker
    before = (lambda: setattr(engine, "adopt_once", True)) if r.adopt else None
    plan = await ticker.pass_after_now(before)
    if plan is None:
        why = " ".join(str(ticker.failure).split()) if isinstance(ticker.failure, RetryLater) else "see its log"
        return Answer(1, f"res: the reconciler loop's pass failed: {why}")
    from reconciler.render.lines import render_plan

    # The plan as data too, so `res reconcile [--json]` prints the same as without a loop.
    return Answer(1 if plan.notices else 0, render_plan(plan), plan=plan.as_data())


async def _status(call: Call, r: Status) -> Answer:
    # From the loop's own store, whose records are parsed already (a fresh read-only connection
    # parsed every row again: 20 ms for 200 entries), on the loop's thread: the store is the
    # loop's, and a pass reads it on this thread too.
    from reconciler.ops.status import queue_problem, status

    engine = call.engine
    last = engine.last_pass_at
    if last is None or time.time() - last > engine.policy.tick_s:
        await call.ticker.pass_after_now()  # an idle loop's last pass may be a minute old: what is free now
    text, code = status(engine.paths, engine.policy, r.id, bool(r.json), bool(r.all), store=engine.store)
    problem = await asyncio.to_thread(queue_problem, engine.paths) if r.id and code == 0 else None
    return Answer(code, text, problem=problem)


async def _gate(call: Call, r: Gate) -> Answer:
    # `res hook`: would a heavy command of this size start now, or when? Against a pass that
    # began after the question (a job that ended a moment ago holds nothing any more).
    await call.ticker.pass_after_now()
    try:
        answer = call.engine.would_fit(r.size if isinstance(r.size, dict) else {}, time.time())
    except (KeyError, TypeError, ValueError) as e:  # pydantic's ValidationError is a ValueError
        errors = getattr(e, "errors", None)
        if callable(errors):
            from reconciler.core.invalid import first
            from reconciler.core.models import Request

            said = first(errors(), Request)[1]
        else:
            said = "not a size (mem_gb, cpus, est_s)"
        return Answer(2, f"res: gate: bad size: {said}")
    return Answer(0, answer.get("line") or "", answer=answer)


async def _session(call: Call, r: Session) -> Answer:
    # An agent session started (its CLI's SessionStart hook, through `res hook`): a pass now
    # adopts it, instead of the next look finding it.
    call.ticker.kick()
    return Answer(0, "noted")


async def _watch(call: Call, r: Watch) -> Answer | None:
    """One JSON line per view until the caller hangs up (its connection counts against the socket's
    MAX_CONNECTIONS meanwhile). Anything the caller sends after its request ends the stream."""
    if call.watchers is None or call.writer is None:
        return Answer(2, "res: watch is answered on the loop's socket only")
    watchers, writer = call.watchers, call.writer
    q = watchers.subscribe()
    gone = asyncio.ensure_future(call.reader.read(1))
    got = None
    try:
        while True:
            got = asyncio.ensure_future(q.get())
            done, _ = await asyncio.wait({got, gone}, return_when=asyncio.FIRST_COMPLETED)
            if got not in done or got.result() is None:
                return None  # the caller hung up, or the loop is ending
            writer.write(answer_line(got.result()))
            await writer.drain()
    finally:
        for task in (got, gone):
            if task is not None:
                task.cancel()
        watchers.unsubscribe(q)


async def _web(call: Call, r: Web) -> Answer:
    if call.watchers is None:  # a socket without the machine view (a test's own) answers as before res web
        return _unknown(r.op)
    from reconciler.loop.web import web_answer  # the page's server (loop/web.py)

    return await web_answer(call.engine, call.ticker, call.watchers)


async def _ping(call: Call, r: Ping) -> Answer:
    return Answer(0, f"pid {os.getpid()}", code_id=call.engine.code_id)


# op -> its handler: one for every op of protocol.REQUESTS (tests/pure/test_protocol.py holds them together).
HANDLERS = {
    Submit.op: _submit, Release.op: _release, ReleaseRequest.op: _release_request, Wait.op: _wait, Tick.op: _tick,
    Status.op: _status, Gate.op: _gate, Session.op: _session, Watch.op: _watch, Web.op: _web, Ping.op: _ping,
}
