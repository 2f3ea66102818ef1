"""Game mode (DESIGN §5.6): the agents slice's target values and the shortfall line. Pure."""
from __future__ import annotations

from .capacity import Capacity, freed_by
from .models import Game
from .render import quoted
from .units import GIB, fmt_clock, fmt_gb, fmt_span

GAME_WEIGHT = 5
NORMAL_WEIGHT = 20


def slice_target(policy, game: Game, now: float, ram_gb: float, slice_used_gb: float) -> dict[str, int]:
    """What the agents slice should be set to: game on yields CPU/IO and keeps memory for the user
    without squeezing what agents already use; off (or expired) gives the normal share back."""
    if game.active(now):
        high = max(ram_gb - policy.game_reserve_gb, slice_used_gb)
        weight = GAME_WEIGHT
    else:
        high = ram_gb - policy.user_reserve_gb
        weight = NORMAL_WEIGHT
    return {"CPUWeight": weight, "IOWeight": weight, "MemoryHigh": int(max(high, 0) * GIB)}


def slice_diff(current: dict[str, int], target: dict[str, int]) -> str | None:
    """`MemoryHigh 18.0 GB → 12.0 GB, CPUWeight 20 → 5`, or None when nothing differs."""
    parts = []
    for key in ("MemoryHigh", "CPUWeight", "IOWeight"):
        if current.get(key) != target[key]:
            if key == "MemoryHigh":
                was = current.get(key)
                parts.append(f"MemoryHigh {fmt_gb(was / GIB) if isinstance(was, int) else '?'} → {fmt_gb(target[key] / GIB)}")
            else:
                parts.append(f"{key} {current.get(key, '?')} → {target[key]}")
    return ", ".join(parts) or None


def on_line(until: float, now: float) -> str:
    return f"game on until {fmt_clock(until)} ({fmt_span(until - now)}); CPU/IO now yours"


def shortfall_line(cap: Capacity, now: float) -> str | None:
    """With the game reserve in force: how much of it agents still hold, who, and when it is expected
    free (jobs are never stopped or squeezed for it). None when the reserve is free now."""
    short = -cap.mem_gb
    if short <= 1e-9:
        return None
    holders, when = freed_by(cap, 0.0, 0.0, now)
    who = ", ".join(f"{quoted(h.title, 30)} ({h.id}) until ~{fmt_clock(h.eta)}" if h.eta and not h.overdue
                    else f"{quoted(h.title, 30)} ({h.id}) overdue" for h in holders)
    expected = f"full reserve expected free ~{fmt_clock(when)}" if when is not None else "the rest is in use outside res"
    return f"reserve short by {fmt_gb(short)}" + (f": held by {who}" if who else "") + f"; {expected}"
