"""`res wait` and `res run --wait`: block until an entry is finished, then answer with its done line
and the exit code an agent can branch on (ops/status.wait_code).

With `res serve` running, the loop answers when the pass that settles the job is over (it acts on
the unit's end as soon as systemd signals it); without one, passes run here, each one after a unit
of ours changed state (the same D-Bus signals) or after a second. `on_idle()` is called about every
0.1 s meanwhile, e.g. to print the job's log as it grows (LogFollower).
"""
from __future__ import annotations

import os
import sys
import time

from reconciler.config.paths import Paths

IDLE_S = 0.1
LOCAL_PASS_EVERY_S = 1.0
# The longest one pass here waits for what another process holds (state.db, the tick lock) before it
# is tried again: the wait's own limits (its --timeout, --start-within) are looked at between passes.
HERE_PASS_WAIT_S = 1.0


# How long past its deadline a waiting client gives the loop to send the answer it owes: the loop
# answers at the deadline itself; this covers only a loop that cannot answer at all (stopped).
ANSWER_GRACE_S = 0.5


def wait_for(paths: Paths, policy_of, job_id: str, timeout: float | None, on_idle=None,
             look_by: float | None = None) -> tuple[int, str, dict | None]:
    """(exit code, line, the entry as data). `policy_of()` gives the policy, only if passes must run here.
    A `timeout` is kept whatever holds state.db or the loop (issue 40): every wait of this process for
    state.db ends by then (recorded.store.wait_limits), and a loop that cannot answer is given up on
    ANSWER_GRACE_S after it. `look_by` (time.monotonic()): a pass here ends by then at the latest, so
    that `on_idle` is called at that moment (`res run --start-within`'s check)."""
    from reconciler.config.deadline import bounded

    deadline = None if timeout is None else time.monotonic() + timeout
    if deadline is None:
        return _wait_for(paths, policy_of, job_id, timeout, deadline, on_idle, look_by)
    with bounded(deadline):
        return _wait_for(paths, policy_of, job_id, timeout, deadline, on_idle, look_by)


def _wait_for(paths: Paths, policy_of, job_id: str, timeout: float | None, deadline: float | None,
              on_idle, look_by: float | None = None) -> tuple[int, str, dict | None]:
    from reconciler.loop.client import NoAnswer, NoDaemon, ask
    from reconciler.loop.protocol import Wait

    started = False
    while True:
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            # The loop answers by the deadline; the socket gets a moment longer so its answer arrives.
            answer = ask(paths.socket, Wait(job_id, timeout=left),
                         timeout=None if left is None else left + ANSWER_GRACE_S, on_idle=on_idle, idle_s=IDLE_S)
            if answer.get("code") == 2 and "unknown request" in answer.get("line", ""):
                raise NoDaemon("an older loop")  # a loop from before the wait op: wait here
            return answer["code"], answer["line"], answer.get("data")
        except NoAnswer:
            continue  # the loop ended while we waited (a restart): ask the next one, or wait here
        except NoDaemon:
            if not started:
                started = True
                from reconciler.loop.start import autostart

                ok, line = autostart(paths, policy_of(), wait=True, within=_left(deadline))
                if line:
                    print(line, file=sys.stderr)
                if ok:
                    continue
        except TimeoutError:
            from reconciler.core.exits import EXIT_TIMEOUT

            return EXIT_TIMEOUT, (f"res: {job_id} still not done after the wait's --timeout; the reconciler loop "
                                  "did not answer by then (stopped?)"), None
        return _wait_here(paths, policy_of(), job_id, _left(deadline), timeout, on_idle, look_by)


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def _wait_here(paths: Paths, policy, job_id: str, left: float | None, timeout: float | None,
               on_idle, look_by: float | None = None) -> tuple[int, str, dict | None]:
    """Passes here (no loop answers), until the entry is finished or the deadline. A pass that cannot
    write state.db (another process holds it) does not end the wait: the records are read on, and at
    the deadline the line says what held it, once."""
    import asyncio
    import logging

    from reconciler.core.errors import HeldElsewhere
    from reconciler.loop.tick import Engine
    from reconciler.recorded.errors import StoreBusy
    from reconciler.recorded.store import Store

    logging.getLogger("res").addHandler(logging.NullHandler())

    from reconciler.config.deadline import bounded

    async def one_pass(engine) -> None:
        step = time.monotonic() + HERE_PASS_WAIT_S
        if look_by is not None:
            step = min(step, max(look_by, time.monotonic() + 0.05))
        with bounded(step):  # (within the wait's own deadline, wait_for's)
            await engine.tick()

    async def run():
        loop = asyncio.get_running_loop()
        deadline = None if left is None else loop.time() + left
        busy: list[HeldElsewhere] = []
        try:
            engine = Engine(paths, policy)
        except StoreBusy as e:  # not even opened for writing: the records are read as they are
            busy.append(e)
            engine = None
        changed = asyncio.Event()
        if engine is not None:
            await engine.runtime.watch(lambda _job, state: changed.set())
            await engine.connect()
        reader = None
        try:
            while True:
                changed.clear()
                if engine is not None:
                    try:
                        await one_pass(engine)
                        busy.clear()
                    except HeldElsewhere as e:
                        busy[:] = [e]
                timed_out = deadline is not None and loop.time() >= deadline
                try:
                    if engine is None and reader is None:
                        reader = Store.open(paths, readonly=True)
                    decided = finished(engine.store if engine is not None else reader, paths, job_id, timed_out,
                                       timeout, held=busy[0] if busy else None)
                except StoreBusy as e:  # not even readable now (a holder in exclusive locking mode)
                    busy[:] = [e]
                    decided = _held_answer(job_id, timeout, e) if timed_out else None
                if decided is not None:
                    return decided
                until = loop.time() + LOCAL_PASS_EVERY_S
                if deadline is not None:
                    until = min(until, deadline)
                while not changed.is_set() and loop.time() < until:
                    if on_idle is not None:
                        on_idle()
                    try:
                        await asyncio.wait_for(changed.wait(), min(IDLE_S, max(until - loop.time(), 0.001)))
                    except asyncio.TimeoutError:
                        pass
        finally:
            if reader is not None:
                reader.close()
            if engine is not None:
                await engine.close()

    return asyncio.run(run())


def _held_answer(job_id: str, timeout: float | None, held) -> tuple[int, str, None]:
    from reconciler.core.exits import EXIT_TIMEOUT
    from reconciler.render.text import fmt_span

    return EXIT_TIMEOUT, f"res: {job_id} not known to be done after {fmt_span(timeout or 0)}: {held}", None


def finished(store, paths: Paths, job_id: str, timed_out: bool, timeout: float | None,
             held=None) -> tuple[int, str, dict | None] | None:
    """The answer to a wait once there is one: the entry is finished, gone, or the time is up.
    `held`: why no pass could run meanwhile (state.db held by another process), said at the timeout."""
    from reconciler.core.models import TERMINAL
    from reconciler.core.exits import EXIT_TIMEOUT
    from reconciler.ops.status import entry_json, wait_code
    from reconciler.render.status import done_line
    from reconciler.render.text import fmt_span

    rec = store.get(job_id)
    if rec is None and held is not None:  # asked for (in queue.toml), not yet recorded: no pass could run
        return _held_answer(job_id, timeout, held) if timed_out else None
    if rec is None:
        return 1, f"res: no such entry: {job_id}", None
    if rec.phase in TERMINAL:
        return wait_code(rec), done_line(rec), entry_json(rec, paths)
    if timed_out:
        why = f"; no pass could run: {held}" if held is not None else ""
        return (EXIT_TIMEOUT, f"res: {job_id} still {rec.phase.value} after {fmt_span(timeout or 0)}{why}",
                entry_json(rec, paths))
    return None


class LogFollower:
    """Prints a job's log to stdout as it grows (raw bytes: the job's own output, as it wrote it);
    `on_start()` once the log exists (the job was started). `echo` False: only that."""

    LOCATE_EVERY_S = 1.0

    def __init__(self, path, on_start=None, out=None, echo: bool = True, locate=None):
        """`locate()`: where the log is, asked again (about once a second) until it is seen: a queued
        job's log is where it is started (a cluster job's: the policy's shared directory)."""
        self.path, self.on_start, self.echo, self.locate = path, on_start, echo, locate
        self.offset = 0
        self.seen = False
        self.located_at = time.monotonic()
        self.out = out if out is not None else sys.stdout.buffer

    def poll(self, relocate: bool = False) -> None:
        if not self.seen and self.locate is not None and (
                relocate or time.monotonic() - self.located_at >= self.LOCATE_EVERY_S):
            self.located_at = time.monotonic()
            try:
                self.path = self.locate()
            except Exception:  # state.db busy or unreadable for a moment: the path known so far
                pass
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not self.seen:
                self.seen = True
                if self.on_start is not None:
                    self.on_start()
            while self.echo:
                data = os.pread(fd, 1 << 20, self.offset)
                if not data:
                    break
                self.offset += len(data)
                self.out.write(data)
            if self.echo:
                self.out.flush()
        finally:
            os.close(fd)


class ThrottleWatch:
    """Tells once, on stderr, that the job waited for is at its own memory limit and stalling on it
    (the rule of `res status`'s warning, core.quantities.throttled), from the last pass's observation
    in state.db, looked at about every EVERY_S."""

    EVERY_S = 2.0

    def __init__(self, paths: Paths, job_id: str, out=None):
        self.paths, self.job_id = paths, job_id
        self.out = out if out is not None else sys.stderr
        self.said = False
        self.looked_at = time.monotonic()

    def poll(self) -> None:
        if self.said or time.monotonic() - self.looked_at < self.EVERY_S:
            return
        self.looked_at = time.monotonic()
        try:
            line = throttle_notice(self.paths, self.job_id)
        except Exception:  # state.db busy or unreadable for a moment: looked at again later
            return
        if line:
            self.said = True
            print(line, file=self.out, flush=True)


def throttle_notice(paths: Paths, job_id: str) -> str | None:
    """The throttle line for `job_id` if the last pass saw it throttled, else None."""
    from reconciler.core.quantities import throttled
    from reconciler.recorded.store import Store

    # Plain JSON until the job is found throttled: a waiting client asks every few seconds, and
    # building the record would load the model layer (pydantic) into every `res wait`.
    store = Store.open(paths, readonly=True)
    try:
        obs = ((store.get_meta_json("last_tick", {}).get("world") or {}).get("jobs") or {}).get(job_id) or {}
        pressure, used = obs.get("pressure_avg60"), obs.get("mem_used_gb") or 0.0
        if pressure is None:
            return None
        mem_gb = (store.row(job_id).get("request") or {}).get("mem_gb")
        if not isinstance(mem_gb, (int, float)) or not throttled(used, mem_gb, pressure):
            return None
        rec = store.get(job_id)
    finally:
        store.close()
    if rec is None:
        return None
    from reconciler.render.lines import throttle_line

    return throttle_line(rec.request, used, pressure)


def tail_lines(path, n: int, limit: int = 8 << 20) -> bytes:
    """The last `n` lines of a file (at most `limit` bytes of it), as bytes."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(size - limit, 0))
            data = f.read()
    except OSError:
        return b""
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-n:]) if n > 0 else b""
