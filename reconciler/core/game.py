"""Game mode (DESIGN §5.6): the agents slice's target values, its actions, and the shortfall line. Pure."""
from __future__ import annotations

from reconciler.core.capacity import Capacity, freed_by, reserves
from reconciler.core.models import Action, Desired, Game, World
from reconciler.core.quantities import GIB, fmt_clock, fmt_gb, fmt_span, quoted

GAME_WEIGHT = 5
NORMAL_WEIGHT = 20
# MemoryHigh is rounded up to this, so a slice whose use grows past the game target is not re-set
# on every pass for a few pages more.
MEMORY_HIGH_STEP = 256 * 1024 * 1024
UNSET = 1 << 63  # systemd reports an unset weight or limit as UINT64_MAX; anything this big is "unset"


def slice_target(policy, game: Game, now: float, ram_gb: float, slice_used_gb: float) -> dict[str, int]:
    """What the agents slice should be set to: game on yields CPU/IO and keeps memory for the user
    without squeezing what agents already use; off (or expired) gives the normal share back."""
    reserve_gb, _, on = reserves(policy, game, now, 1)
    if on:
        high = max(ram_gb - reserve_gb, slice_used_gb)
        weight = GAME_WEIGHT
    else:
        high = ram_gb - reserve_gb
        weight = NORMAL_WEIGHT
    steps = -(-int(max(high, 0) * GIB) // MEMORY_HIGH_STEP)  # ceiling
    return {"CPUWeight": weight, "IOWeight": weight, "MemoryHigh": max(steps, 1) * MEMORY_HIGH_STEP}


def _shown(key: str, value: int | None) -> str:
    if value is None or value >= UNSET:
        return "max" if key == "MemoryHigh" else "default"
    return fmt_gb(value / GIB) if key == "MemoryHigh" else str(value)


def slice_values(values: dict[str, int | None]) -> str:
    """`MemoryHigh 17.8 GB, CPUWeight 20, IOWeight 20` (unset ones as systemd means them)."""
    return ", ".join(f"{key} {_shown(key, values.get(key))}" for key in ("MemoryHigh", "CPUWeight", "IOWeight"))


def slice_diff(current: dict[str, int | None], target: dict[str, int]) -> str | None:
    """`MemoryHigh 18.0 GB → 12.0 GB, CPUWeight 20 → 5`, or None when nothing differs."""
    parts = [f"{key} {_shown(key, current.get(key))} → {_shown(key, target[key])}"
             for key in ("MemoryHigh", "CPUWeight", "IOWeight") if key in target and current.get(key) != target[key]]
    return ", ".join(parts) or None


def game_actions(desired: Desired, world: World, now: float, policy) -> list[Action]:
    """Game mode's time is up → clear it in game.toml; the agents slice differs from what game mode
    (on or off) wants → set it. Nothing when the slice could not be observed."""
    game = desired.game
    acts = []
    if desired.game_ok and game.on and game.until is not None and now >= game.until:
        acts.append(Action(kind="end_game", id="game.toml", at=game.until,
                           reason=f"game mode ended at {fmt_clock(game.until)}; clearing it"))
    s = world.agents_slice
    if s is None:
        return acts
    target = slice_target(policy, game, now, world.mem_total_gb, s.mem_used_gb)
    diff = slice_diff({"CPUWeight": s.cpu_weight, "IOWeight": s.io_weight, "MemoryHigh": s.memory_high}, target)
    if diff:
        why = (f"game on until {fmt_clock(game.until)}" if game.until else "game on") if game.active(now) else "game off"
        acts.append(Action(kind="set", id=s.name, props=target, reason=f"{diff} ({why})"))
    return acts


def game_lines(policy, game: Game, world: World | None, holding, now: float) -> list[str]:
    """`res game status` and the game part of `res status`: on/off with the time left, and while on
    the shortfall line when agents still hold part of the reserve (`world`: the last pass's view)."""
    from reconciler.core.capacity import capacity

    if not game.active(now):
        ended = f" (ended {fmt_clock(game.until)})" if game.on and game.until else ""
        return [f"game off{ended}"]
    lines = [on_line(game.until, now) if game.until else "game on (no end set); CPU/IO now yours"]
    if world is not None:
        short = shortfall_line(capacity(policy, game, world, list(holding), now), now)
        if short:
            lines.append(short)
    return lines


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
