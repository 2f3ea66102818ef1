"""The machine view (docs/watching.md), pure: from the readings of the machine (observed/usage.py, made
into `Readings` at the edge), state.db's records, the last pass's snapshot (ops/status.read_status),
the rules, game mode and the zone, the JSON object `res top` and the page draw. Who holds the memory
and the CPU (`owners`), the memory block, the locks, the spend per agent session per day, the
timeline, the marks (OOM kills, budget stops, refusals), and the history's sample of a view.

Nothing is read here: the clock is `Readings.at`, the zone is an argument."""
from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from reconciler.core.agents import SESSION_NAME  # the only sessions the pass observes
from reconciler.core.capacity import book_source, reserves
from reconciler.core.models import LIVE, TERMINAL, Game, JobRecord, Phase
from reconciler.core.quantities import Zone, civil_date, local_midnight
from reconciler.core.rules import Rules

VERSION = 1
RES, YOU = "res", "you"
TIMELINE_S = 24 * 3600  # finished entries shown on the timeline this long
MARKS_S = 48 * 3600  # … and their marks (as long as the history goes back)
MAX_ROWS = 300  # timeline rows, marks and spend rows each: the newest kept


@dataclass(frozen=True, slots=True)
class Use:
    """One owner's memory now and its CPU time so far (None: not read)."""
    gb: float | None = None
    cpu_s: float | None = None


@dataclass(frozen=True, slots=True)
class Readings:
    """The machine at `at` (epoch s): /proc/meminfo, /proc/stat's CPU totals (seconds since boot),
    and each owner's use by its key (`session:PID`, `job:ID`, `res`)."""
    at: float
    total_gb: float
    available_gb: float
    free_gb: float
    nproc: int
    cpu_busy_s: float | None = None
    cpu_total_s: float | None = None
    use: dict[str, Use] = field(default_factory=dict)


def session_key(pid: int) -> str:
    return f"session:{pid}"


def job_key(job_id: str) -> str:
    return f"job:{job_id}"


def _gb(x: float | None) -> float:
    return round(max(x or 0.0, 0.0), 4)  # 0.1 MB: a small job still shows


def cpu_pct(now: Readings, before: Readings | None, key: str) -> float | None:
    """CPU use of an owner between two readings, in % of one core; None without both readings."""
    if before is None or now.at <= before.at:
        return None
    a, b = now.use.get(key), before.use.get(key)
    if a is None or b is None or a.cpu_s is None or b.cpu_s is None:
        return None
    return round(max(a.cpu_s - b.cpu_s, 0.0) / (now.at - before.at) * 100, 1)


def busy_pct(now: Readings, before: Readings | None) -> float | None:
    """The machine's CPU use between two readings, in % of all its CPUs."""
    if before is None or None in (now.cpu_busy_s, now.cpu_total_s, before.cpu_busy_s, before.cpu_total_s):
        return None
    total = now.cpu_total_s - before.cpu_total_s
    if total <= 0:
        return None
    return round(min(max((now.cpu_busy_s - before.cpu_busy_s) / total * 100, 0.0), 100.0), 1)


_PID = re.compile(r"\bpid (\d+)\b")


def asking_session(by: str | None, sessions: set[int]) -> int | None:
    """The agent session among `sessions` that asked, from a request's `by` (`claude pid 4121`, or a
    process chain `res pid 812 < bash pid 811 < claude pid 4121`)."""
    for m in _PID.finditer(by or ""):
        if int(m.group(1)) in sessions:
            return int(m.group(1))
    return None


def _title(rec: JobRecord) -> str:
    title = " ".join(rec.request.title.split())
    return f'{rec.id} "{title[:57] + "..." if len(title) > 60 else title}"'


def local_date(ts: float, zone: Zone) -> str:
    """YYYY-MM-DD of an epoch timestamp in `zone`."""
    return "%04d-%02d-%02d" % civil_date(ts, zone)


def _spent_on_or_after(rec: JobRecord, since: float) -> bool:
    """A session's spend counts on the day it ended; a live one's on today."""
    return rec.phase in LIVE or (rec.phase == Phase.done and (rec.ended or 0) >= since)


def local_jobs(records: dict[str, JobRecord]) -> list[JobRecord]:
    """The jobs that hold memory here now (live, not on the cluster), oldest first."""
    return sorted((r for r in records.values()
                   if r.phase in LIVE and r.request.kind == "job" and r.where != "cluster"),
                  key=lambda r: r.request.number)


def owners(now: Readings, before: Readings | None, records: dict[str, JobRecord], snap: dict,
           zone: Zone) -> list[dict]:
    """Who holds the memory and the CPU, biggest first: each agent session (its scope, or its
    process tree), each local job, `you` (what is used beyond them and res, never below 0) and res."""
    world = snap.get("world") or {}
    observed_jobs = world.get("jobs") or {}
    live_sessions = {s["pid"] for s in world.get("sessions") or [] if isinstance(s, dict) and "pid" in s}
    midnight = local_midnight(now.at, zone)
    out: list[dict] = []
    by_session: dict[int, list[JobRecord]] = {}
    for rec in records.values():
        # A note is the session's by its owner (the process whose end ends it); anything else by who asked.
        owner = rec.request.owner_pid if rec.request.kind == "note" else None
        pid = owner if owner in live_sessions else asking_session(rec.request.by, live_sessions)
        if pid is not None:
            by_session.setdefault(pid, []).append(rec)
    for pid in sorted(live_sessions):
        key = session_key(pid)
        asked = sorted(by_session.get(pid, []), key=lambda r: r.request.number)
        out.append({"key": key, "kind": "session", "label": f"{SESSION_NAME} pid {pid}",
                    "gb": _gb(now.use.get(key, Use()).gb), "cpu_pct": cpu_pct(now, before, key),
                    "jobs": [r.id for r in asked if r.phase in LIVE and r.request.kind == "job"],
                    # what it holds in the ledger for work outside res (its notes: res note --mem)
                    "notes": [r.id for r in asked if r.phase in LIVE and r.request.kind == "note"],
                    "noted_gb": round(sum(r.request.mem_gb for r in asked if r.phase in LIVE and r.request.kind == "note"), 3),
                    "spend_today_usd": round(sum(r.spend_usd for r in asked if _spent_on_or_after(r, midnight)), 6)})
    for rec in local_jobs(records):
        key = job_key(rec.id)
        use = now.use.get(key)
        gb = use.gb if use is not None and use.gb is not None else (observed_jobs.get(rec.id) or {}).get("mem_used_gb")
        pid = asking_session(rec.request.by, live_sessions)
        req = rec.request
        out.append({"key": key, "kind": "job", "label": _title(rec), "project": req.project,
                    "gb": _gb(gb), "cpu_pct": cpu_pct(now, before, key),
                    "session": session_key(pid) if pid is not None else None,
                    # what admission counts of it and what the kernel holds it to (DESIGN §5.1)
                    "book_gb": req.book, "cap_gb": None if req.gated else req.mem_gb, "booked_from": book_source(req)})
    out += escaped(world, records)
    res_gb = _gb(now.use.get(RES, Use()).gb)
    res_cpu = cpu_pct(now, before, RES)
    used = now.total_gb - now.available_gb
    you_gb = _gb(used - sum(o["gb"] for o in out) - res_gb)
    machine = busy_pct(now, before)
    you_cpu = None
    if machine is not None:
        others = sum(o["cpu_pct"] or 0.0 for o in out) + (res_cpu or 0.0)
        you_cpu = round(max(machine * now.nproc - others, 0.0), 1)
    out.sort(key=lambda o: (-o["gb"], o["key"]))
    out.append({"key": YOU, "kind": "you", "label": "your programs", "gb": you_gb, "cpu_pct": you_cpu})
    out.append({"key": RES, "kind": "res", "label": "res", "gb": res_gb, "cpu_pct": res_cpu})
    out.sort(key=lambda o: -o["gb"])  # stable: equal sizes keep sessions, jobs, you, res in that order
    return out


def escaped(world: dict, records: dict[str, JobRecord]) -> list[dict]:
    """Transient services outside res's slices that a job started (its systemd-run marked them:
    docs/escaping.md), each with the memory it holds, counted as that job's project's, never as the
    owner's programs. One nobody marked is not listed: its memory stays with the owner's programs."""
    names = world.get("stray_services") or []
    started_by = world.get("stray_from") or {}
    held = world.get("stray_mem_gb") or {}
    out = []
    for name in names:
        job = started_by.get(name) if isinstance(name, str) else None
        if not isinstance(job, str):
            continue  # nobody marked it: res cannot tell whose it is, so it stays the owner's programs'
        rec = records.get(job)
        label = f"{name} (escaped from {job})"
        out.append({"key": f"stray:{name}", "kind": "escaped", "label": label, "gb": _gb(held.get(name)),
                    "cpu_pct": None, "job": job, "project": rec.request.project if rec is not None else None})
    return out


def memory(now: Readings, snap: dict, rules: Rules, game: Game) -> dict:
    world = snap.get("world") or {}
    reserve_gb = reserves(rules, game, now.at, now.nproc, now.total_gb)[0]
    budget = snap.get("budget_mem_gb")
    return {"total_gb": _gb(now.total_gb), "available_gb": _gb(now.available_gb), "free_gb": _gb(now.free_gb),
            "cache_gb": _gb(now.available_gb - now.free_gb),
            "agents_budget_gb": None if budget is None else round(max(budget, 0.0), 3),
            "reserve_gb": reserve_gb, "pressure_full_pct": world.get("pressure_full_pct"),
            # the pressure ladder as the last pass found it (core/ladder.py): green, amber, red
            "rung": snap.get("rung"), "rung_why": snap.get("rung_why")}


def _lock_label(lock: str) -> str:
    """`e2e@proj-a` for `e2e@/home/me/proj-a`: the key and its repository's directory name."""
    key, at, scope = lock.rpartition("@")
    return f"{key}@{posixpath.basename(scope.rstrip('/')) or scope}" if at and scope.startswith("/") else lock


def locks(records: dict[str, JobRecord]) -> list[dict]:
    """Each lock held now: its holder, when the holder is expected to end, who waits for it."""
    held: dict[str, dict] = {}
    ordered = sorted(records.values(), key=lambda r: r.request.number)
    for rec in ordered:
        lock = rec.request.lock
        if lock and rec.phase in LIVE and lock not in held:
            held[lock] = {"lock": _lock_label(lock), "key": lock, "holder": rec.id, "until": rec.eta(), "waiting": []}
    for rec in ordered:
        lock = rec.request.lock
        if lock in held and rec.phase == Phase.queued:
            held[lock]["waiting"].append(rec.id)
    return list(held.values())


def spend(records: dict[str, JobRecord], now: float, zone: Zone) -> list[dict]:
    """What each agent session spent, by the local day it ended (a live one: today so far, as the
    daily cap counts it), newest day first, the dearest first within a day."""
    rows = []
    for rec in records.values():
        if not rec.request.session or rec.spend_usd <= 0:
            continue
        at = rec.ended if rec.phase in TERMINAL and rec.ended else now
        rows.append({"day": local_date(at, zone), "id": rec.id, "session": _title(rec), "usd": round(rec.spend_usd, 6)})
    rows.sort(key=lambda r: (r["day"], r["usd"]), reverse=True)
    return rows[:MAX_ROWS]


# A record's outcome code (docs/agent-interface.md) as the timeline's word.
_TIMELINE_OUTCOME = {"memory_limit": "oom", "budget": "budget", "released": "cancelled", "cancelled": "cancelled",
                     "owner_gone": "done", "expired": "done"}


def timeline_outcome(rec: JobRecord) -> str:
    """done, failed, oom, budget, refused, cancelled, running or queued."""
    if rec.phase == Phase.queued:
        return "queued"
    if rec.phase in LIVE:
        return "running"
    if rec.phase in (Phase.refused, Phase.cancelled):
        return rec.phase.value
    code = rec.outcome
    if code in _TIMELINE_OUTCOME:
        return _TIMELINE_OUTCOME[code]
    if code in (None, "exited", "noted") and (rec.rc in (None, 0) if rec.request.kind == "note" else rec.rc == 0):
        return "done"
    return "failed"


def timeline(records: dict[str, JobRecord], now: float) -> list[dict]:
    """Each entry not finished, and each finished in the last TIMELINE_S, by when it was queued."""
    rows = []
    for rec in records.values():
        if rec.phase in TERMINAL and (rec.ended or rec.updated) < now - TIMELINE_S:
            continue
        rows.append({"id": rec.id, "kind": rec.request.kind, "title": rec.request.title,
                     "queued": rec.request.created, "started": rec.started,
                     "ended": rec.ended if rec.phase in TERMINAL else None, "outcome": timeline_outcome(rec)})
    rows.sort(key=lambda r: (r["queued"], r["id"]))
    return rows[-MAX_ROWS:]


def marks(records: dict[str, JobRecord], now: float, process_stops: list | None = None) -> list[dict]:
    """OOM kills, budget stops, refusals and res's own stops of jobs above their book (the pressure
    ladder, DESIGN §5.1: a mark of its own, not an OOM kill's) of the last MARKS_S, oldest first."""
    out = []
    for rec in records.values():
        for stop in rec.evictions:
            at = stop.get("at")
            if isinstance(at, (int, float)) and at >= now - MARKS_S:
                used, book = stop.get("used_gb"), stop.get("book_gb")
                figures = f" ({used:.2f} GB used, {book:.2f} GB booked)" if isinstance(used, float) and isinstance(book, float) else ""
                out.append({"at": at, "kind": "evicted", "id": rec.id,
                            "line": f"{rec.id} stopped by res above its book{figures}, run again"[:300]})
        if rec.phase not in TERMINAL:
            continue
        at = rec.ended or rec.updated
        if at < now - MARKS_S:
            continue
        why = " ".join((rec.why or "").split())
        if rec.phase == Phase.refused:
            kind, line = "refused", f"{rec.id} refused" + (f": {why}" if why else "")
        elif rec.outcome == "memory_limit":
            kind, line = "oom", f"{rec.id} killed at its memory limit ({rec.request.mem_gb:g} GB)"
        elif rec.outcome == "budget":
            kind, line = "budget", f"{rec.id} stopped over its budget" + (f": {why}" if why else "")
        else:
            continue
        out.append({"at": at, "kind": kind, "id": rec.id, "line": line[:300]})
    for stop in process_stops or []:  # an agent session's own process outside any job (ladder_session_gb)
        at = stop.get("at") if isinstance(stop, dict) else None
        if isinstance(at, (int, float)) and at >= now - MARKS_S:
            out.append({"at": at, "kind": "evicted", "id": f"pid-{stop.get('pid')}",
                        "line": (f"{stop.get('name')} pid {stop.get('pid')} of agent session pid {stop.get('session')} "
                                 f"stopped by res ({stop.get('gb')} GB outside any job)")[:300]})
    out.sort(key=lambda m: (m["at"], m["id"]))
    return out[-MAX_ROWS:]


def machine_view(now: Readings, before: Readings | None, records: dict[str, JobRecord], snap: dict, rules: Rules,
                 game: Game, zone: Zone, *, status: dict | None = None, loop: dict | None = None,
                 actions: bool = False) -> dict:
    """The machine view (`"v": 1`, docs/watching.md). `status`: ops.status.Overview.as_json(), made
    at the edge; `loop`: {"pid", "last_pass_at"}, None without a loop."""
    machine = busy_pct(now, before)
    return {
        "v": VERSION, "at": now.at, "loop": loop,
        "memory": memory(now, snap, rules, game),
        "cpu": {"nproc": now.nproc, "busy_pct": machine},
        "owners": owners(now, before, records, snap, zone),
        "status": status or {},
        "locks": locks(records),
        "spend": spend(records, now.at, zone),
        "timeline": timeline(records, now.at),
        "marks": marks(records, now.at, snap.get("process_stops")),
        "actions": actions,
    }


def sample(at: float, owners_: list[dict], memory_: dict) -> dict:
    """The history's sample (docs/watching.md, core/history.py) of owners and a memory block."""
    gb = {"sessions": 0.0, "jobs": 0.0, "you": 0.0, "res": 0.0}
    for o in owners_:
        group = {"session": "sessions", "job": "jobs", "escaped": "jobs", "you": "you", "res": "res"}.get(o["kind"])
        if group:
            gb[group] += o["gb"] or 0.0
    gb = {k: round(v, 3) for k, v in gb.items()}
    gb["cache"] = memory_["cache_gb"]
    return {"t": at, "gb": gb, "budget": memory_["agents_budget_gb"], "reserve": memory_["reserve_gb"]}


def view_sample(view: dict) -> dict:
    """The history's sample of a view."""
    return sample(view["at"], view["owners"], view["memory"])


def cheap_sample(now: Readings, records: dict[str, JobRecord], snap: dict, rules: Rules, game: Game,
                 zone: Zone) -> dict:
    """The history's sample without a view: from readings without CPU times or process trees (a
    session outside a scope then counts as the user's)."""
    return sample(now.at, owners(now, None, records, snap, zone), memory(now, snap, rules, game))
