"""`res serve`: the APScheduler loop and the single writer (DESIGN §2, §6).

One asyncio loop holds the D-Bus connection, an AsyncIOScheduler that asks for a pass every `tick_s`,
and a unix socket where CLI calls ask for a decision now (its requests and answers: loop/protocol.py;
each op's handler: loop/answers.py). A request for a pass that arrives while one runs is never lost:
it sets a dirty flag and the loop runs again (APScheduler's max_instances alone would drop it)."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import sqlite3
import time
from typing import TYPE_CHECKING

from reconciler.config.locks import LockBusy, acquire, release
from reconciler.loop.answers import answer_request
from reconciler.loop.protocol import Answer, answer_line, read_request
from reconciler.recorded.errors import StoreReplaced
from reconciler.core.models import Plan
from reconciler.config.paths import Paths
from reconciler.core.errors import HeldElsewhere, RetryLater, needs_a_person

log = logging.getLogger("res.serve")

if TYPE_CHECKING:
    from reconciler.ops.engine import Engine


# A request is one JSON line: the caller's command and environment (ARG_MAX, 2 MiB on Linux, bounds
# both together; the client sends UTF-8, not \u escapes). Past this it is not a request res sends.
REQUEST_LIMIT = 8 << 20
MAX_CONNECTIONS = 512  # requests open at once (each `res wait` holds one while it waits)
# A connection buffers at most about twice this before its reading pauses: a request this small
# (nearly all are) is read at once, however many arrive together.
SMALL_REQUEST = 64 << 10
MAX_READING = 16  # bigger requests read at once: each may buffer up to REQUEST_LIMIT
REQUEST_S = 10.0  # to send the request line
REFUSED_LOG_S = 10.0  # at most one log line this often about requests refused for their shape
SAY_AGAIN_S = 600.0  # a pass failing the same way is logged again at most this often
# The longest one statement of the loop waits for another process's lock on state.db: a pass that
# meets a held database fails at once (and is tried again), and the loop goes on answering.
LOOP_BUSY_S = 0.25
OPEN_BUSY_S = 5.0  # ... and when it opens state.db (a new one is set up in one write)
ENDED_STATES = ("inactive", "failed", "removed")  # a job unit in one of these has ended


class ServeBusy(Exception):
    pass


class ServeStopped(Exception):
    """The loop stopped itself: what it relies on is gone (state.db removed or replaced)."""


class Ticker:
    """Runs engine passes one at a time; `pass_after_now()` returns the plan of a pass that began after
    the call, so whatever the caller wrote before it is seen."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.begun = 0  # passes started
        self.finished = 0
        self.dirty = False
        self.task: asyncio.Task | None = None
        self.done = asyncio.Condition()
        self.last: Plan | None = None
        self.before: dict[int, list] = {}  # pass number -> what to call right before it begins
        self.on_fatal = None  # called with an error after which no pass may run
        self.on_begin = None  # called right before each pass begins
        self.on_end = None  # called after each pass, whatever its outcome
        self.failure: Exception | None = None  # why the last pass failed (None: it did not)
        self._said: tuple[str, float] | None = None  # the last failure logged, and when

    def kick(self, before=None) -> int:
        """Ask for a pass; returns the number of the pass that will answer. `before()` is called
        right before that pass begins (not in a pass already under way)."""
        if before is not None:
            self.before.setdefault(self.begun + 1, []).append(before)
        self.dirty = True
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())
        return self.begun + 1

    async def _run(self) -> None:
        while self.dirty:
            adder = self.engine.adder
            if adder is not None:
                await adder.written(WRITE_WAIT_S)  # requests being written now are decided by this pass
            self.dirty = False
            self.begun += 1
            for before in self.before.pop(self.begun, []):
                before()
            if self.on_begin is not None:
                self.on_begin()
            try:
                self.last = await self.engine.tick()
            except StoreReplaced as e:
                log.error("%s", e)
                self.last = None
                self.dirty = False
                if self.on_fatal is not None:
                    self.on_fatal(e)
            except Exception as e:  # noqa: BLE001 - a failed pass never stops the loop; sorted (core/errors.py)
                self.failure = e
                if isinstance(e, RetryLater):  # the world was not ready: one line, and the next pass tries
                    self._say_once(f"pass failed: {' '.join(str(e).split())}")
                elif needs_a_person(e):  # not tried again by the clock (Engine.tick): events, the safety net
                    log.exception("pass %d failed; it needs a person", self.begun)
                else:
                    log.exception("pass %d failed", self.begun)
                self.last = None  # a failed pass hands back no plan, never the one before it as new
            else:
                if self.failure is not None and self._said is not None:
                    log.warning("passes run again (%s)", self._said[0])
                self.failure, self._said = None, None
            if self.on_end is not None:
                self.on_end()
            self.finished = self.begun
            async with self.done:
                self.done.notify_all()

    def _say_once(self, line: str) -> None:
        """A failure the next passes may meet again (state.db held by another process for minutes):
        logged when it is new, and again at most every SAY_AGAIN_S while it lasts, not every pass."""
        now = time.monotonic()
        if self._said is None or self._said[0] != line or now - self._said[1] >= SAY_AGAIN_S:
            log.warning("%s", line)
            self._said = (line, now)

    async def pass_after_now(self, before=None, held: bool = False) -> Plan | None:
        """The plan of a pass begun after this call (None: it failed). `held`: a pass that another
        process's hold on state.db (or the tick lock) ended raises that instead, naming the holder."""
        want = self.kick(before)
        async with self.done:
            await self.done.wait_for(lambda: self.finished >= want)
        if held and self.last is None and isinstance(self.failure, HeldElsewhere):
            raise self.failure
        return self.last


def take_serve_lock(paths: Paths) -> int:
    paths.ensure()
    try:
        fd = acquire(paths.serve_lock, timeout=0)
    except LockBusy:
        try:
            pid = open(paths.serve_lock).read().strip() or "?"
        except OSError:
            pid = "?"
        raise ServeBusy(f"res serve is already running for {paths.root} (pid {pid})") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


async def serve(paths: Paths, policy, engine: Engine | None = None, ready=None, standby: bool = False) -> None:
    """The loop. `standby`: wait while another loop holds the state directory, take over when it
    ends (its leases are then claimed as they lapse, or at once if it handed them over)."""
    from reconciler.loop.tick import Engine as LoopEngine

    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    lock_fd = await _serve_lock(paths, stopping, standby)
    if lock_fd is None:
        return  # asked to stop while standing by
    from reconciler.recorded.store import BUSY_TIMEOUT_S, wait_limits

    wait_limits(busy_s=OPEN_BUSY_S)
    try:
        engine = engine or LoopEngine(paths, policy)
    except BaseException:
        release(lock_fd)
        wait_limits(busy_s=BUSY_TIMEOUT_S)
        raise
    wait_limits(busy_s=LOOP_BUSY_S)  # no statement of the loop's stops it answering for long
    from reconciler.loop.group import GroupAdd

    engine.adder = GroupAdd(engine.writer)
    ticker = Ticker(engine)
    fatal: list[Exception] = []

    def stop_for(e: Exception) -> None:
        fatal.append(e)
        stopping.set()

    ticker.on_fatal = stop_for
    # A unit of ours ended or went away: a pass now settles it and starts what waited for it.
    await engine.runtime.watch(lambda job_id, state: state in ENDED_STATES and ticker.kick())
    await engine.connect()
    if not engine.connected and engine.manager_absent and policy.private_manager == "auto":
        await start_private_manager(engine, paths)
    from reconciler.loop.watch import Watchers

    watchers = Watchers(engine, ticker)
    server = await _listen(paths, Requests(engine, ticker, watchers).handle)
    scheduler = _scheduled(engine, ticker, policy)
    _chain_after_pass(ticker, watchers)
    ticker.kick()
    log.info("serving %s (pid %d): a pass on every event, a look every %gs, a pass at least every %gs",
             paths.root, os.getpid(), policy.tick_s, SAFETY_NET_S)
    if ready is not None:
        ready()
    try:
        await stopping.wait()
    finally:
        scheduler.shutdown(wait=False)
        scheduler.res_events.close()
        server.close()
        await watchers.close()
        await server.wait_closed()
        if ticker.task is not None:
            await asyncio.gather(ticker.task, return_exceptions=True)
        try:
            paths.socket.unlink()
        except FileNotFoundError:
            pass
        await engine.close()
        release(lock_fd)
        wait_limits(busy_s=BUSY_TIMEOUT_S)
    if fatal:
        raise ServeStopped(str(fatal[0]))


def _chain_after_pass(ticker: Ticker, watchers) -> None:
    """After each pass, what was called before (the scheduler's re-arming), then the watchers: a view
    for those watching, the history's sample."""
    before = ticker.on_end

    def on_end() -> None:
        if before is not None:
            before()
        try:
            watchers.after_pass()
        except Exception:  # noqa: BLE001 - the view is for people watching: never a pass's failure
            log.exception("the watchers after a pass")

    ticker.on_end = on_end


async def _serve_lock(paths: Paths, stopping: asyncio.Event, standby: bool) -> int | None:
    """The state directory's serve lock; with `standby`, waited for until it is free (None: asked
    to stop meanwhile). ServeBusy without `standby` when another loop holds it."""
    while True:
        try:
            return take_serve_lock(paths)
        except ServeBusy:
            if not standby:
                raise
        try:
            await asyncio.wait_for(stopping.wait(), 0.2)
            return None
        except asyncio.TimeoutError:
            pass


async def _listen(paths: Paths, handle) -> asyncio.AbstractServer:
    """The loop's socket, 0600 (created under umask 077); a stale one is ours to replace: we hold the
    serve lock."""
    if paths.socket.exists() or paths.socket.is_symlink():
        paths.socket.unlink()
    old = os.umask(0o077)
    try:
        # A request is one JSON line holding the caller's command and environment: one past
        # SMALL_REQUEST (a long command line: ARG_MAX is 2 MiB or more) is read in parts.
        return await asyncio.start_unix_server(handle, path=str(paths.socket), limit=SMALL_REQUEST)
    finally:
        os.umask(old)


# A pass at least this often whatever the looks say: what no event or look tells (a property of
# the agents slice set by hand, a stray transient service) is seen within it.
SAFETY_NET_S = 60.0
# How long a pass about to begin waits for a write of new requests under way (loop/group.py): one
# such write takes 2-30 ms.
WRITE_WAIT_S = 0.1
# How often an idle loop looks (a queue file edited by hand, an agent session started): tick_s when
# anything is queued, live or noted.
IDLE_LOOK_S = 5.0


def _existing(d: str) -> str:
    """`d`, or its nearest ancestor that exists (a policy directory made later is found by a look)."""
    while d and not os.path.isdir(d) and os.path.dirname(d) != d:
        d = os.path.dirname(d)
    return d or "/"


def _scheduled(engine: Engine, ticker: "Ticker", policy):
    """APScheduler's jobs on this event loop (coroutines, so they run on it, not in a thread):
    - `due`: re-armed after every pass for the time it asked for (core/wake.py: entries waiting for
      room and running jobs every tick_s, a note's expiry, game mode's end, …), and removed when
      nothing is due by the clock;
    - `look` every tick_s: the cheap checks of loop/look.py, a pass only when one finds something;
    - `safety` every SAFETY_NET_S: a pass whatever;
    - `clean`, when the policy asks for it: the silent cleanup.
    A unit of ours that ends and a request on the socket ask for a pass themselves (serve())."""
    from datetime import datetime, timezone

    from apscheduler.schedulers.asyncio import AsyncIOScheduler
    from apscheduler.jobstores.base import JobLookupError

    from reconciler.loop.look import Look, stat_key
    from reconciler.loop.tick import policy_paths

    async def kick() -> None:
        ticker.kick()

    policy_files = policy_paths()  # found once, not every look
    look = Look(engine.paths, lambda: tuple(stat_key(f) for f in policy_files), lambda: engine.policy.adopt_sessions)

    async def look_now() -> None:
        why = look.changed()
        if why is not None:
            log.debug("a pass: %s", why)
            ticker.kick()

    from reconciler.loop.events import Events

    loop = asyncio.get_running_loop()
    # The kernel says when a desired or policy file is written and when a note's owner ends (a look
    # then, and a pass if it finds a change); without inotify or pidfds the loop looks every few seconds.
    events = Events([_existing(d) for d in (str(engine.paths.desired), *(os.path.dirname(f) for f in policy_files))],
                    lambda: loop.create_task(look_now()))
    looking_every = [policy.tick_s]

    def rearm() -> None:
        # A PSI trigger wakes a pass when memory pressure rises past the policy's threshold (re-armed
        # only when the threshold changes; loop/events.py).
        events.watch_pressure(engine.policy.pressure_full_pct, ticker.kick)
        look.owners = set(engine.note_owners)
        at = engine.next_at
        # With the kernel's events, what a look finds is told as it happens: no look at all (the
        # safety-net pass every SAFETY_NET_S sees agent sessions that no SessionStart hook announced).
        # Without them, an idle loop (nothing due by the clock) looks less often than a busy one: a
        # wake-up costs CPU whatever it does, and nothing an agent does waits on a look (requests
        # come on the socket, unit ends as signals).
        if events.ok and events.owners(look.owners):
            every = None
        else:
            every = engine.policy.tick_s if at is not None or look.owners else max(engine.policy.tick_s, IDLE_LOOK_S)
        if every != looking_every[0]:
            looking_every[0] = every
            if every is None:
                scheduler.pause_job("look")
            else:
                scheduler.reschedule_job("look", trigger="interval", seconds=every)
        if at is None:
            try:
                scheduler.remove_job("due")
            except JobLookupError:
                pass
            return
        scheduler.add_job(kick, "date", run_date=datetime.fromtimestamp(at, timezone.utc), id="due",
                          replace_existing=True, misfire_grace_time=None)

    ticker.on_begin, ticker.on_end = look.mark, rearm
    scheduler = AsyncIOScheduler()
    if policy.clean_every_minutes > 0:
        from reconciler.ops.clean import default_roots

        async def cleanup() -> None:
            await auto_clean(engine, default_roots(os.getuid()), time.time())

        # at most every clean_every_minutes (auto_clean says when it is due): no wake-up more often
        scheduler.add_job(cleanup, "interval", seconds=max(60.0, policy.clean_every_minutes * 60 / 2), id="clean",
                          max_instances=1, coalesce=True)
    scheduler.add_job(look_now, "interval", seconds=policy.tick_s, id="look", max_instances=1, coalesce=True)
    scheduler.add_job(kick, "interval", seconds=SAFETY_NET_S, id="safety", max_instances=1, coalesce=True)
    scheduler.start()
    scheduler.res_events = events  # closed with the scheduler (serve())
    return scheduler


class Requests:
    """The socket's side of the loop: one request per connection. What a client can make the loop
    spend is bounded: connections at once (MAX_CONNECTIONS), the size of a request (REQUEST_LIMIT)
    and the time it may take to send it (REQUEST_S). A request up to SMALL_REQUEST is read at once
    (a crowd's requests arrive together and are written together, loop/group.py); a bigger one waits
    for one of MAX_READING slots, its bytes meanwhile in the kernel's socket buffer: at most
    MAX_CONNECTIONS × 2 × SMALL_REQUEST + MAX_READING × REQUEST_LIMIT of buffers. A client that hangs
    up early costs nothing but its connection."""

    def __init__(self, engine: Engine, ticker: "Ticker", watchers=None):
        self.engine, self.ticker = engine, ticker
        self.watchers = watchers  # loop/watch.Watchers: the machine view, for `watch` and the web page
        self.connections = 0
        self.reading_big = asyncio.Semaphore(MAX_READING)
        self.refused, self.refused_logged_at = 0, -REFUSED_LOG_S

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            if self.connections > MAX_CONNECTIONS:
                answer = Answer(1, "res: the reconciler loop has too many requests open; try again").to_wire()
            else:
                answer = await self._answer(reader, writer)
            if answer is None:  # nothing was asked, or the caller went away (a wait it gave up)
                return
            writer.write(answer_line(answer))
            await writer.drain()
        except (ConnectionError, OSError):
            pass  # the caller hung up before its answer: nothing to tell, nothing to log
        finally:
            self.connections -= 1
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> dict | None:
        try:
            line = await asyncio.wait_for(self._request_line(reader), REQUEST_S)
            if line is None:
                return None  # hung up (or past the size limit) before a whole request: nothing was asked
            req, problem = read_request(line)
            if problem is not None:  # not a request res sends: said to the caller, one line in the log
                self._refused(problem)
                return Answer(2, f"res: {problem}; nothing was done").to_wire()
            # its handler (loop/answers.HANDLERS): `watch` streams on this connection, `web` starts the page
            return await answer_request(self.engine, self.ticker, req, reader,
                                        say=lambda obj: writer.write(answer_line(obj)), writer=writer,
                                        watchers=self.watchers)
        except asyncio.TimeoutError:
            return None  # a client that stalls mid-request is dropped
        except (ConnectionError, asyncio.LimitOverrunError, asyncio.IncompleteReadError):
            return None
        except Exception as e:  # noqa: BLE001 - a bad request gets an answer, never kills the loop
            if isinstance(e, ValueError) and ("limit" in str(e) or "Separator" in str(e)):
                return None  # a line over REQUEST_LIMIT (the stream's words): not a request any res sends
            if not needs_a_person(e) and not isinstance(e, sqlite3.Error):
                # The world's (state.db busy, a disk full, the manager away): said in its one line.
                what = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
                return Answer(1, f"res: {' '.join(what.split())[:300]}").to_wire()
            # A bug met on the way (what a request can carry is checked above): its traceback in the
            # log, once, and the caller told in one line that res failed, not why in Python's words.
            log.exception("answering a request")
            return Answer(1, "res: the reconciler loop failed to answer this request (an error in res; "
                             "its log has the details); nothing more was done").to_wire()

    def _refused(self, problem: str) -> None:
        """One line in the log per refused request, at most one every REFUSED_LOG_S (a flood of
        garbage does not fill the log): how many were refused since, and the last one's problem."""
        now = time.monotonic()
        self.refused += 1
        if now - self.refused_logged_at >= REFUSED_LOG_S:
            log.warning("refused %d request%s on the socket that res does not send (the last: %s)",
                        self.refused, "s" if self.refused != 1 else "", problem)
            self.refused, self.refused_logged_at = 0, now

    async def _request_line(self, reader: asyncio.StreamReader) -> bytes | None:
        """The request's one line, or None if the caller hung up before its end or it is past
        REQUEST_LIMIT."""
        try:
            return await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError:
            return None
        except asyncio.LimitOverrunError:
            pass  # past SMALL_REQUEST: read on under a slot
        async with self.reading_big:
            parts, size = [], 0
            while True:
                try:
                    part = await reader.readuntil(b"\n")
                except asyncio.LimitOverrunError as e:
                    part = await reader.readexactly(e.consumed)
                except asyncio.IncompleteReadError:
                    return None
                parts.append(part)
                size += len(part)
                if size > REQUEST_LIMIT:
                    return None
                if part.endswith(b"\n"):
                    return b"".join(parts)


async def start_private_manager(engine: Engine, paths: Paths) -> None:
    """No systemd user manager to reach (a container, CI, a root shell without lingering): boot one for
    this state directory (reconciler/runtime/usermanager.py), say so in one line, and connect to it. It
    outlives this loop; a restarted loop, and every `res` call for this state directory, reuse it."""
    from reconciler.runtime.usermanager import ManagerError, pids, start

    try:
        await asyncio.to_thread(start, paths.root)
    except ManagerError as e:
        log.error("no systemd user manager reachable, and a private one could not be started: %s", e)
        return
    await engine.connect()
    where = engine.runtime.address or "?"
    log.warning("no systemd user manager was reachable: started a private one for %s (systemd --user pid %s, bus %s)",
                paths.root, pids(paths.root).get("systemd", "?"), where)


async def auto_clean(engine: Engine, roots, now: float) -> list[str] | None:
    """The loop's silent cleanup: like `res clean --yes` without project patterns,
    at most every `clean_every_minutes` (the last run is kept in state.db, so a restarted loop does
    not clean sooner). The sweep runs in a thread; the loop keeps ticking. None when not due."""
    from reconciler.ops.clean import clean
    from reconciler.ops.failedunits import reset_failed_units
    from reconciler.core.clean import due

    policy = engine.policy
    last = engine.store.get_meta("clean_last")
    if not due(float(last) if last else None, now, policy.clean_every_minutes * 60):
        return None
    engine.store.set_meta("clean_last", repr(now))
    lines = await asyncio.to_thread(clean, roots, now, os.getuid(), policy.scratch_hours * 3600, yes=False, auto=True)
    lines += await reset_failed_units(engine.runtime.user_side() if engine.connected else None, yes=True,
                                      prefix=policy.unit_prefix)
    for line in lines:
        log.info("clean: %s", line)
    return lines
