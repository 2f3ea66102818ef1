"""`res top`'s text, pure: the rows and lines it draws from one machine view (docs/watching.md), and
which command a key runs on a row. Every figure is the view's own; nothing here computes one (the
page and the terminal draw the same fields). Strings only: commands/top.py gives them their styles.
"""
from __future__ import annotations

from dataclasses import dataclass

from reconciler.core.quantities import Zone
from reconciler.core.view import local_date, sample
from reconciler.render.text import escaped_path, fmt_clock, fmt_gb, fmt_span, lock_text, one_line

_EIGHTHS = " ▏▎▍▌▋▊▉"
LIVE_STATES = ("starting", "running")
ENDED_STATES = ("exited", "done", "refused", "cancelled")


def bar(value: float | None, scale: float | None, width: int) -> str:
    """`value` of `scale` as a bar `width` cells wide, in eighths of a cell; blank when unknown."""
    if not value or not scale or scale <= 0 or width <= 0:
        return " " * max(width, 0)
    eighths = round(min(max(value / scale, 0.0), 1.0) * width * 8)
    full, part = divmod(eighths, 8)
    out = "█" * full + (_EIGHTHS[part] if part else "")
    return out + " " * (width - len(out))


def gb_text(gb: float | None) -> str:
    return "?" if gb is None else fmt_gb(gb)


def pct_text(pct: float | None) -> str:
    return "?" if pct is None else f"{pct:.0f} %" if pct >= 10 else f"{pct:.1f} %"


@dataclass(frozen=True)
class OwnerRow:
    key: str                 # the owner's key in the view ("session:4121", "job:r-4", "you", "cache")
    kind: str                # session, job, you, res, cache
    label: str               # one line, indented under its session when it is a session's job
    gb: float | None
    cpu_pct: float | None
    spend_usd: float | None  # today's, for a session

    @property
    def job_id(self) -> str | None:
        return self.key.removeprefix("job:") if self.kind == "job" else None


LABEL_WIDTH = 44


def _owner_row(o: dict, indent: str = "", project: str = "") -> OwnerRow:
    label = str(o.get("label") or o.get("key") or "?")
    book, cap = o.get("book_gb"), o.get("cap_gb")
    # a job booked below its cap says both (DESIGN §5.1; where from: the entries table), whatever is cut
    booked = f" · {gb_text(book)} booked/{gb_text(cap)}" if book is not None and cap is not None and book < cap else ""
    if o.get("notes"):  # a session's notes: what it holds in the ledger for work outside res
        label += f" · {gb_text(o.get('noted_gb'))} noted ({', '.join(map(str, o['notes']))})"
    label = one_line(f"{one_line(project, 16)} · {label}" if project else label,
                     max(LABEL_WIDTH - len(indent) - len(booked), 12)) + booked
    return OwnerRow(str(o.get("key") or label), str(o.get("kind") or "?"), indent + label, o.get("gb"),
                    o.get("cpu_pct"), o.get("spend_today_usd"))


def owner_rows(view: dict) -> list[OwnerRow]:
    """Memory and CPU by owner, in the order of the view (biggest first): each agent session with the
    jobs it asked for under it, the other jobs by project, your programs, res, then the page cache."""
    owners = [o for o in view.get("owners") or [] if isinstance(o, dict)]
    sessions = [o for o in owners if o.get("kind") == "session"]
    session_keys = {o.get("key") for o in sessions}
    jobs = [o for o in owners if o.get("kind") == "job"]
    rows: list[OwnerRow] = []
    for s in sessions:
        rows.append(_owner_row(s))
        rows += [_owner_row(j, "  └ ") for j in jobs if j.get("session") == s.get("key")]
    # a service a job started outside res's slices goes with its project's jobs (docs/escaping.md)
    loose = [j for j in jobs if j.get("session") not in session_keys] + \
        [o for o in owners if o.get("kind") == "escaped" and o.get("project")]
    for project in sorted({str(j.get("project") or "") for j in loose}):
        rows += [_owner_row(j, project=project) for j in loose if str(j.get("project") or "") == project]
    rows += [_owner_row(o) for o in owners if o.get("kind") not in ("session", "job")
             and not (o.get("kind") == "escaped" and o.get("project"))]
    cache = (view.get("memory") or {}).get("cache_gb")
    if cache is not None:
        rows.append(OwnerRow("cache", "cache", "page cache (reclaimable)", cache, None, None))
    return rows


def memory_line(view: dict) -> str:
    """The totals the bars are read against: total, available, the agents' budget, the reserve."""
    m = view.get("memory") or {}
    game = ((view.get("status") or {}).get("game") or {}).get("on")
    reserve = f"{gb_text(m.get('reserve_gb'))}{' (game mode)' if game else ''}"
    return (f"memory {gb_text(m.get('total_gb'))} total · {gb_text(m.get('available_gb'))} available · "
            f"agents' budget {gb_text(m.get('agents_budget_gb'))} · your reserve {reserve} · "
            f"cache {gb_text(m.get('cache_gb'))}")


def memory_segments(view: dict, width: int) -> list[tuple[str, int]]:
    """The total as one stacked bar: (sessions | jobs | you | res | cache | free, cells), summing to
    `width` (free takes what is left). The groups are the history's (core.view.sample)."""
    total = (view.get("memory") or {}).get("total_gb") or 0
    if total <= 0 or width <= 0:
        return [("free", max(width, 0))]
    groups = sample(view.get("at") or 0, view.get("owners") or [], view["memory"])["gb"]
    out, used = [], 0
    for name in ("sessions", "jobs", "you", "res", "cache"):
        cells = min(round((groups.get(name) or 0) / total * width), width - used)
        if cells > 0:
            out.append((name, cells))
            used += cells
    return out + [("free", width - used)]


def cpu_line(view: dict) -> str:
    c = view.get("cpu") or {}
    return f"cpu {c.get('nproc') or '?'} cores · {pct_text(c.get('busy_pct'))} busy"


def pressure_line(view: dict) -> str:
    pct = (view.get("memory") or {}).get("pressure_full_pct")
    limit = ((view.get("status") or {}).get("pressure") or {}).get("limit_pct")
    text = "unreadable" if pct is None else f"{pct:.1f} %"
    return f"memory pressure (PSI full avg10) {text}" + (f" · queue waits above {limit:g} %" if limit else "")


def ladder_line(view: dict) -> str:
    """The pressure ladder (DESIGN §5.1) as the last pass found it: `memory: green`, or amber / red and
    why (core/ladder.rung)."""
    m = view.get("memory") or {}
    rung, why = m.get("rung"), m.get("rung_why") or {}
    if rung in (None, "green"):
        return "ladder green: admitting what fits"
    room = why.get("room_gb")
    cause = (f"{gb_text(room)} free beyond the reserve (guard {gb_text(why.get('guard_gb'))})"
             if why.get("because") == "room" and room is not None else "memory pressure held over the line")
    act = "nothing new starts" if rung == "amber" else "res stops the job most above its book"
    return f"ladder {rung.upper()}: {cause}: {act}"


def game_line(view: dict, zone: Zone) -> str:
    game = (view.get("status") or {}).get("game") or {}
    if not game.get("on"):
        return "game mode off"
    until = game.get("until")
    left = game.get("left_s")
    return ("game mode ON" + (f" until {fmt_clock(until, zone)}" if until else "")
            + (f" ({fmt_span(left)} left)" if left is not None else ""))


@dataclass(frozen=True)
class EntryRow:
    id: str
    kind: str    # job, note
    state: str
    cells: tuple[str, ...]  # as ENTRY_COLUMNS
    log: str | None


ENTRY_COLUMNS = ("id", "state", "pos", "est. start", "mem", "title", "waits for / ends")


def entry_rows(view: dict, zone: Zone) -> list[EntryRow]:
    """The entries of `res status` (running, queued, noted, just finished), queued ones by position."""
    jobs = [j for j in (view.get("status") or {}).get("jobs") or [] if isinstance(j, dict) and j.get("id")]
    rank = {"running": 0, "starting": 0, "queued": 1}
    jobs.sort(key=lambda j: (rank.get(j.get("state"), 2), j.get("position") or 0))
    out = []
    for j in jobs:
        state = str(j.get("state") or "?")
        shown = "noted" if j.get("kind") == "note" and state in LIVE_STATES else state
        est = fmt_clock(j["est_start"], zone) if j.get("est_start") else ""
        mem = gb_text(j.get("mem_gb"))
        book, cap = j.get("book_gb"), j.get("cap_gb")
        if book is not None and cap is not None and book < cap:  # (DESIGN §5.1), and where the book is from
            mem = f"{gb_text(book)} booked · {gb_text(cap)} cap ({one_line(str(j.get('booked_from') or ''), 40)})"
        if j.get("used_gb") is not None:
            mem = f"{gb_text(j['used_gb'])} of {mem}"
        if state == "queued":
            tail = j.get("waits_for_text") or j.get("waits") or "waiting (no pass has looked at it yet)"
        elif state in ENDED_STATES:  # its why says the exit code ("exited 0"); rc alone when there is none
            tail = j.get("why") or (f"rc={j['rc']}" if j.get("rc") is not None else "")
        elif j.get("eta"):
            tail = f"ETA ~{fmt_clock(j['eta'], zone)}"
        else:
            tail = ""
        cells = (str(j["id"]), shown, str(j.get("position") or ""), est, mem, one_line(str(j.get("title") or ""), 40),
                 one_line(tail, 120))
        out.append(EntryRow(str(j["id"]), str(j.get("kind") or "job"), state, cells, j.get("log")))
    return out


def lock_lines(view: dict, zone: Zone) -> list[str]:
    out = []
    for lk in view.get("locks") or []:
        until = f" until ~{fmt_clock(lk['until'], zone)}" if lk.get("until") else ""
        waiting = lk.get("waiting") or []
        out.append(f"{lock_text(str(lk.get('lock') or '?'), 40)} held by {one_line(str(lk.get('holder') or '?'))}{until}"
                   + (f"; waiting: {', '.join(one_line(str(w)) for w in waiting)}" if waiting else ""))
    return out or ["no locks held"]


def spend_lines(view: dict, zone: Zone) -> list[str]:
    """Today's spend by agent session, dearest first, and their sum."""
    today = local_date(view.get("at") or 0, zone)
    rows = sorted((r for r in view.get("spend") or [] if r.get("day") == today),
                  key=lambda r: -(r.get("usd") or 0))
    if not rows:
        return ["no agent spend today"]
    total = ((view.get("status") or {}).get("budget") or {}).get("spend_today_usd")
    total = sum(r.get("usd") or 0 for r in rows) if total is None else total
    return [f"${r.get('usd') or 0:>7.2f}  {one_line(str(r.get('session') or '?'), 48)}" for r in rows] + \
           [f"${total:>7.2f}  today in all"]


def banner(mode: str, view: dict | None, zone: Zone, since: float | None = None) -> str:
    """The first line: where the view comes from. mode: live (the loop's watch), here (no loop:
    state.db read here), gone (the loop went away at `since`), old (a loop that does not serve
    watch), waiting (nothing yet)."""
    at = fmt_clock((view or {}).get("at") or 0, zone) if view else "?"
    if mode == "live":
        loop = (view or {}).get("loop") or {}
        last = loop.get("last_pass_at")
        return (f"res serve (pid {loop.get('pid', '?')}) · view of {at}"
                + (f" · last pass {fmt_clock(last, zone)}" if last else ""))
    if mode == "gone":
        return (f"the loop went away at {fmt_clock(since or 0, zone)}: showing state.db as of {at}; "
                "start it with res serve")
    if mode == "old":
        return f"this res serve does not stream views (older res): showing state.db as of {at}"
    if mode == "here":
        return f"no res serve running: showing state.db as of {at}; start it with res serve"
    return "waiting for the first view…"


# ---------------------------------------------------------------- what a key does on a row


@dataclass(frozen=True)
class Target:
    """The entry a key acts on: from the entries table, or a job's owner row."""
    id: str
    kind: str    # job, note
    state: str   # as res status says
    log: str | None


def release_args(t: Target | None) -> tuple[list[str] | None, str]:
    """(the CLI's arguments for `r`, the question to confirm) or (None, why not)."""
    if t is None:
        return None, "r releases a queued entry or a note: select one first"
    if t.state == "queued" or (t.kind == "note" and t.state in LIVE_STATES):
        return ["release", t.id], f"release {t.id}?"
    if t.state in LIVE_STATES:
        return None, f"{t.id} is running: s stops it"
    return None, f"{t.id} is {t.state}: nothing to release"


def stop_args(t: Target | None) -> tuple[list[str] | None, str]:
    if t is None:
        return None, "s stops a running job: select one first"
    if t.kind == "job" and t.state in LIVE_STATES:
        return ["release", t.id, "--stop"], f"stop {t.id}?"
    if t.state == "queued" or t.kind == "note":
        return None, f"{t.id} is {'a note' if t.kind == 'note' else 'queued'}: r releases it"
    return None, f"{t.id} is {t.state}: nothing to stop"


def game_args(view: dict | None) -> tuple[list[str], str]:
    on = (((view or {}).get("status") or {}).get("game") or {}).get("on")
    return (["game", "off"], "turn game mode off?") if on else (["game", "on"], "turn game mode on?")


def log_path(t: Target | None) -> tuple[str | None, str]:
    if t is None:
        return None, "l follows a job's log: select one first"
    if not t.log:
        return None, f"{t.id} has no log ({t.kind})"
    return t.log, f"following {escaped_path(t.log)}"


def outcome_line(argv: list[str], code: int, out: str, err: str) -> str:
    """The status bar after a command: `res release r-5 → exit 0: r-5 released`."""
    said = [ln for ln in (out + "\n" + err).splitlines() if ln.strip()]
    return f"res {' '.join(argv)} → exit {code}" + (f": {one_line(said[-1], 200)}" if said else "")


def log_text(chunk: str) -> str:
    """A log's text as the panel shows it: lines kept, every other control character (an escape
    sequence a job printed) made visible, so the log cannot drive the terminal."""
    return "\n".join("".join(c if c.isprintable() or c == "\t" else repr(c)[1:-1] for c in line)
                     for line in chunk.split("\n"))
