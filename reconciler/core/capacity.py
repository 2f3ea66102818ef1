"""Capacity (DESIGN §5.1): what agents may use now, who holds the rest, and until when. Pure."""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from reconciler.core.models import Game, JobRecord, Phase, Request, World
from reconciler.core.rules import Rules

HOLDING = (Phase.starting, Phase.running)


@dataclass(frozen=True)
class Holder:
    id: str
    title: str
    project: str
    held_gb: float  # what it frees when it ends: max(its book, what it uses now)
    cpus: float
    eta: float | None  # expected end (started + estimate)
    overdue: bool
    lock: str | None = None
    session: bool = False
    by: str | None = None  # who asked for it (Request.by)


@dataclass
class Capacity:
    mem_gb: float  # budget_mem: what agents may still take now
    cpus: float
    reserve_gb: float
    reserve_cpus: float
    headroom_gb: float
    max_mem_gb: float  # the whole agent budget on an empty machine
    max_cpus: float
    force_mem_gb: float  # --force: MemAvailable − reserve − headroom, ledger ignored
    force_cpus: float
    game: bool
    holders: list[Holder] = field(default_factory=list)
    # Memory pressure over the policy's threshold (DESIGN §5.9), as data (pressure_of): while it is
    # set nothing new fits, --force or not; None: under the threshold, not observed, or PSI ignored.
    pressure: dict | None = None
    # The ladder's amber by memory (DESIGN §5.1, guard_of): less than the policy's guard_gb is really
    # free beyond the reserve and headroom, so a book was wrong somewhere; nothing new fits, --force or
    # not, until jobs end or shrink. None: green.
    guard: dict | None = None

    @property
    def held_back(self) -> bool:
        """Amber (or red): nothing new starts, whatever the ledger says."""
        return self.pressure is not None or self.guard is not None

    def fits(self, req: Request) -> bool:
        if self.held_back:
            return False
        if req.force:
            return self.fits_past_ledger(req)
        return req.book <= self.mem_gb and req.cpus <= self.cpus

    def fits_past_ledger(self, req: Request) -> bool:
        """Whether --force would start it: against what is really free (MemAvailable − reserve −
        headroom), the ledger's claims ignored."""
        return req.book <= self.force_mem_gb and req.cpus <= self.force_cpus

    def never_fits(self, req: Request) -> bool:
        return req.book > self.max_mem_gb or req.cpus > self.max_cpus

    def take(self, req: Request, holder: Holder) -> None:
        """Count a grant made in this pass, so the next decision of the same pass sees it."""
        self.mem_gb -= req.book
        self.cpus -= req.cpus
        self.force_mem_gb -= req.book
        self.holders.append(holder)

    def by_eta(self) -> list[Holder]:
        return sorted(self.holders, key=lambda h: (h.eta is None, h.eta or 0, h.id))


def rebookable(req: Request, rec: JobRecord | None) -> bool:
    """Is this entry's book still its command's history's to decide (DESIGN §5.1)? A job not started
    yet, run here, not gated (its size is the gate's guess), and never stopped by the ladder (a stop
    raised its book, which stays)."""
    return (req.kind == "job" and not req.gated and req.on != "cluster"
            and (rec is None or (rec.phase == Phase.queued and not rec.evictions)))


def with_book(req: Request, book_gb: float | None, source: str | None) -> Request:
    """`req` booked at `book_gb` from `source` where that is below its cap, else at its cap."""
    from dataclasses import replace

    if book_gb is None or book_gb >= req.mem_gb:
        return req if req.book_gb is None else replace(req, book_gb=None, booked_from=None)
    if req.book_gb == book_gb and req.booked_from == source:
        return req
    return replace(req, book_gb=book_gb, booked_from=source)


def book_source(req: Request) -> str:
    """Where an entry's book came from (DESIGN §5.1): its command's history, a raise after res
    stopped it, the gate's guess, its cap."""
    if req.kind == "note":
        return "its size (a note)"
    if req.gated:
        return "the gate's guess" + (f" ({req.sized_from})" if req.sized_from else "")
    if req.book_gb is not None and req.book < req.mem_gb:
        return req.booked_from or "its history"
    return req.booked_from if req.booked_from and req.booked_from.startswith("its cap") else "its cap (no history yet)"


USER_CPU_SHARE = 0.25  # the most of the machine's CPUs the user's reserve takes
GAME_CPU_SHARE = 0.5  # … and the game reserve


def cpu_reserve(configured: float, nproc: int, share: float = USER_CPU_SHARE) -> float:
    """The configured CPU reserve, scaled down on small machines: at most `share` of the CPUs, so
    that a 2-core laptop does not give agents a single CPU to queue for (docs/decisions.md)."""
    return max(0.0, min(configured, nproc * share))


# The most of the machine's memory the shipped reserve and headroom take together (and in game mode,
# the game reserve and the headroom): the defaults (6 + 2, game 12 + 2 GB) stand from 11 GB (game:
# 16 GB) up. A reserve someone set stands as set (Rules.reserve_as_set).
USER_MEM_SHARE = 0.75
GAME_MEM_SHARE = 0.9


def mem_reserve(reserve_gb: float, headroom_gb: float, total_gb: float | None,
                share: float = USER_MEM_SHARE, as_set: bool = False) -> tuple[float, float]:
    """(reserve, headroom) in GB: the shipped ones scaled down together on a small machine so that
    they take at most `share` of its memory. They (6 GB kept for the person, 2 GB of headroom) took
    all of an 8 GB laptop: every job "can never fit (max 0 GB)" (found by the guest tier, docs/guest.md).
    `as_set`: someone set them (a file, a RES_ variable): as set. `total_gb` None or 0: not known, as
    they are."""
    want = reserve_gb + headroom_gb
    if as_set or not total_gb or total_gb <= 0 or want <= share * total_gb:
        return reserve_gb, headroom_gb
    k = share * total_gb / want
    return reserve_gb * k, headroom_gb * k


def _set(policy: Rules, reserve_key: str) -> bool:
    """The pair a reserve is scaled with (it and the headroom) was set by someone, not shipped: a game
    reserve set on its own leaves the normal one scaled, and the other way round."""
    return reserve_key in policy.reserve_as_set or "small_headroom_gb" in policy.reserve_as_set


def headroom(policy: Rules, total_gb: float | None) -> float:
    """The small headroom in force on a machine of `total_gb` (mem_reserve)."""
    return mem_reserve(policy.user_reserve_gb, policy.small_headroom_gb, total_gb,
                       as_set=_set(policy, "user_reserve_gb"))[1]


def user_reserve(policy: Rules, total_gb: float | None) -> float:
    """The user's own memory reserve in force on a machine of `total_gb` (mem_reserve), game mode aside."""
    return mem_reserve(policy.user_reserve_gb, policy.small_headroom_gb, total_gb,
                       as_set=_set(policy, "user_reserve_gb"))[0]


def reserves(policy: Rules, game: Game, now: float, nproc: int, total_gb: float | None = None) -> tuple[float, float, bool]:
    """(GB, CPUs, game on) kept for the user now, on a machine of `nproc` CPUs and `total_gb` of
    memory (each scaled down on a small machine: cpu_reserve, mem_reserve). Game mode only ever adds
    to the user's reserve: a policy whose game reserve is the smaller one must not let agents take
    more while the user plays."""
    on = game.active(now)
    user_cpus = cpu_reserve(policy.user_reserve_cpus, nproc)
    user_gb = user_reserve(policy, total_gb)
    if not on:
        return user_gb, user_cpus, on
    game_gb = mem_reserve(policy.game_reserve_gb, policy.small_headroom_gb, total_gb, GAME_MEM_SHARE,
                          as_set=_set(policy, "game_reserve_gb"))[0]
    return max(game_gb, user_gb), max(cpu_reserve(policy.game_reserve_cpus, nproc, GAME_CPU_SHARE), user_cpus), on


def reserve_warnings(policy: Rules) -> list[str]:
    """Policy values that do not mean what they say: a game reserve below the normal one."""
    out = []
    for what, unit, game, user in (("gb", "GB", policy.game_reserve_gb, policy.user_reserve_gb),
                                   ("cpus", "cpus", policy.game_reserve_cpus, policy.user_reserve_cpus)):
        if game < user:
            out.append(f"policy: game_reserve_{what} ({game:g} {unit}) is below user_reserve_{what} ({user:g} {unit}); "
                       f"game mode keeps {user:g} {unit} (raise game_reserve_{what} to mean more)")
    return out


def holder_of(rec: JobRecord, used_gb: float, now: float) -> Holder:
    """A cluster job holds nothing here (its session still counts against the session caps)."""
    req = rec.request
    expires = rec.expires()
    remote = rec.where == "cluster"
    return Holder(
        id=req.id,
        title=req.title,
        project=req.project,
        held_gb=0.0 if remote else max(req.book, used_gb),
        cpus=0.0 if remote else req.cpus,
        eta=rec.eta(),
        overdue=expires is not None and now > expires,
        lock=req.lock,
        session=req.session,
        by=req.by,
    )


PRESSURE_WINDOW_S = 10  # PSI's avg10: the window the threshold is compared with


def pressure_of(policy: Rules, world: World) -> dict | None:
    """Memory pressure that holds back new work (DESIGN §5.9): the machine's or the agents slice's
    `full avg10` above the policy's `pressure_full_pct`, the higher of the two; None when neither
    is, when neither was observed, or when the policy says 0 (PSI ignored).

    `full` is the share of time in which every non-idle task waited for memory at once (thrashing,
    reclaim storms); avg10 is its average over the last 10 s (docs/pressure.md)."""
    limit = policy.pressure_full_pct
    if limit <= 0:
        return None
    seen = [(pct, where) for pct, where in ((world.pressure_full_pct, "system"), (world.slice_pressure_full_pct, "slice"))
            if pct is not None and pct > limit]
    if not seen:
        return None
    pct, where = max(seen, key=lambda s: s[0])
    d = {"pct": pct, "kind": "full", "window_s": PRESSURE_WINDOW_S, "limit": limit, "where": where}
    if where == "slice":
        d["slice"] = policy.agents_slice
    return d


def guard_of(policy: Rules, room_gb: float) -> dict | None:
    """The ladder's amber by memory (DESIGN §5.1): what is really free beyond the reserve and headroom
    (`room_gb`: MemAvailable − reserve − headroom) is under the policy's guard_gb. None: it is not, or
    the guard is 0 (off)."""
    if policy.guard_gb <= 0 or room_gb >= policy.guard_gb:
        return None
    return {"room_gb": round(room_gb, 3), "guard_gb": policy.guard_gb}


def capacity(policy: Rules, game: Game, world: World, holding: list[JobRecord], now: float) -> Capacity:
    """`holding`: the records that claim resources now (running or starting jobs, granted notes).

    Memory (DESIGN §5.1): MemAvailable − reserve − headroom, less what running jobs (and the gate's
    bookings in place, measured by their processes) booked and do not use yet (max(0, book − in use):
    what they use is already gone from MemAvailable), less the other notes; and never more than the
    policy's agents_mem_gb less all they hold (their book, or their use where it is larger), where
    that ceiling is set.
    CPUs are compressible: `cpu_overcommit` × the CPUs agents may use, less the running jobs' --cpus."""
    reserve_gb, reserve_cpus, on = reserves(policy, game, now, world.nproc, world.mem_total_gb)
    headroom_gb = headroom(policy, world.mem_total_gb)
    mem = world.mem_available_gb - reserve_gb - headroom_gb
    force_mem = mem
    over = policy.cpu_overcommit
    cpus = over * (world.nproc - reserve_cpus)
    holders = []
    held = 0.0  # all the local holders hold, for the policy's ceiling
    for rec in holding:
        req = rec.request
        if rec.where == "cluster":
            holders.append(holder_of(rec, 0.0, now))
            continue
        obs = world.jobs.get(req.id)
        measured = req.kind == "job" or req.id in world.note_use_gb
        used = (obs.mem_used_gb if obs else 0.0) if req.kind == "job" else world.note_use_gb.get(req.id, 0.0)
        # Memory in use is already gone from MemAvailable; the unused rest of a job's book is still
        # promised to it. So is a booking in place's, whose command res measures (World.note_use_gb).
        # Any other note's memory is in nothing res sees: all of it counts.
        mem -= max(0.0, req.book - used) if measured else req.mem_gb
        cpus -= req.cpus
        holders.append(holder_of(rec, used, now))
        held += holders[-1].held_gb
    # The largest request that could ever fit uses the user's (not the game) reserve: a job that
    # only fits once game mode ends may still wait for it in the queue.
    max_mem = world.mem_total_gb - user_reserve(policy, world.mem_total_gb) - headroom_gb
    if policy.agents_mem_gb > 0:  # the user's ceiling: what agents may hold at once, whatever is free
        mem = min(mem, policy.agents_mem_gb - held)
        max_mem = min(max_mem, policy.agents_mem_gb)
    max_cpus = over * (world.nproc - cpu_reserve(policy.user_reserve_cpus, world.nproc))
    return Capacity(
        mem_gb=mem,
        cpus=cpus,
        reserve_gb=reserve_gb,
        reserve_cpus=reserve_cpus,
        headroom_gb=headroom_gb,
        max_mem_gb=max_mem,
        max_cpus=max_cpus,
        force_mem_gb=force_mem,
        force_cpus=over * (world.nproc - reserve_cpus),
        game=on,
        holders=holders,
        pressure=pressure_of(policy, world),
        guard=guard_of(policy, force_mem),
    )


def freed_by(cap: Capacity, need_gb: float, need_cpus: float, now: float) -> tuple[list[Holder], float | None]:
    """The holders that must end, earliest ETA first, before `need` fits, and when that is expected.
    (None, when even all of them ending would not be enough: the machine itself is short.)"""
    short_mem = need_gb - cap.mem_gb
    short_cpus = need_cpus - cap.cpus
    chosen: list[Holder] = []
    for h in cap.by_eta():
        if short_mem <= 1e-9 and short_cpus <= 1e-9:
            break
        if (short_mem > 1e-9 and h.held_gb > 0) or (short_cpus > 1e-9 and h.cpus > 0):
            chosen.append(h)
            short_mem -= h.held_gb
            short_cpus -= h.cpus
    if short_mem > 1e-9 or short_cpus > 1e-9:
        return chosen, None
    when = max((max(h.eta or now, now) for h in chosen), default=now)
    return chosen, when


class QueueForecast:
    """When each waiting queue entry is expected to start, FIFO: holders end at their ETAs, and each
    entry, once started, holds its own request until start + its estimate; an entry with a lock also
    waits until the lock's holder (running, or an earlier entry of the same lock) is expected to end.
    Ask in queue order. O((holders + entries) log n) for a whole queue.

    An entry that waits only for its lock is counted against capacity from the time the forecast has
    reached, not from its own later start: conservative for the entries behind it, never optimistic."""

    def __init__(self, cap: Capacity, now: float):
        self.now = now
        self.free_gb = cap.mem_gb
        self.free_cpus = cap.cpus
        self.clock = now
        # (time it ends, gb, cpus); an overdue holder is expected to end "now"
        self.ends = [(max(h.eta or now, now), h.held_gb, h.cpus) for h in cap.holders]
        heapq.heapify(self.ends)
        # Under memory pressure, or with less than the guard free, nobody can tell when anything
        # starts: it waits for the pressure to fall or jobs to shrink, which no holder's end promises.
        self.stuck = cap.held_back
        # When each held lock is expected free; None: its holder is overdue, so nobody can tell.
        self.lock_free: dict[str, float | None] = {
            h.lock: (None if h.overdue or h.eta is None else max(h.eta, now)) for h in cap.holders if h.lock}

    def started(self, mem_gb: float, cpus: float, est_s: float, lock: str | None = None) -> None:
        """An entry started in this very pass (after the forecast was made): it holds from now."""
        self.free_gb -= mem_gb
        self.free_cpus -= cpus
        heapq.heappush(self.ends, (self.now + est_s, mem_gb, cpus))
        if lock:
            self.lock_free[lock] = self.now + est_s

    def ended_before(self, est_s: float, lock: str | None = None) -> None:
        """An entry started in this very pass that ends before the point the forecast has reached (a
        backfill ahead of the head): it frees what it holds by then; only its lock is later."""
        if lock:
            self.lock_free[lock] = self.now + est_s

    def start_of(self, mem_gb: float, cpus: float, est_s: float, lock: str | None = None) -> float | None:
        if lock and lock in self.lock_free and self.lock_free[lock] is None:
            return None  # behind an overdue holder of its lock
        if self.stuck:
            return None
        while self.free_gb < mem_gb - 1e-9 or self.free_cpus < cpus - 1e-9:
            if not self.ends:
                self.stuck = True  # not even everything ending frees enough: no estimate from here on
                return None
            when, gb, c = heapq.heappop(self.ends)
            self.clock = max(self.clock, when)
            self.free_gb += gb
            self.free_cpus += c
        start = max(self.clock, self.lock_free.get(lock) or self.clock) if lock else self.clock
        self.free_gb -= mem_gb
        self.free_cpus -= cpus
        heapq.heappush(self.ends, (start + est_s, mem_gb, cpus))
        if lock:
            self.lock_free[lock] = start + est_s
        return start


# ---------------------------------------------------------------- why a request waits, as data
# What blocks a request, as a dict with a stable `code` (docs/agent-interface.md): the plan's actions
# and the records carry it, `--json` prints it, and render.py makes the one line from it.


def short_of(cap: Capacity, mem_gb: float, cpus: float) -> list[str]:
    """Which resources are short for this much: "pressure" (memory pressure holds back everything new),
    "guard" (less than the guard is free: the same), "memory", "cpus" (in that order)."""
    out = ["pressure"] if cap.pressure is not None else []
    if cap.guard is not None:
        out.append("guard")
    if mem_gb > cap.mem_gb + 1e-9:
        out.append("memory")
    if cpus > cap.cpus + 1e-9:
        out.append("cpus")
    return out


def holder_data(h: Holder) -> dict:
    return {"id": h.id, "title": h.title, "project": h.project, "gb": round(h.held_gb, 3), "cpus": h.cpus,
            "until": None if h.overdue else h.eta, "overdue": h.overdue, **({"by": h.by} if h.by else {})}


def _retry(when: float | None, holders: list[Holder], now: float) -> dict:
    if when is None:
        return {"retry": "unknown", "retry_at": None}
    if when <= now or any(h.overdue for h in holders):
        return {"retry": "soon", "retry_at": None}
    return {"retry": "after", "retry_at": when}


def asked(req: Request) -> dict:
    """What a request asks admission for: its book, and its cap where that is more (DESIGN §5.1)."""
    d = {"asked_gb": req.book, "asked_cpus": req.cpus}
    if req.book < req.mem_gb:
        d["cap_gb"] = req.mem_gb
    return d


def busy_detail(req: Request, cap: Capacity, now: float, head: Request | None = None) -> dict:
    """A request that does not fit now (or would overtake a waiting queue head): which resources are
    short, who holds them (earliest end first), what is free, when to retry. Memory pressure and the
    guard come first: while they last nothing starts, whatever else is short or whoever is ahead."""
    if cap.pressure is not None:
        return pressure_detail(req, cap)
    if cap.guard is not None:
        return guard_detail(req, cap)
    need_gb = req.book + (head.book if head else 0.0)
    need_cpus = req.cpus + (head.cpus if head else 0.0)
    short = short_of(cap, need_gb, need_cpus) or ["memory"]
    chosen, when = freed_by(cap, need_gb, need_cpus, now)
    d = {"code": "busy", "resource": "queue_head" if head else "+".join(short), "short": short,
         "holders": [holder_data(h) for h in chosen], "free_gb": round(cap.mem_gb, 3), "free_cpus": round(cap.cpus, 3),
         **asked(req), **_retry(when, chosen, now)}
    # What --force would do: said when it was given (and still does not fit), or when it would start it.
    if req.force:
        d["force"] = "short"
    elif not head and short == ["memory"] and cap.fits_past_ledger(req):  # (CPUs: nothing is measured to offer)
        d["force"] = "would_fit"
    if "force" in d:
        d["really_free_gb"] = round(max(cap.force_mem_gb, 0.0), 3)
        d["really_free_cpus"] = round(max(cap.force_cpus, 0.0), 3)
    if head:
        d["head"] = {"id": head.id, "title": head.title, "gb": head.book, "cpus": head.cpus,
                     "waits_for": "+".join(short_of(cap, head.mem_gb, head.cpus) or short)}
    return d


def pressure_detail(req: Request, cap: Capacity) -> dict:
    """Memory pressure holds back every new start (DESIGN §5.9): how much, where, against what
    threshold. Nobody's end is promised to relieve it: retry soon. --force does not start past it."""
    return {"code": "busy", "resource": "pressure", "short": short_of(cap, req.book, req.cpus), "holders": [],
            "pressure": dict(cap.pressure or {}), "free_gb": round(cap.mem_gb, 3), "free_cpus": round(cap.cpus, 3),
            **asked(req), "retry": "soon", "retry_at": None, **({"force": "pressure"} if req.force else {})}


def guard_detail(req: Request, cap: Capacity) -> dict:
    """Less than the guard is free beyond the reserve (the ladder's amber, DESIGN §5.1): jobs use more
    than they booked, and nothing new starts until they end or shrink. Nobody's end is promised to
    relieve it: retry soon. --force does not start past it."""
    return {"code": "busy", "resource": "guard", "short": short_of(cap, req.book, req.cpus), "holders": [],
            "guard": dict(cap.guard or {}), "free_gb": round(cap.mem_gb, 3), "free_cpus": round(cap.cpus, 3),
            **asked(req), "retry": "soon", "retry_at": None, **({"force": "guard"} if req.force else {})}


def lock_detail(lock: str, holder: Holder, forced: bool = False) -> dict:
    known = holder.eta is not None and not holder.overdue
    return {"code": "busy", "resource": "lock", "lock": lock, "holders": [holder_data(holder)],
            "retry": "after" if known else "soon", "retry_at": holder.eta if known else None,
            **({"force": "lock"} if forced else {})}


def sessions_detail(sessions: list[Holder], limit: int) -> dict:
    ordered = sorted(sessions, key=lambda h: (h.eta is None, h.eta or 0, h.id))
    first = next((h for h in ordered if h.eta and not h.overdue), None)
    return {"code": "busy", "resource": "sessions", "limit": limit, "running": len(sessions),
            "holders": [holder_data(h) for h in ordered],
            **({"retry": "after", "retry_at": first.eta} if first else {"retry": "soon", "retry_at": None})}


def daily_detail(spent: float, limit: float) -> dict:
    return {"code": "busy", "resource": "daily_cost", "spent_usd": round(spent, 6), "limit_usd": limit,
            "retry": "tomorrow", "retry_at": None}


def never_detail(req: Request, cap: Capacity) -> dict:
    if req.book > cap.max_mem_gb:
        return {"code": "never_fits", "resource": "memory", "asked": req.book, "max": round(max(cap.max_mem_gb, 0), 3)}
    return {"code": "never_fits", "resource": "cpus", "asked": req.cpus, "max": round(max(cap.max_cpus, 0), 3)}
