"""Reasons as text: every action's reason and every job's outcome, made from the structured reason
the core put on it (`detail`, with a stable `code`). The one place such text is made (DESIGN §3);
`explain` puts it on a plan's actions at the edge, before anything shows or records them.

Agents parse these lines: each is one line, stable and complete.
"""
from __future__ import annotations

from reconciler.core.models import Action, Plan
from reconciler.core.quantities import GIB, Zone
from reconciler.render.text import apart, fmt_clock, fmt_cpus, fmt_gb, fmt_span, fmt_usd_pair, lock_text, one_line, quoted
from reconciler.render.game import changes_text

UNHELD = "nobody attached"  # a reattach of a job whose holder gave it up cleanly: bookkeeping


def _until(h: dict, zone: Zone) -> str:
    if h["overdue"] or h["until"] is None:
        return "(overdue)"
    return f"until ~{fmt_clock(h['until'], zone)}"


def _who(h: dict, zone: Zone) -> str:
    project = f"{one_line(h['project'], 30)} " if h["project"] else ""
    by = f", by {one_line(h['by'], 60)}" if h.get("by") else ""
    return f"{project}{quoted(h['title'], 40)} ({h['id']}{by}) {_until(h, zone)}"


def _retry_text(d: dict, zone: Zone) -> str:
    if d["retry"] == "after":
        return f"retry after ~{fmt_clock(d['retry_at'], zone)} or work on something else"
    if d["retry"] == "soon":
        return "retry in a few minutes or work on something else"
    return "retry later or work on something else"


def _amounts(short: list[str], gb: float, cpus: float, beside: tuple[float, float] | None = None) -> str:
    """`2.0 GB`, `1 cpu`, or `2.0 GB and 1 cpu`: the resources in `short`, by these amounts; with the
    amounts shown `beside` them, in as many digits as tell the two apart (text.apart)."""
    if beside is None:
        return " and ".join(fmt_gb(gb) if r == "memory" else fmt_cpus(cpus) for r in short)
    return " and ".join(apart(fmt_gb, gb, beside[0])[0] if r == "memory" else apart(fmt_cpus, cpus, beside[1])[0]
                        for r in short)


def reason_line(d: dict, zone: Zone) -> str:
    """The one line of a refusal's structured reason (core.capacity.*_detail)."""
    if d["code"] == "caller_gone":
        return (f"not started: its caller stopped waiting at ~{fmt_clock(d['answer_by'], zone)} before res decided "
                "it (nothing ran; ask again)")
    if d["code"] == "start_missed":
        return (f"not started: it was to start by ~{fmt_clock(d['start_by'], zone)} (--start-within) and could not "
                "(nothing ran; retry later)")
    if d["code"] == "same_request":
        return f"not started: the same request ({d['request_id']}) as {d['as']}, which holds it"
    if d["code"] == "never_fits":
        if d["resource"] == "memory":
            return "{} GB can never fit (max {} GB)".format(*apart(_g, d["asked"], d["max"]))
        return "{} can never fit (max {})".format(*apart(fmt_cpus, d["asked"], d["max"]))
    if d["code"] == "pricing":
        return f"{d['error']}; no agent session starts until it is fixed"
    resource = d["resource"]
    if resource == "cluster":
        when = fmt_clock(d["est_start"], zone) if d.get("est_start") else "an unknown time"
        return (f"busy: the cluster would start it at ~{when} (slurm, partition {d['partition']}); "
                f"retry after ~{when}, or --queue to wait in slurm's queue, or work on something else")
    if resource == "lock":
        forced = "--force never overrides a lock; " if d.get("force") == "lock" else ""
        return f"busy: lock {lock_text(d['lock'])} held by {_who(d['holders'][0], zone)}; {forced}{_retry_text(d, zone)}"
    if resource == "sessions":
        hs = d["holders"]
        who = ", ".join(_who(h, zone) for h in hs[:5]) + (f", and {len(hs) - 5} more" if len(hs) > 5 else "")
        return f"busy: {d['running']} agent sessions running (max {d['limit']}): {who}; {_retry_text(d, zone)}"
    if resource == "daily_cost":
        return (f"busy: agent sessions spent ${d['spent_usd']:.2f} today, daily_cost_usd is ${d['limit_usd']:.2f}; "
                "new sessions start again tomorrow, or raise daily_cost_usd")
    if resource == "pressure":
        forced = "--force never starts past memory pressure; " if d.get("force") == "pressure" else ""
        return f"busy: {pressure_over(d['pressure'])}: nothing new starts until it falls; {forced}{_retry_text(d, zone)}"
    if resource == "guard":
        forced = "--force never starts past the guard; " if d.get("force") == "guard" else ""
        return (f"busy: {guard_under(d['guard'])}: jobs use more than they booked, and nothing new starts until "
                f"they end or shrink; {forced}{_retry_text(d, zone)}")
    return busy_line(d, zone)


def guard_under(g: dict) -> str:
    """`only 0.3 GB free beyond the reserve, under guard_gb (0.5 GB)`: the ladder's amber by memory."""
    return f"only {fmt_gb(max(g['room_gb'], 0.0))} free beyond the reserve, under guard_gb ({fmt_gb(g['guard_gb'])})"


def booked_text(gb: float, cap_gb: float | None) -> str:
    """`2.2 GB booked · 3.5 GB cap` where a book is below the cap (DESIGN §5.1), else `3.5 GB`."""
    if cap_gb is None or cap_gb <= gb:
        return fmt_gb(gb)
    return f"{fmt_gb(gb)} booked · {fmt_gb(cap_gb)} cap"


def _pct(value: float) -> str:
    """`25`, `12`, `9.5`, `3`: a PSI percentage as people read it (whole from 10 % up, else one decimal)."""
    tenths = round(float(value), 1)
    return f"{value:.0f}" if tenths >= 10 or tenths.is_integer() else f"{tenths:.1f}"


def pressure_text(p: dict) -> str:
    """`memory pressure 25 % (full, 10 s)`, and where when it is the agents slice's own (core.capacity.pressure_of)."""
    where = f" in {p.get('slice') or 'the agents slice'}" if p.get("where") == "slice" else ""
    return f"memory pressure {_pct(p['pct'])} % ({p.get('kind', 'full')}, {p.get('window_s', 10)} s){where}"


def pressure_over(p: dict) -> str:
    """`memory pressure 25 % (full, 10 s) is over pressure_full_pct (10 %)`."""
    return f"{pressure_text(p)} is over pressure_full_pct ({p['limit']:g} %)"


def busy_line(d: dict, zone: Zone) -> str:
    """`busy: 7.5 GB held by proj-a "dotnet e2e" (r-4) until ~14:40; 2.1 GB free for agents; retry after
    ~14:40 or work on something else` — holders named earliest ETA first, in the resource that is short."""
    short = d["short"]
    parts = []
    if d["holders"]:
        first, *rest = d["holders"]
        held = f"{_amounts(short[:1], first['gb'], first['cpus'])} held by {_who(first, zone)}"
        held += "".join(f", {_amounts(short[:1], h['gb'], h['cpus'])} by {_who(h, zone)}" for h in rest)
        parts.append(held)
    head = d.get("head")
    if head:
        waits = head["waits_for"].split("+")
        parts.append(f"queue head {head['id']} {quoted(head['title'], 40)} waits for "
                     f"{_amounts(waits, head['gb'], head['cpus'])} first")
    force = d.get("force")
    if force != "short":
        free_gb, free_cpus, asked = max(d['free_gb'], 0), max(d['free_cpus'], 0), (d['asked_gb'], d['asked_cpus'])
        free = f"{_amounts(short, free_gb, free_cpus, None if d['holders'] else asked)} free for agents"
        if not d["holders"]:
            asked_text = _amounts(short, *asked, (free_gb, free_cpus))
            if d.get("cap_gb") is not None and "memory" in short and d["cap_gb"] > d["asked_gb"]:
                shown = apart(fmt_gb, d["asked_gb"], free_gb)[0]  # the book, as _amounts wrote it
                asked_text = asked_text.replace(shown, f"{shown} booked · {fmt_gb(d['cap_gb'])} cap", 1)
            free += f", {asked_text} asked; the rest is in use outside res or kept as the user's reserve"
        parts.append(free)
    parts.append(_retry_text(d, zone))
    if force == "short":
        only = (fmt_gb(d["really_free_gb"]) + " really free" if d["asked_gb"] > d["really_free_gb"]
                else fmt_cpus(d["really_free_cpus"]))  # (CPUs: the reserve's share, not a measured use)
        return f"busy even with --force: only {only} beyond the reserve; " + "; ".join(parts)
    if force == "would_fit":
        parts.append(f"{fmt_gb(d['really_free_gb'])} really free beyond the reserve: --force starts it past the "
                     "ledger (only if the holders will not use what they reserved)")
    return "busy: " + "; ".join(parts)


def queued_line(d: dict, zone: Zone) -> str:
    """`position 2; est. start ~14:40; lock 'e2e' held by r-1`: a waiting queue entry (its detail from core.admission)."""
    if d["waits_for"] == "cluster":
        return f"position {d['position']}; waits for {waits_for_text(d, zone)}"
    if d["waits_for"] in ("sessions", "daily_cost", "pricing"):
        return f"position {d['position']}; {waits_for_text(d, zone)}"
    eta = f"est. start ~{fmt_clock(d['est_start'], zone)}" if d["est_start"] is not None else "est. start unknown"
    text = f"position {d['position']}; {eta}"
    if {"pressure", "guard"} & set(d["waits_for"].split("+")):
        return text + f"; waits for {waits_for_text(d, zone)}"
    if d["waits_for"] in ("lock", "queue_head"):
        text += f"; {waits_for_text(d, zone)}"
    return text


_RESOURCE_WORDS = {"memory": "memory", "cpus": "CPUs"}


def waits_for_text(d: dict, zone: Zone) -> str:
    """What a waiting entry waits for, alone (the views' "waits for" column): `lock 'e2e' held by r-1`,
    `behind queue head r-3`, `memory and CPUs`, the cluster, memory pressure, the session cap."""
    waits = d["waits_for"]
    if waits == "cluster":
        return f"the cluster: {d.get('error') or 'not asked yet'}; submitted once it answers"
    if waits in ("sessions", "daily_cost", "pricing"):
        return reason_line(d["block"], zone).removeprefix("busy: ") if d.get("block") else "behind an earlier session that waits"
    if "pressure" in waits.split("+"):
        p = d.get("pressure")
        return (f"{pressure_text(p)} to fall under {p['limit']:g} % (pressure_full_pct)" if p
                else "memory pressure to fall (pressure_full_pct)")
    if "guard" in waits.split("+"):
        g = d.get("guard")
        return (f"jobs to end or shrink: {guard_under(g)}" if g else "jobs to end or shrink (guard_gb)")
    if waits == "lock":
        return f"lock {lock_text(d['lock'], quote=chr(39))} held by {d['lock_holder']}"
    if waits == "queue_head":
        return f"behind queue head {d['head']}"
    return " and ".join(_RESOURCE_WORDS.get(w, w) for w in waits.split("+"))


def backfill_text(d: dict, zone: Zone) -> str:
    """`backfill: ends ~14:02, before r-3's start ~14:05`: why an entry starts ahead of a waiting head."""
    head_start = fmt_clock(d["head_start"], zone)
    if d["beside"]:
        return (f"backfill: fits beside {d['head']} once it starts ~{head_start} "
                f"({fmt_gb(d['spare_gb'])}, {fmt_cpus(d['spare_cpus'])} spare then)")
    return f"backfill: ends ~{fmt_clock(d['ends'], zone)}, before {d['head']}'s start ~{head_start}"


def _g(gb: float) -> str:
    return f"{gb:.0f}" if float(gb).is_integer() else f"{gb:.1f}"


# ---------------------------------------------------------------- outcomes of jobs


def stop_text(d: dict) -> str:
    """Why res stops a job: `released`, a budget, its log's size, its attachment (core.plan.budget_trip)."""
    code = d["code"]
    if code == "released":
        return "released"
    if code == "attach_failed":
        return f"attachment failed {d['failures']} times in a row: {d.get('error') or 'unknown error'}"
    if code == "log_limit":
        return f"log over {d['limit_gb']:g} GB ({fmt_gb(d['written_gb'])} written; policy max_log_gb)"
    budget, used, limit = d["budget"], d["used"], d["limit"]
    if budget == "cost":
        shown, cap = fmt_usd_pair(used, limit)
        if d.get("estimated"):  # what the lines add up to: the agent has not reported it yet
            n = d.get("messages", 0)
            return f"budget: cost ~{shown} (estimated, {n} message{'s' if n != 1 else ''}) > {cap}"
        reported = d.get("reported")
        if reported is not None and used > reported + 1e-9:  # its lines say more than it reported
            said, _ = fmt_usd_pair(reported, limit)
            return f"budget: cost ~{shown} (its lines; it reported {said}) > {cap}"
        return f"budget: cost {shown} > {cap}"
    if budget == "duration":
        return f"budget: duration {fmt_span(used)} > {fmt_span(limit)}"
    return f"budget: iterations {used} > {limit}"


def evict_text(d: dict) -> str:
    """`above its book (2.9 GB used, 2.2 GB booked); back to the queue head (0.2 GB free beyond the
    reserve, under half of guard_gb 0.5 GB)`: why the ladder stops a job (core/ladder.py)."""
    if d.get("process"):  # an agent session's own process outside any job (ladder_session_gb)
        p = d["process"]
        what = (f"{p['gb']:.1f} GB outside any job, over ladder_session_gb ({fmt_gb(p['over_gb'])}), "
                f"of agent session pid {p['session']}; the session goes on")
        return f"{what} ({_ladder_cause(d)})"
    what = "above the gate's guess" if d.get("gated") else "above its book"
    return f"{what} ({fmt_gb(d['used_gb'])} used, {fmt_gb(d['book_gb'])} booked); back to the queue head ({_ladder_cause(d)})"


def _ladder_cause(d: dict) -> str:
    if d.get("because") == "pressure" and d.get("pressure"):
        p = d["pressure"]
        return (f"memory pressure {_pct(p['pct'])} % (full, 10 s; {_pct(p['avg60_pct'])} % over 60 s) held over "
                f"pressure_full_pct ({p['limit']:g} %)")
    return f"{fmt_gb(max(d['room_gb'], 0.0))} free beyond the reserve, under half of guard_gb ({fmt_gb(d['guard_gb'])})"


def memory_limit_why(mem_gb: float, peak: float | None, try_mem: str, oom_kills: int = 0, rc: int | None = None) -> str:
    what = (f"exit code {rc}: {oom_kills} of its processes killed at its memory limit" if oom_kills
            else "killed at its memory limit")
    return (f"{what} ({fmt_gb(mem_gb)}" + (f", peak {fmt_gb(peak)}" if peak is not None else "")
            + f"); raise --mem (try --mem {try_mem})")


_LOST = {"foreign_exit": "lost: its exit record is another run's (not written by its unit)",
         "vanished": "lost: the unit vanished without an exit record"}


def outcome_why(d: dict) -> str:
    """The `why` of an ended job, from its outcome (core.plan.settle_outcome, agent_outcome)."""
    if "dearest_rates" in d or "set_aside" in d:
        rest = {k: v for k, v in d.items() if k not in ("dearest_rates", "set_aside", "set_aside_note")}
        return outcome_why(rest) + spend_notes(d.get("dearest_rates"), d.get("set_aside", 0), d.get("set_aside_note"))
    if d.get("unknown_format"):
        rest = {k: v for k, v in d.items() if k not in ("unknown_format", "lines")}
        return (f"{outcome_why(rest)}; its output matched no known agent format ({d['lines']} lines): "
                "spend estimated at 1 cent a line")
    code = d["code"]
    if "stop_reason" in d:
        if d.get("no_exit_record"):  # stopped by res; its unit left no exit record of its own
            return f"{d['stop_reason']}; its unit ended without an exit record of its own (exit code unknown)"
        return d["stop_reason"]
    if code in ("attach_failed", "log_limit", "budget", "released"):
        return stop_text(d)
    if code == "memory_limit":
        return memory_limit_why(d["mem_gb"], d["peak_gb"], d["try_mem"], d.get("oom_kills", 0), d.get("rc"))
    if code == "exec_failed":
        return "could not execute the command (not found or not executable)"
    if code == "time_limit":
        return f"over its time limit on the cluster ({fmt_span(d['limit_s'])}, from --for); raise --for"
    if code == "node_failure":
        return "its cluster node failed (slurm NODE_FAIL); run it again"
    if code == "exited":
        return "exited 0" if d["rc"] == 0 else f"exit code {d['rc']}"
    if code == "stopped_outside":
        return f"stopped from outside res (signal {d['signal']})"
    if code == "signal":
        return f"killed by signal {d['signal']}"
    if code == "lost":
        return _LOST[d["lost"]]
    if code == "agent_failed":
        return f"agent failed: {d.get('failure') or 'reported an error'}"
    return code


def spend_notes(dearest: str | None, set_aside: int = 0, last: str | None = None) -> str:
    """How an agent session's spend was counted where it is not simply the agent's own usage at its
    model's rates: `; priced at the dearest rates: no model named (give -m)`, and lines set aside."""
    text = f"; priced at the dearest rates: {dearest}" if dearest else ""
    if set_aside:
        text += f"; {set_aside} line{'s' if set_aside != 1 else ''} of its output set aside ({last})"
    return text


def settle_text(d: dict, why: str) -> str:
    rc, peak, took = d.get("rc"), d.get("peak_gb"), d.get("took_s")
    if d["code"] == "lost":
        return why
    peak_s = f" peak {fmt_gb(peak)}" if peak is not None else ""
    took_s = f" in {fmt_span(took)}" if took else ""
    return f"rc={rc if rc is not None else '?'}{peak_s}{took_s}; {why}"


# ---------------------------------------------------------------- every action's reason


def _session_memory(d: dict) -> str:
    was = d["was"]
    shown = "max" if was is None or was >= 1 << 63 else fmt_gb(was / GIB)
    return f"MemoryHigh {shown} → {fmt_gb(d['to_gb'])} (session_mem_gb)"


def session_moved(d: dict) -> str:
    """`claude pid 41 and 2 child processes`: what an adopt moves (core.sessions)."""
    kids = d["children"]
    return f"claude pid {d['pid']}" + (f" and {kids} child process{'es' if kids != 1 else ''}" if kids else "")


def action_reason(a: Action, zone: Zone) -> str:
    """The one line of why an action is in the plan."""
    d = a.detail or {}
    code, kind = d.get("code"), a.kind
    if kind in ("refuse",):
        return reason_line(d, zone)
    if kind in ("enqueue", "wait"):
        return queued_line(d, zone)
    if kind == "start" and code == "submit":
        how = "overflow: does not fit here now; " if d.get("overflow") else ""
        return f"{how}to slurm ({fmt_gb(a.mem_gb)}, {fmt_cpus(a.cpus)}, {fmt_span(d['est_s'])})"
    booked = f"; booked from {d['booked_from']}" if d.get("booked_from") else ""
    if code == "backfill":
        return backfill_text(d, zone) + booked
    if kind == "start":
        return f"{'queue head, fits' if d['head'] else 'fits'} ({fmt_gb(d['free_gb'])} free){booked}"
    if kind == "evict":
        return evict_text(d)
    if kind == "grant":
        return f"fits ({fmt_gb(d['free_gb'])} free)"
    if kind == "running":
        return "unit seen started"
    if kind == "retire":
        return f"{d['phase']}; removing it from the queue file"
    if kind == "prune":
        return "finished over 24 h ago; into history"
    if kind == "cancel":
        return "removed from the queue"
    if kind == "expire":
        if code == "owner_gone":
            return f"owner pid {d['pid']} is gone"
        if code == "expired":
            return f"expired at {fmt_clock(d['at'], zone)}"
        return "released"
    if kind == "restore":
        return ("gone from queue.toml without res release: written back "
                f"(res release {a.id}{' --stop' if d['stop'] else ''} ends it)")
    if kind == "retry":
        from reconciler.render.lines import retry_text

        return retry_text(d)
    if kind == "requeue":
        return f"never started; {d['holder']} is gone" if code == "holder_gone" else "never started; lease expired"
    if kind == "reattach":
        if code == "unheld":
            return UNHELD
        if code == "holder_gone":
            return f"{d['holder']} is gone"
        ago = fmt_span(d["ago_s"]) if d.get("ago_s") is not None else "?"
        return f"lease of {d['holder']} expired {ago} ago"
    if kind == "settle":
        return settle_text(d, outcome_why(d))
    if kind == "stop":
        return stop_text(d)
    if kind == "hold" and code == "unchecked":
        return "not yet checked for a hand edit (the writer was at work): the next pass decides it"
    if kind == "hold":
        return f"added to queue.toml outside res (not by res run): never started; res release {a.id} drops it"
    if kind == "recover":
        return ("state.db has no record of it, its unit is there: taken back" if code == "unit" else
                "state.db has no record of it, but it ran before (its log is there): not started again")
    if kind == "end_game":
        return f"game mode ended at {fmt_clock(d['at'], zone)}; clearing it"
    if kind == "set" and code == "game_slice":
        why = (f"game on until {fmt_clock(d['until'], zone)}" if d["until"] else "game on") if d["game"] == "on" else "game off"
        return f"{changes_text(d['changes'])} ({why})"
    if kind == "set" and code == "session_memory":
        return _session_memory(d)
    if kind == "adopt":
        return f"{session_moved(d)}, outside {d['slice']}"
    return a.reason


def explain(p: Plan, zone: Zone, before: dict | None = None) -> Plan:
    """Put each action's reason on it as text (and a settle's `why`): the plan as people and agents
    read it, and as the executor records it. `before`: the reasons of the last pass, `explained(p)`
    of its plan; an action of the same kind with the same detail (in the same zone) takes its reason
    from there (a crowd's pass explains thousands of waiting entries exactly as the pass before)."""
    known = before.get("by_id", {}) if before is not None and before.get("zone") is zone else {}
    for a in p.actions:
        if a.detail is not None:
            kept = known.get(a.id)
            if kept is not None and kept[0] == a.kind and kept[1] == a.detail and a.kind != "settle":
                a.reason = kept[2]
                continue
            a.reason = action_reason(a, zone)
            if a.kind == "settle":
                a.why = outcome_why(a.detail)
    return p


def explained(p: Plan, zone: Zone) -> dict:
    """What `explain` may reuse of this plan in the next pass."""
    return {"zone": zone, "by_id": {a.id: (a.kind, a.detail, a.reason) for a in p.actions if a.detail is not None}}
