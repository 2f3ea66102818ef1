"""Game mode on or off, as `res game on|off` and the page's buttons both do it: one rule for how long
`on` lasts and that `on` while on extends, never shortens."""
from __future__ import annotations

from reconciler.config.paths import Paths


def set_game(writer, paths: Paths, policy, on: bool, now: float, length_s: int | None = None) -> float | None:
    """Writes game.toml through `writer` (desired.writer.Writer, or a copy with its own `who`); returns
    the end given (None: off). `length_s`: how long (default: the policy's game_hours). Raises
    DesiredError when it could not be written."""
    from reconciler.desired.reader import read_game

    if not on:
        writer.set_game(False, None)
        return None
    until = now + (length_s if length_s is not None else int(policy.game_hours * 3600))
    game, _ = read_game(paths)
    if game.active(now) and game.until and game.until > until:
        until = game.until  # `on` while on extends, never shortens
    writer.set_game(True, until)
    return until
