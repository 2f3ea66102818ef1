"""`res status` and `res wait`: read state.db read-only, no lock (DESIGN §2 step 6)."""
from __future__ import annotations

import json
import time

from .capacity import reserves
from .plan import spent_today
from .models import LIVE, TERMINAL, Game, JobRecord, Phase
from .paths import Paths
from .units import fmt_clock, fmt_cpus, fmt_span, quoted


def _snapshot(store) -> dict:
    return store.get_meta_json("last_tick", {})


def job_view(rec: JobRecord, snap: dict, now: float, paths: Paths) -> dict:
    """One job as data: what `status --json` prints and the text lines are made of."""
    req = rec.request
    used = (snap.get("world", {}).get("jobs", {}).get(rec.id) or {}).get("mem_used_gb")
    expires = rec.expires()
    d = rec.digest
    return {
        "id": rec.id, "kind": req.kind, "state": rec.phase.value, "title": req.title, "project": req.project,
        "mem_gb": req.mem_gb, "cpus": req.cpus, "used_gb": used if rec.phase in LIVE else None,
        "peak_gb": rec.peak_gb, "rc": rec.rc, "why": rec.why, "queue": req.queue, "lock": req.lock,
        "created": req.created, "started": rec.started, "ended": rec.ended, "eta": rec.eta(),
        "overdue": bool(rec.phase in LIVE and expires is not None and now > expires),
        "unit": rec.unit, "attempt": rec.attempt, "cmd": req.cmd, "cwd": req.cwd,
        "log": str(paths.log(rec.id)) if req.kind == "job" else None,
        "attached_by": rec.attached_by, "lease_until": rec.lease_until,
        "agent": req.agent, "spend_usd": round(rec.spend_usd, 6),
        "input_tokens": d.input_tokens if d else 0, "output_tokens": d.output_tokens if d else 0,
        "iterations": d.iterations if d else 0, "lines": d.lines if d else 0,
        "log_offset": rec.log_offset, "attach_failures": rec.attach_failures, "last_error": rec.last_error,
    }


def _line(v: dict) -> str:
    gb = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    started = fmt_clock(v["started"]) if v["started"] else "-"
    if v["state"] in ("done", "refused", "cancelled"):
        tail = f"rc={v['rc']}" if v["rc"] is not None else ""
        tail += f" {v['why']}" if v["why"] else ""
    elif v["overdue"]:
        tail = "overdue"
    elif v["eta"]:
        tail = f"ETA ~{fmt_clock(v['eta'])}"
    else:
        tail = "waiting"
    if v["agent"] != "none":
        tail += f" ${v['spend_usd']:.2f} {v['iterations']} turns"
    return (f"{v['id']:<6} {v['project'][:16]:<16} {quoted(v['title'], 30):<32} {v['state']:<9} "
            f"{gb(v['mem_gb'])}/{gb(v['used_gb'])}/{gb(v['peak_gb'])} GB  {fmt_cpus(v['cpus']):<7} {started:>5}  {tail}").rstrip()


def queue_problem(paths: Paths) -> str | None:
    """One line if queue.toml cannot be used right now (it names the file and the line), else None."""
    from .desired import DesiredError, read_queue

    try:
        read_queue(paths)
    except DesiredError as e:
        return f"{' '.join(str(e).split())}; starting and stopping nothing because of it"
    return None


def notices(paths: Paths, snap: dict) -> list[str]:
    """What kept the last pass from acting on everything, with queue.toml checked now: a file broken
    (or fixed) since the last pass is reported as it is, not as it was."""
    queue = str(paths.queue)
    out = [n for n in snap.get("notices", []) if not n.startswith(queue)]
    problem = queue_problem(paths)
    return ([problem] if problem else []) + out


def user_side(policy, game: Game, world_data: dict, records: dict[str, JobRecord], now: float) -> dict:
    """Game mode, the agents' unreserved memory and the warnings, from the last pass's world."""
    from .capacity import HOLDING
    from .game import game_lines
    from .models import World
    from .render import agents_memory_line, status_warnings

    world = World.model_validate(world_data) if world_data else None
    live = [r for r in records.values() if r.phase in LIVE]
    return {
        "game": {"on": game.active(now), "until": game.until if game.active(now) else None,
                 "left_s": round(game.until - now) if game.active(now) and game.until else None,
                 "lines": game_lines(policy, game, world, [r for r in records.values() if r.phase in HOLDING], now)},
        "agents_memory": agents_memory_line(world) if world else None,
        "agents_slice": world.agents_slice.model_dump() if world and world.agents_slice else None,
        "warnings": status_warnings(world, live, policy) if world else [],
    }


def status(paths: Paths, policy, job_id: str | None, as_json: bool) -> tuple[str, int]:
    """(text, exit code) of `res status [ID] [--json]`. With an id, the text is the entry alone (the
    CLI says a queue_problem on stderr), so the output stays one entry."""
    from .store import Store

    now = time.time()
    store = Store.open(paths, readonly=True)
    try:
        records = store.records()
        snap = _snapshot(store)
        last_good = store.get_meta("desired_last_good")
    finally:
        store.close()
    if job_id:
        rec = records.get(job_id)
        if rec is None:
            return f"res: no such entry: {job_id}", 1
        v = job_view(rec, snap, now, paths)
        if as_json:
            return json.dumps(v, indent=2), 0
        return "\n".join(f"{k}: {'' if val is None else val}" for k, val in v.items()), 0
    warn = notices(paths, snap)

    world = snap.get("world") or {}
    game = Game.model_validate(json.loads(last_good)["game"]) if last_good else Game()
    nproc = int(world.get("nproc") or 1)
    reserve_gb, reserve_cpus, game_on = reserves(policy, game, now, nproc)
    spent = spent_today(records, now)
    budget = {"mem_gb": snap.get("budget_mem_gb"), "cpus": snap.get("budget_cpus"),
              "reserve_gb": reserve_gb, "reserve_cpus": reserve_cpus, "as_of": snap.get("at"),
              "mem_available_gb": world.get("mem_available_gb"),  # what the budget was taken from
              "spend_today_usd": round(spent, 6), "daily_cost_usd": policy.daily_cost_usd or None}
    live = [r for r in sorted(records.values(), key=lambda r: r.request.number)
            if r.phase not in TERMINAL or (r.ended and now - r.ended < 3600)]
    views = [job_view(r, snap, now, paths) for r in live]
    side = user_side(policy, game, world, records, now)
    if as_json:
        return json.dumps({"jobs": views, "budget": budget, "notices": warn, **side}, indent=2), 0
    lines = [_line(v) for v in views] or ["no entries"]
    if budget["mem_gb"] is None:
        lines.append(f"agents may use ? GB, ? cpus now (no pass has run yet); reserve {reserve_gb:g} GB/{fmt_cpus(reserve_cpus)}")
    else:
        age = f" (as of {fmt_span(now - budget['as_of'])} ago)" if budget["as_of"] and now - budget["as_of"] > 10 else ""
        lines.append(f"agents may use {max(budget['mem_gb'], 0):.1f} GB, {fmt_cpus(max(budget['cpus'], 0))} now; "
                     f"reserve {reserve_gb:g} GB/{fmt_cpus(reserve_cpus)}{age}")
    cap = f" of ${policy.daily_cost_usd:.2f}" if policy.daily_cost_usd else ""
    lines[-1] += f"; sessions spent ${spent:.2f} today{cap}"  # the totals line
    if side["game"]["on"]:
        lines += side["game"]["lines"]
    if side["agents_memory"]:
        lines.append(side["agents_memory"])
    lines += [f"warning: {w}" for w in side["warnings"]]
    lines += [f"res: {' '.join(n.split())}" for n in warn]
    return "\n".join(lines), 0


def wait(paths: Paths, policy, job_id: str, timeout: float | None) -> tuple[int, str]:
    """Poll until the entry is finished; with no loop running, run passes here so it settles."""
    from .client import NoDaemon, ask
    from .store import Store

    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        store = Store.open(paths, readonly=True)
        try:
            rec = store.get(job_id)
        finally:
            store.close()
        if rec is None:
            return 1, f"res: no such entry: {job_id}"
        if rec.phase in TERMINAL:
            return 0, done_line(rec)
        if deadline is not None and time.monotonic() >= deadline:
            return 1, f"res: {job_id} still {rec.phase.value} after {fmt_span(timeout)}"
        try:
            ask(paths.socket, {"op": "ping"}, timeout=5)
            time.sleep(0.5)
        except NoDaemon:
            from .tick import pass_here

            pass_here(paths, policy)
            time.sleep(0.5)


def done_line(rec: JobRecord) -> str:
    if rec.phase != Phase.done:
        return f"{rec.id} {rec.phase.value}" + (f": {rec.why}" if rec.why else "")
    peak = f" peak {rec.peak_gb:.1f} GB" if rec.peak_gb is not None else ""
    took = f" in {fmt_span(rec.ended - rec.started)}" if rec.ended and rec.started else ""
    why = "" if rec.why in (None, "exited 0") else f" ({rec.why})"
    return f"{rec.id} done rc={rec.rc}{peak}{took}{why}"

