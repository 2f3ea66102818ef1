"""The lines of `res status` (its table and an entry's fields) and of a finished entry (`res wait`,
`res run --wait`). Made from the entry as data (ops/status.py job_view)."""
from __future__ import annotations

import json

from reconciler.core.models import JobRecord, Phase
from reconciler.core.rules import Rules
from reconciler.render.reasons import spend_notes
from reconciler.core.quantities import Zone
from reconciler.render.text import escaped, fmt_clock, fmt_cpus, fmt_gb, fmt_span, lock_text, one_line, quoted

HEADER = f"{'ID':<6} {'PROJECT':<16} {'TITLE':<32} {'STATE':<9} {'MEM':>7} {'USED':>7} {'PEAK':>7} {'CPUS':>5} {'START':>5}  WHY / WHEN"


def field_text(value) -> str:
    """A field of `res status ID` as text: strings escaped (a title cannot forge a `state: done` line),
    anything else as JSON (which escapes what it holds)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return escaped(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def _size(gb: float | None) -> str:
    return "-" if gb is None else fmt_gb(gb)


def status_line(v: dict, zone: Zone) -> str:
    """One entry under HEADER: what it asked for, uses and used, and what a reader decides on: when
    it ends, why it waits (position, est. start, what blocks it), or how it ended."""
    started = fmt_clock(v["started"], zone) if v["started"] else "-"
    if v["state"] in ("done", "refused", "cancelled", "exited") and v["why"]:
        tail = f"rc={v['rc']}" if v["rc"] is not None else ""
        tail += f" {v['why']}" if v["why"] else ""
    elif v["overdue"]:
        tail = "overdue"
    elif v["state"] == "queued":
        tail = v["waits"] or "waiting (no pass has looked at it yet)"
    elif v.get("pending"):
        est = f", est. start ~{fmt_clock(v['slurm_est_start'], zone)}" if v.get("slurm_est_start") else ""
        tail = f"pending in slurm ({v['pending']}{est})"
    elif v["eta"]:
        tail = f"ETA ~{fmt_clock(v['eta'], zone)}"
    else:
        tail = "starting"
    if v.get("where", "local") != "local":
        tail = f"{v['where']} {tail}"
    if v["agent"] != "none" and v.get("unknown_format"):
        tail += f" ~${v['running_spend_usd']:.2f}: output in no known {v['agent']} format"
    elif v["agent"] != "none":
        tail += f" ${v['spend_usd']:.2f} {v['iterations']} turns"
        if v["state"] not in ("done", "refused", "cancelled", "exited"):  # an ended one's why says it already
            tail += spend_notes(v.get("dearest_rates"), v.get("set_aside", 0), v.get("set_aside_note"))
    live = v["state"] in ("queued", "starting", "running")
    book, cap = v.get("book_gb"), v.get("cap_gb")
    if live and book is not None and cap is not None and book < cap:  # (DESIGN §5.1)
        tail += f" ({fmt_gb(book)} booked · {fmt_gb(cap)} cap: {v.get('booked_from')})"
    if v.get("evictions"):
        n = len(v["evictions"])
        tail += f" stopped by res above its book {'once' if n == 1 else f'{n} times'}"
    if v["state"] in ("starting", "running") and v.get("lock"):  # (a queued one's wait names it already)
        tail += f" lock {lock_text(v['lock'])}"
    who = asker_text(v.get("by") or {}) if live else ""
    return (f"{v['id']:<6} {one_line(v['project'], 16):<16} {quoted(v['title'], 30):<32} {v['state']:<9} "
            f"{_size(v['mem_gb']):>7} {_size(v['used_gb']):>7} {_size(v['peak_gb']):>7} {fmt_cpus(v['cpus']).split()[0]:>5} "
            f"{started:>5}  {one_line(tail.strip(), 160)} {who}").rstrip()


def pressure_line(world, policy: Rules) -> str | None:
    """`memory pressure 25 % (full, 10 s) is over pressure_full_pct (10 %): nothing new starts until it
    falls; running jobs go on`: the line `res status` shows while memory pressure holds back new work
    (DESIGN §5.9), from the last pass's World; None when it does not (or nothing was observed)."""
    from reconciler.core.capacity import pressure_of
    from reconciler.render.reasons import pressure_over

    p = pressure_of(policy, world) if world is not None else None
    if p is None:
        return None
    return f"{pressure_over(p)}: nothing new starts until it falls; running jobs go on"


def ladder_line(rung: str | None, why: dict) -> str | None:
    """`memory: amber: only 0.3 GB free beyond the reserve, under guard_gb (0.5 GB): nothing new starts;
    running jobs go on` (or red: res stops the job most above its book): the pressure ladder's rung
    off green, as the last pass found it (DESIGN §5.1); None on green."""
    from reconciler.render.reasons import guard_under

    if rung not in ("amber", "red"):
        return None
    if why.get("because") == "pressure":
        cause = "memory pressure " + ("held over pressure_full_pct" if rung == "red" else "over pressure_full_pct")
    else:
        cause = guard_under({"room_gb": why.get("room_gb", 0.0), "guard_gb": why.get("guard_gb", 0.0)})
        if rung == "red":
            cause += ", under half of it"
    act = ("nothing new starts; running jobs go on" if rung == "amber"
           else "nothing new starts, and res stops the job most above its book (it starts again by itself)")
    return f"memory: {rung}: {cause}: {act}"


def asker_data(req) -> dict:
    """Who asked, as `--json` carries it: name, task, batch, message (the keys known)."""
    pairs = (("name", req.by), ("task", req.task), ("batch", req.batch), ("message", req.reply_to))
    return {k: v for k, v in pairs if v}


def asker_text(by: dict) -> str:
    """`[by claude pid 4121 fix-login batch r-3, message unix:/run/agent.sock]`, the keys known; ""
    when none is."""
    words = []
    if by.get("name"):
        words.append(f"by {one_line(by['name'], 60)}")
    if by.get("task"):
        words.append(one_line(by["task"], 60) if words else f"task {one_line(by['task'], 60)}")
    if by.get("batch"):
        words.append(f"batch {by['batch']}")
    text = " ".join(words)
    if by.get("message"):
        text += f"{', ' if text else ''}message {one_line(by['message'], 120)}"
    return f"[{text}]" if text else ""


def done_line(rec: JobRecord) -> str:
    """`r-1 done rc=0 peak 28 MB in 3 s`: how a finished entry ended, in one line."""
    why = one_line(rec.why or "")
    if rec.phase == Phase.refused:
        return f"{rec.id} refused: {why or 'refused'}"
    if rec.phase == Phase.cancelled:
        return f"{rec.id} cancelled" + (f": {why}" if why else "")
    if rec.phase != Phase.done:
        return f"{rec.id} {rec.phase.value}" + (f": {why}" if why else "")
    if rec.request.kind == "note":
        return f"{rec.id} note ended" + (f": {why}" if why else "")
    if rec.rc is None and rec.started is not None and (rec.detail or {}).get("code") == "start_failed":
        return f"{rec.id} never ran ({why})"
    peak = f" peak {fmt_gb(rec.peak_gb)}" if rec.peak_gb is not None else ""
    took = f" in {fmt_span(rec.ended - rec.started)}" if rec.ended and rec.started else ""
    tail = "" if why in ("", "exited 0") else f" ({why})"
    grown = rec.request.grown_from_gb
    again = (f"; started again at {fmt_gb(rec.request.mem_gb)} after a kill at its {fmt_gb(grown)} limit"
             if grown is not None else "")
    if rec.evictions:  # the agent saw one job: say it ran more than once
        n = len(rec.evictions)
        again += (f"; run {n + 1} times: res stopped it above its book {'once' if n == 1 else f'{n} times'} "
                  "before memory ran out")
    return f"{rec.id} done rc={rec.rc if rec.rc is not None else '?'}{peak}{took}{tail}{again}"
