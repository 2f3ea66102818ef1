"""Capacity (DESIGN §5.1): what agents may use now, who holds the rest, and until when. Pure."""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from .models import Game, JobRecord, Phase, Request, World

HOLDING = (Phase.starting, Phase.running)


@dataclass(frozen=True)
class Holder:
    id: str
    title: str
    project: str
    held_gb: float  # what it frees when it ends: max(reserved, used)
    cpus: float
    eta: float | None  # expected end (started + estimate)
    overdue: bool
    lock: str | None = None
    session: bool = False


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

    def fits(self, req: Request) -> bool:
        if req.force:
            return req.mem_gb <= self.force_mem_gb and req.cpus <= self.force_cpus
        return req.mem_gb <= self.mem_gb and req.cpus <= self.cpus

    def never_fits(self, req: Request) -> bool:
        return req.mem_gb > self.max_mem_gb or req.cpus > self.max_cpus

    def take(self, req: Request, holder: Holder) -> None:
        """Count a grant made in this pass, so the next decision of the same pass sees it."""
        self.mem_gb -= req.mem_gb
        self.cpus -= req.cpus
        self.force_mem_gb -= req.mem_gb
        self.holders.append(holder)

    def by_eta(self) -> list[Holder]:
        return sorted(self.holders, key=lambda h: (h.eta is None, h.eta or 0, h.id))


def cpu_reserve(configured: float, nproc: int) -> float:
    """A CPU reserve larger than the machine would leave agents nothing at all; keep one CPU for
    them (docs/decisions.md: small machines)."""
    return max(0.0, min(configured, nproc - 1))


def reserves(policy, game: Game, now: float, nproc: int) -> tuple[float, float, bool]:
    on = game.active(now)
    gb = policy.game_reserve_gb if on else policy.user_reserve_gb
    cpus = policy.game_reserve_cpus if on else policy.user_reserve_cpus
    return gb, cpu_reserve(cpus, nproc), on


def holder_of(rec: JobRecord, used_gb: float, now: float) -> Holder:
    req = rec.request
    expires = rec.expires()
    return Holder(
        id=req.id,
        title=req.title,
        project=req.project,
        held_gb=max(req.mem_gb, used_gb),
        cpus=req.cpus,
        eta=rec.eta(),
        overdue=expires is not None and now > expires,
        lock=req.lock,
        session=req.session,
    )


def capacity(policy, game: Game, world: World, holding: list[JobRecord], now: float) -> Capacity:
    """`holding`: the records that claim resources now (running or starting jobs, granted notes)."""
    reserve_gb, reserve_cpus, on = reserves(policy, game, now, world.nproc)
    headroom = policy.small_headroom_gb
    mem = world.mem_available_gb - reserve_gb - headroom
    force_mem = mem
    cpus = world.nproc - reserve_cpus
    holders = []
    for rec in holding:
        req = rec.request
        obs = world.jobs.get(req.id)
        used = obs.mem_used_gb if (obs and req.kind == "job") else 0.0
        # Memory in use is already gone from MemAvailable; the unused rest of a job's reservation is
        # still promised to it. A note's memory is not in any cgroup we see: count all of it.
        mem -= max(0.0, req.mem_gb - used) if req.kind == "job" else req.mem_gb
        cpus -= req.cpus
        holders.append(holder_of(rec, used, now))
    # The largest request that could ever fit uses the user's (not the game) reserve: a job that
    # only fits once game mode ends may still wait for it in the queue.
    max_mem = world.mem_total_gb - policy.user_reserve_gb - headroom
    max_cpus = world.nproc - cpu_reserve(policy.user_reserve_cpus, world.nproc)
    return Capacity(
        mem_gb=mem,
        cpus=cpus,
        reserve_gb=reserve_gb,
        reserve_cpus=reserve_cpus,
        headroom_gb=headroom,
        max_mem_gb=max_mem,
        max_cpus=max_cpus,
        force_mem_gb=force_mem,
        force_cpus=world.nproc - reserve_cpus,
        game=on,
        holders=holders,
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
    entry, once started, holds its own request until start + its estimate. Ask in queue order.
    O((holders + entries) log n) for a whole queue."""

    def __init__(self, cap: Capacity, now: float):
        self.now = now
        self.free_gb = cap.mem_gb
        self.free_cpus = cap.cpus
        self.clock = now
        # (time it ends, gb, cpus); an overdue holder is expected to end "now"
        self.ends = [(max(h.eta or now, now), h.held_gb, h.cpus) for h in cap.holders]
        heapq.heapify(self.ends)
        self.stuck = False

    def start_of(self, mem_gb: float, cpus: float, est_s: float) -> float | None:
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
        self.free_gb -= mem_gb
        self.free_cpus -= cpus
        heapq.heappush(self.ends, (self.clock + est_s, mem_gb, cpus))
        return self.clock
