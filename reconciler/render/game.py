"""Game mode's lines (DESIGN §5.6): the slice's values, on/off with the time left, the shortfall."""
from __future__ import annotations

from reconciler.core.capacity import capacity
from reconciler.core.rules import Rules
from reconciler.core.game import UNSET, reserve_shortfall, slice_changes
from reconciler.core.models import Game, World
from reconciler.core.quantities import GIB, Zone
from reconciler.render.text import fmt_clock, fmt_gb, fmt_span, quoted


def _shown(key: str, value: int | None) -> str:
    if value is None or value >= UNSET:
        return "max" if key == "MemoryHigh" else "default"
    return fmt_gb(value / GIB) if key == "MemoryHigh" else str(value)


def slice_values(values: dict[str, int | None]) -> str:
    """`MemoryHigh 17.8 GB, CPUWeight 20, IOWeight 20` (unset ones as systemd means them)."""
    return ", ".join(f"{key} {_shown(key, values.get(key))}" for key in ("MemoryHigh", "CPUWeight", "IOWeight"))


def changes_text(changes: dict[str, list]) -> str:
    """`MemoryHigh 18.0 GB → 12.0 GB, CPUWeight 20 → 5` (core.game.slice_changes)."""
    return ", ".join(f"{key} {_shown(key, was)} → {_shown(key, to)}" for key, (was, to) in changes.items())


def slice_diff(current: dict[str, int | None], target: dict[str, int]) -> str | None:
    """The differences of the slice's values from its target as text, or None when nothing differs."""
    return changes_text(slice_changes(current, target)) or None


def game_lines(policy: Rules, game: Game, world: World | None, holding, now: float, zone: Zone) -> list[str]:
    """`res game status` and the game part of `res status`: on/off with the time left, and while on
    the shortfall line when agents still hold part of the reserve (`world`: the last pass's view)."""
    if not game.active(now):
        ended = f" (ended {fmt_clock(game.until, zone)})" if game.on and game.until else ""
        return [f"game off{ended}"]
    lines = [on_line(game.until, now, zone) if game.until else "game on (no end set); CPU/IO now yours"]
    if world is not None:
        short = shortfall_line(capacity(policy, game, world, list(holding), now), now, zone)
        if short:
            lines.append(short)
    return lines


def on_line(until: float, now: float, zone: Zone) -> str:
    return f"game on until {fmt_clock(until, zone)} ({fmt_span(until - now)}); CPU/IO now yours"


def shortfall_line(cap, now: float, zone: Zone) -> str | None:
    """`reserve short by 3.0 GB: held by "dotnet e2e" (r-4) until ~14:40; full reserve expected free
    ~14:40` (core.game.reserve_shortfall), or None when the reserve is free now."""
    s = reserve_shortfall(cap, now)
    if s is None:
        return None
    who = ", ".join(f"{quoted(h.title, 30)} ({h.id}) until ~{fmt_clock(h.eta, zone)}" if h.eta and not h.overdue
                    else f"{quoted(h.title, 30)} ({h.id}) overdue" for h in s["holders"])
    when = s["free_at"]
    expected = f"full reserve expected free ~{fmt_clock(when, zone)}" if when is not None else "the rest is in use outside res"
    return f"reserve short by {fmt_gb(s['short_gb'])}" + (f": held by {who}" if who else "") + f"; {expected}"
