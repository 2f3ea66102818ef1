"""The pressure ladder (DESIGN §5.1): when books were wrong, res acts before the kernel does. Pure.

Admission counts each job at its *book* (what it is expected to use), not at its *cap* (the kernel's
limit); a job that uses more than its book is counted at what it uses from then on, but it may grow
faster than admission can make room. The ladder watches what is really left:

- green: admit what fits;
- amber: less than `guard_gb` is free beyond the reserve and headroom, or memory pressure (PSI `full
  avg10`) is over `pressure_full_pct`: nothing new starts (capacity.guard_of, pressure_of); running
  jobs are left alone;
- red: less than half the guard is free, or the pressure is over the line and *held* there (`full
  avg60` over it too): res stops one job, the one whose book was most wrong, so that the kernel's OOM
  killer never has to choose. It goes back to the head of the queue (same id, same log) with a bigger
  book, and its `res wait` goes on waiting for the run that ends it.

Who is stopped, in order (least work lost first):

1. jobs above their book, the one started last first (it has done the least);
2. gated jobs above the gate's guess (their size is a guess with no cap), the one started last first;
3. where the policy names a size (`ladder_session_gb`), an agent session's own processes outside any
   job above it (a background dev server), the largest first;

never the owner's programs, never res, never an agent session's own run (its whole turn would run
and be paid for again), never a job that holds a note (its command asked for memory in the
foreground), never a cluster job (it holds nothing here). One at a time: while a job res stopped
has not ended yet, nobody else is stopped (its memory is on its way back). With nobody above their
book nothing is stopped: the books were right, and what is short is the owner's or the reserve's.

The kernel's OOM killer (a job at its cap, or the whole machine) stays the last line.
"""
from __future__ import annotations

from reconciler.core.capacity import Capacity, headroom, user_reserve
from reconciler.core.models import Action, JobRecord, Phase, World
from reconciler.core.rules import Rules

ALIVE = ("active", "activating", "deactivating")
RAISE_FACTOR = 1.2  # a stopped job's book: max(1.2 × its book, its peak + 100 MB) (the VPA's OOM bump)
RAISE_MIN_GB = 0.1
STOPS_TO_CAP = 2  # stopped this many times, a job is booked at its cap from then on
EVICTED = "evicted"  # the stop code of a job the ladder stopped


def held_pressure(policy: Rules, world: World) -> dict | None:
    """Memory pressure over the line and held there: `full avg10` and `full avg60` both over
    pressure_full_pct, on the machine or in the agents slice (the worse of the two). None: not held,
    not observed, or PSI ignored (0)."""
    limit = policy.pressure_full_pct
    if limit <= 0:
        return None
    seen = []
    for avg10, avg60, where in ((world.pressure_full_pct, world.pressure_full_avg60_pct, "system"),
                                (world.slice_pressure_full_pct, world.slice_pressure_full_avg60_pct, "slice")):
        if avg10 is not None and avg60 is not None and avg10 > limit and avg60 > limit:
            seen.append((avg60, avg10, where))
    if not seen:
        return None
    avg60, avg10, where = max(seen)
    return {"pct": avg10, "avg60_pct": avg60, "limit": limit, "where": where}


def rung(policy: Rules, world: World, cap: Capacity) -> tuple[str, dict]:
    """(green | amber | red, why as data) from what the pass observed. `cap` is the pass's capacity
    before anything was admitted (its `force_mem_gb` is what is really free beyond the reserve in force
    and headroom: amber). Red is judged against the user's own reserve, never game mode's: game mode
    holds new work back, it never stops a running job (DESIGN §5.6); only memory really running out
    does."""
    room = cap.force_mem_gb
    why: dict = {"room_gb": round(room, 3), "guard_gb": policy.guard_gb}
    held = held_pressure(policy, world)
    short = world.mem_available_gb - user_reserve(policy, world.mem_total_gb) - headroom(policy, world.mem_total_gb)
    if policy.guard_gb > 0 and short < policy.guard_gb / 2:
        return "red", {**why, "room_gb": round(short, 3), "because": "room"}
    if held is not None:
        return "red", {**why, "because": "pressure", "pressure": held}
    if cap.held_back:
        return "amber", {**why, "because": "pressure" if cap.pressure is not None else "room"}
    return "green", why


def in_use_gb(obs) -> float:
    """What a job uses that it would not give back under pressure: its memory less the page cache
    the kernel can reclaim."""
    return max(0.0, obs.mem_used_gb - obs.mem_cache_gb)


def _note_holders(records: dict[str, JobRecord]) -> set[str]:
    """Jobs whose command holds a live note (`res note` from inside it: the note's batch)."""
    return {r.request.batch for r in records.values()
            if r.request.kind == "note" and r.phase == Phase.running and r.request.batch}


def stopping(records: dict[str, JobRecord], world: World) -> list[str]:
    """Jobs the ladder stopped that have not ended yet: their memory is on its way back."""
    out = []
    for rec in records.values():
        if rec.stop_code == EVICTED and rec.phase in (Phase.starting, Phase.running, Phase.exited):
            obs = world.jobs.get(rec.id)
            if obs is not None and obs.state in ALIVE:
                out.append(rec.id)
    return out


def victims(records: dict[str, JobRecord], world: World, session_gb: float = 0.0) -> list[tuple[JobRecord | None, dict]]:
    """Every job the ladder may stop now, in the order it would (module docstring), each with what it
    uses and books; then, `session_gb` set, each agent session's own process outside any job over it
    (None for its record; its figures: `process`)."""
    holding_notes = _note_holders(records)
    found = []
    for rec in records.values():
        req = rec.request
        if (rec.phase != Phase.running or rec.where != "local" or req.kind != "job" or req.agent != "none"
                or rec.stop_reason is not None or rec.id in holding_notes):
            continue
        obs = world.jobs.get(rec.id)
        if obs is None or obs.state not in ALIVE:
            continue
        used = in_use_gb(obs)
        if used <= req.book:
            continue
        found.append((1 if req.gated else 0, -(rec.started or 0.0), rec.request.number, rec,
                      {"used_gb": round(used, 3), "book_gb": req.book, "cap_gb": None if req.gated else req.mem_gb,
                       "gated": req.gated, "started": rec.started}))
    found.sort(key=lambda f: f[:3])
    out: list[tuple[JobRecord | None, dict]] = [(f[3], f[4]) for f in found]
    if session_gb > 0:
        owners = {r.request.owner_pid for r in records.values()
                  if r.request.kind == "note" and r.phase == Phase.running and r.request.owner_pid}
        procs = [(p, s.pid) for s in world.sessions or [] if s.pid not in owners
                 for p in s.outside if p.get("gb", 0) > session_gb and not owners & set(p.get("pids") or [])]
        procs.sort(key=lambda ps: -ps[0]["gb"])
        out += [(None, {"process": {**p, "session": session, "over_gb": session_gb}}) for p, session in procs]
    return out


def ladder_actions(records: dict[str, JobRecord], world: World, cap: Capacity, policy: Rules,
                   may_act) -> list[Action]:
    """The ladder's action this pass: at red, one `evict` of the first victim (None of it otherwise).
    `may_act(rec)`: whether this reconciler may act on the record (it holds its attachment, or may
    claim it)."""
    if not world.ok:
        return []
    level, why = rung(policy, world, cap)
    if level != "red" or stopping(records, world):
        return []
    for rec, figures in victims(records, world, policy.ladder_session_gb):
        if rec is None:
            p = figures["process"]
            return [Action(kind="evict", id=f"pid-{p['pid']}", title=f"{p['name']} pid {p['pid']}", mem_gb=p["gb"],
                           detail={"code": EVICTED, **figures, **why})]
        if not may_act(rec):
            continue
        req = rec.request
        return [Action(kind="evict", id=rec.id, title=req.title, mem_gb=req.mem_gb, cpus=req.cpus,
                       book_gb=req.book if req.book < req.mem_gb else None, detail={"code": EVICTED, **figures, **why})]
    return []


def raised_book(book_gb: float, peak_gb: float | None, cap_gb: float | None, stops: int) -> tuple[float | None, str]:
    """(the book after res stopped a job above it, where it came from): max(1.2 × the book, its peak +
    100 MB), at most its cap; stopped STOPS_TO_CAP times, its cap itself (None: the cap). `cap_gb`
    None: a gated job, whose guess has no cap."""
    if stops >= STOPS_TO_CAP and cap_gb is not None:
        return None, f"its cap: stopped {stops} times above its book"
    raised = max(RAISE_FACTOR * book_gb, (peak_gb or 0.0) + RAISE_MIN_GB)
    if cap_gb is not None and raised >= cap_gb:
        return None, "its cap: raised after a stop"
    return round(raised, 3), "raised after a stop"
