"""Status as data, for `res status`, `res wait` and the answers of `run`, `note` and `release`: one
entry as data (job_view, entry_json), the overview (read_status, overview: the entries, the budget,
the user's side, and its lines), what is wrong with queue.toml now (queue_problems), and the exit
codes of `res wait` (wait_code). Reads state.db read-only, no lock (DESIGN §2 step 6); the same
code answers in the loop and in a call with no loop."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

from reconciler.core.exits import EXIT_NEVER_RAN
from reconciler.core.capacity import book_source, reserves
from reconciler.desired import lastgood
from reconciler.desired.changes import SHOWN_FOR_S, change_line, recorded_and_pending
from reconciler.core.admission import spent_today
from reconciler.core.models import LIVE, TERMINAL, Game, JobRecord, Phase, copy, dump, parse
from reconciler.config.paths import Paths
from reconciler.config.zone import zone_of
from reconciler.core.spend import running_spend_usd, spend_is_estimated, unknown_format
from reconciler.render.status import HEADER, asker_data, field_text, ladder_line, status_line
from reconciler.core.quantities import Zone
from reconciler.render.text import fmt_clock, fmt_cpus, fmt_gb, fmt_span, one_line, quoted


def _snapshot(store) -> dict:
    return store.get_meta_json("last_tick", {})


def job_view(rec: JobRecord, snap: dict, now: float, paths: Paths, zone: Zone) -> dict:
    """One job as data: what `status --json` prints and the text lines are made of. A queued entry
    carries what the last pass said of it (position, est. start, what it waits for)."""
    from reconciler.render.reasons import queued_line, waits_for_text

    req = rec.request
    queued = (snap.get("queue") or {}).get(rec.id) if rec.phase == Phase.queued else None
    rec = ended_unsettled(rec, paths) or rec
    obs = snap.get("world", {}).get("jobs", {}).get(rec.id) or {}
    used = obs.get("mem_used_gb")
    expires = rec.expires()
    d = rec.digest
    return {
        "id": rec.id, "kind": req.kind, "state": rec.phase.value, "title": req.title, "project": req.project,
        "mem_gb": req.mem_gb, "cpus": req.cpus, "used_gb": used if rec.phase in LIVE else None,
        "peak_gb": rec.peak_gb, "rc": rec.rc, "why": rec.why, "queue": req.queue, "lock": req.lock,
        "by": asker_data(req), "auto": list(req.auto), "sized_from": req.sized_from, "grown_from_gb": req.grown_from_gb,
        "node_requeues": req.node_requeues, "request_id": req.request_id, "answer_by": req.answer_by,
        # what admission counts of it, what the kernel holds it to, and why (DESIGN §5.1)
        # (a queued one as the last pass booked it: history may have learned more since it was asked)
        "book_gb": (queued or {}).get("book_gb", req.book),
        "cap_gb": None if req.gated or req.kind == "note" else req.mem_gb,
        "booked_from": (queued or {}).get("booked_from") or book_source(req), "evictions": list(rec.evictions),
        "cpu_s": rec.cpu_s,
        "created": req.created, "started": rec.started, "ended": rec.ended, "eta": rec.eta(),
        "overdue": bool(rec.phase in LIVE and expires is not None and now > expires),
        "unit": rec.unit, "attempt": rec.attempt, "cmd": req.cmd, "cwd": req.cwd,
        "log": paths.log_text(rec.id, rec.log_dir) if req.kind == "job" else None,
        "attached_by": rec.attached_by, "lease_until": rec.lease_until,
        "agent": req.agent, "spend_usd": round(rec.spend_usd, 6), "spend_estimated": spend_is_estimated(d),
        "running_spend_usd": round(running_spend_usd(d), 6), "unknown_format": unknown_format(d),
        "dearest_rates": d.model_note if d else None, "set_aside": d.set_aside if d else 0,
        "set_aside_note": d.set_aside_note if d else None,
        "input_tokens": d.input_tokens if d else 0, "output_tokens": d.output_tokens if d else 0,
        "iterations": d.iterations if d else 0, "lines": d.lines if d else 0,
        "log_offset": rec.log_offset, "attach_failures": rec.attach_failures, "last_error": rec.last_error,
        "reason": reason_of(rec, queued), "position": (queued or {}).get("position"),
        "est_start": (queued or {}).get("est_start"), "waits": queued_line(queued, zone) if queued else None,
        "waits_for_text": waits_for_text(queued, zone) if queued else None,
        "where": where_of(rec, obs), "pending": obs.get("pending") if rec.phase in LIVE else None,
        "slurm_est_start": obs.get("est_start") if rec.phase in LIVE else None,
    }


def where_of(rec: JobRecord, obs: dict) -> str:
    """`local`, or where on the cluster: `slurm:4121@node` (as the last pass saw it), else `slurm:4121`."""
    if rec.where != "cluster" and not (rec.phase == Phase.queued and rec.request.on == "cluster"):
        return "local"
    place = obs.get("place")
    if place and rec.invocation and place.split("@")[0] != f"slurm:{rec.invocation}":
        place = None  # the last pass saw an earlier attempt (one submitted again after its node failed)
    return place or (f"slurm:{rec.invocation}" if rec.invocation else "slurm")


FINISHED_GRACE_S = 300  # finished entries stay in the default `res status` view this long (--all: all)




def _unit_loaded(paths: Paths, unit: str) -> bool | None:
    """Whether the user manager still has the transient unit (its file in the manager's runtime
    directory: there while it runs, gone once it ended and was collected); None if that cannot be told."""
    import os

    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if not runtime or not os.path.isdir(os.path.join(runtime, "systemd")):
        from reconciler.runtime.usermanager import recorded_runtime_dir

        private = recorded_runtime_dir(paths.root)
        runtime = str(private) if private is not None else None
    if not runtime or not os.path.isdir(os.path.join(runtime, "systemd", "transient")):
        return None
    return os.path.lexists(os.path.join(runtime, "systemd", "transient", unit))


def ended_unsettled(rec: JobRecord, paths: Paths) -> JobRecord | None:
    """A job recorded as live whose unit has written its exit record: as a pass would settle it
    (state `exited`, rc, peak, why), read-only. Without a running loop, no pass may have seen the end."""
    if rec.phase not in LIVE or rec.request.kind != "job" or not rec.unit or rec.where == "cluster" \
            or _unit_loaded(paths, rec.unit) is not False:
        return None  # its unit may still run: an exit record written by the job itself must not count
    from reconciler.core.plan import settle_outcome
    from reconciler.render.reasons import outcome_why
    from reconciler.runtime import read_exit_record

    # Beside its log, else where the unit wrote it when the state directory's disk was full.
    ex = read_exit_record(paths.exit_record(rec.id, rec.log_dir), os.environ.get("XDG_RUNTIME_DIR"))
    if ex is None or (rec.invocation and ex.invocation != rec.invocation):
        return None
    rc, peak, outcome = settle_outcome(rec, ex)
    return copy(rec, phase=Phase.exited, rc=rc, peak_gb=peak, ended=ex.at or None,
                why=f"{outcome_why(outcome)} (not settled yet: no pass since it ended)", detail={"code": outcome["code"]})


def queue_problems(paths: Paths) -> list[str]:
    """What is wrong with queue.toml right now, one line each naming the file and the line: the file
    unusable, or entries of it set aside."""
    from reconciler.desired.reader import DesiredError, read_queue_set_aside

    try:
        _, aside = read_queue_set_aside(paths)
    except DesiredError as e:
        return [f"{' '.join(str(e).split())}; starting and stopping nothing because of it"]
    return [f"{line}; set aside: not started, nothing stopped for it" for line in aside]


def queue_problem(paths: Paths) -> str | None:
    """The first of queue_problems, or None."""
    problems = queue_problems(paths)
    return problems[0] if problems else None


def notices(paths: Paths, snap: dict) -> list[str]:
    """What kept the last pass from acting on everything, with queue.toml checked now: a file broken
    (or fixed) since the last pass is reported as it is, not as it was."""
    queue = str(paths.queue)
    out = [n for n in snap.get("notices", []) if not n.startswith(queue)]
    return queue_problems(paths) + out


def user_side(policy, game: Game, world_data: dict, records: dict[str, JobRecord], now: float, zone: Zone) -> dict:
    """Game mode, the agents' unreserved memory and the warnings, from the last pass's world."""
    from reconciler.core.capacity import HOLDING, reserve_warnings
    from reconciler.core.models import World
    from reconciler.render.game import game_lines
    from reconciler.render.lines import agents_memory_line, status_warnings
    from reconciler.render.status import pressure_line

    world = parse(World, world_data) if world_data else None
    live = [r for r in records.values() if r.phase in LIVE]
    return {
        "game": {"on": game.active(now), "until": game.until if game.active(now) else None,
                 "left_s": round(game.until - now) if game.active(now) and game.until else None,
                 "lines": game_lines(policy.rules(), game, world, [r for r in records.values() if r.phase in HOLDING], now, zone)},
        "agents_memory": agents_memory_line(world) if world else None,
        "pressure": {"full_avg10_pct": world.pressure_full_pct if world else None,
                     "slice_full_avg10_pct": world.slice_pressure_full_pct if world else None,
                     "limit_pct": policy.pressure_full_pct, "line": pressure_line(world, policy.rules())},
        "agents_slice": dump(world.agents_slice) if world and world.agents_slice else None,
        "warnings": (status_warnings(world, live, policy) if world else []) + reserve_warnings(policy.rules()),
    }


def read_status(paths: Paths, now: float, store=None) -> tuple[dict[str, JobRecord], dict, Game, list[tuple]]:
    """What `res status` is made of, read at once: the records, the last pass's snapshot, game mode,
    and the changes to show (at, file, how, who, summary). `store`: an open state.db to read (the
    loop's own, whose records are parsed already); None: opened read-only here."""
    from reconciler.recorded.store import Store

    own = store is None
    if own:
        store = Store.open(paths, readonly=True)
    try:
        records = store.records()
        snap = _snapshot(store)
        game = lastgood.game(store) or Game()
        recent = recorded_and_pending(paths, store, now - SHOWN_FOR_S, ("policy.toml", "game.toml"))[-5:]
    finally:
        if own:
            store.close()
    return records, snap, game, recent


@dataclass(frozen=True)
class Overview:
    """`res status` without an id, as data: `as_json()` is what `--json` prints, `text()` the lines."""
    jobs: list[dict]
    budget: dict
    notices: list[str]
    held: list[dict]
    recent: list[tuple]  # the changes shown: (at, file, how, who, summary)
    side: dict  # user_side()
    hidden: int  # finished entries not shown
    spent: float  # today's spend as summed (the budget holds it rounded)
    now: float

    def as_json(self) -> dict:
        changes = [{"at": at, "file": f, "how": how, "who": who, "summary": summary} for at, f, how, who, summary in self.recent]
        return {"jobs": self.jobs, "budget": self.budget, "notices": self.notices, "held": self.held,
                "changes": changes, **self.side}

    def text(self, zone: Zone) -> str:
        budget, side, now = self.budget, self.side, self.now
        reserve_gb, reserve_cpus = budget["reserve_gb"], budget["reserve_cpus"]
        lines = [HEADER] + [status_line(v, zone) for v in self.jobs] if self.jobs else ["no entries"]
        if self.hidden:
            lines.append(f"({self.hidden} finished entr{'y' if self.hidden == 1 else 'ies'} not shown: res status --all, res hist)")
        if budget["mem_gb"] is None:
            lines.append(f"agents may use ? GB, ? cpus now (no pass has run yet); reserve {round(reserve_gb, 1):g} GB/{fmt_cpus(reserve_cpus)}")
        else:
            age = f" (as of {fmt_span(now - budget['as_of'])} ago)" if budget["as_of"] and now - budget["as_of"] > 10 else ""
            lines.append(f"agents may use {fmt_gb(max(budget['mem_gb'], 0))}, {fmt_cpus(max(budget['cpus'], 0))} now; "
                         f"reserve {round(reserve_gb, 1):g} GB/{fmt_cpus(reserve_cpus)}{age}")
        cap = f" of ${budget['daily_cost_usd']:.2f}" if budget["daily_cost_usd"] else ""
        lines[-1] += f"; sessions spent ${self.spent:.2f} today{cap}"  # the totals line
        if side["game"]["on"]:
            lines += side["game"]["lines"]
        if side["agents_memory"]:
            lines.append(side["agents_memory"])
        if side["pressure"]["line"]:
            lines.append(side["pressure"]["line"])
        if (side.get("ladder") or {}).get("line"):
            lines.append(side["ladder"]["line"])
        lines += [f"warning: {w}" for w in side["warnings"]]
        lines += [f"held: {h['id']} {quoted(h['title'], 40)} {one_line(h['reason'], 160)}" for h in self.held]
        lines += [change_line(*row, clock=lambda at: fmt_clock(at, zone)) for row in self.recent]
        lines += [f"res: {' '.join(n.split())}" for n in self.notices]
        return "\n".join(lines)


def overview(paths: Paths, policy, records: dict[str, JobRecord], snap: dict, game: Game, recent: list[tuple],
             now: float, zone: Zone, show_all: bool = False) -> Overview:
    """Every entry shown (live ones, and finished ones for FINISHED_GRACE_S; `show_all`: all), the
    budget, the notices, what is held and the user's side, from what read_status read."""
    warn = notices(paths, snap)
    world = snap.get("world") or {}
    nproc = int(world.get("nproc") or 1)
    total = world.get("mem_total_gb")
    reserve_gb, reserve_cpus, _ = reserves(policy.rules(), game, now, nproc, total if isinstance(total, (int, float)) else None)
    spent = spent_today(records, now, zone)
    budget = {"mem_gb": snap.get("budget_mem_gb"), "cpus": snap.get("budget_cpus"),
              "reserve_gb": reserve_gb, "reserve_cpus": reserve_cpus, "as_of": snap.get("at"),
              "mem_available_gb": world.get("mem_available_gb"),  # what the budget was taken from
              "spend_today_usd": round(spent, 6), "daily_cost_usd": policy.daily_cost_usd or None}
    grace = float("inf") if show_all else FINISHED_GRACE_S
    live = [r for r in sorted(records.values(), key=lambda r: r.request.number)
            if r.phase not in TERMINAL or (r.ended and now - r.ended < grace)]
    views = [job_view(r, snap, now, paths, zone) for r in live]
    side = user_side(policy, game, world, records, now, zone)
    side["ladder"] = {"rung": snap.get("rung"), "why": snap.get("rung_why"),
                      "line": ladder_line(snap.get("rung"), snap.get("rung_why") or {})}
    hidden = sum(1 for r in records.values() if r.phase in TERMINAL) - sum(1 for v in views if v["state"] in ("done", "refused", "cancelled"))
    return Overview(views, budget, warn, snap.get("held", []), recent, side, hidden, spent, now)


def status(paths: Paths, policy, job_id: str | None, as_json: bool, show_all: bool = False,
           store=None) -> tuple[str, int]:
    """(text, exit code) of `res status [ID] [--json]`. With an id, the text is the entry alone (the
    CLI says a queue_problem on stderr), so the output stays one entry. `store`: as for read_status."""
    now = time.time()
    zone = zone_of(policy)
    records, snap, game, recent = read_status(paths, now, store)
    if job_id:
        rec = records.get(job_id)
        if rec is None:
            return f"res: no such entry: {job_id}", 1
        v = job_view(rec, snap, now, paths, zone)
        if as_json:
            return json.dumps(v, indent=2), 0
        return "\n".join(f"{k}: {field_text(val)}" for k, val in v.items()), 0
    o = overview(paths, policy, records, snap, game, recent, now, zone, show_all)
    if as_json:
        return json.dumps(o.as_json(), indent=2), 0
    return o.text(zone), 0



# The outcome code of a record whose detail has none (started, queued, a record from an older res).
_PHASE_CODE = {Phase.queued: "queued", Phase.starting: "starting", Phase.running: "started",
               Phase.exited: "ended", Phase.done: "done", Phase.refused: "refused", Phase.cancelled: "cancelled"}


def wait_code(rec: JobRecord) -> int:
    """The exit code of `res wait` for a finished entry."""
    if rec.phase == Phase.done and (rec.request.kind == "note" or rec.rc is not None):
        return 0 if rec.request.kind == "note" else rec.rc & 0xFF
    return EXIT_NEVER_RAN


def reason_of(rec: JobRecord, detail: dict | None = None) -> dict:
    """The structured reason of an entry's state (docs/agent-interface.md)."""
    if detail:
        return detail
    if rec.phase in TERMINAL and rec.detail:
        return rec.detail
    code = _PHASE_CODE[rec.phase]
    if code == "started" and rec.request.kind == "note":
        code = "noted"
    return {"code": code}


def entry_json(rec: JobRecord, paths: Paths, detail: dict | None = None) -> dict:
    """One entry as `run`, `note`, `wait` and `release` print it with --json."""
    req = rec.request
    reason = reason_of(rec, detail)
    return {"id": rec.id, "kind": req.kind, "state": rec.phase.value, "title": req.title, "by": asker_data(req),
            "log": paths.log_text(rec.id, rec.log_dir) if req.kind == "job" else None,
            "position": reason.get("position"), "est_start": reason.get("est_start"),
            "started": rec.started, "eta": rec.eta() if rec.phase not in TERMINAL else None, "ended": rec.ended,
            "rc": rec.rc, "peak_gb": rec.peak_gb, "why": rec.why, "reason": reason,
            # the caller's own name for the request (--request-id): asked again with it, this entry answers
            "request_id": req.request_id}
