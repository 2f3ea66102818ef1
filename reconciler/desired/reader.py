"""Reading the desired-state files (DESIGN §2, §4): `desired/queue.toml` (requests) and
`desired/game.toml`, for every reconcile pass and for the commands that show them.

A missing file is a real empty state; a file that cannot be read or validated is never read as empty:
the pass gets the last good version and one line `<path>:<line>: <error>` naming the file, the line
and what is wrong. Files are opened without following symlinks, bounded in size, and must be UTF-8
(desired/disk.py); what they hold and how it is validated is desired/toml_in.py's, shared with the
writer.

Import-light (the hook and `res run` read these files): tomllib and pydantic (via models) are
imported inside the functions that need them.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.config.paths import Paths
from reconciler.desired.disk import Bad, decode, open_dir, read_bytes
from reconciler.desired.toml_in import parse_game, parse_queue

if TYPE_CHECKING:
    from reconciler.core.models import Desired, Game, Request


class DesiredError(Exception):
    """The writer could not make a change; the message is one line and nothing was changed."""


class DesiredRead:
    """What `read_desired` returns: the desired state, and the game file's error line (None if good);
    unpacks as that pair (`desired, game_error = read_desired(paths)`). `queue_text`: queue.toml's
    text when it read well (None: missing or broken), which the loop keeps as the last good version.

    The queue file's state is in `desired.queue_ok` / `desired.queue_error`."""

    __slots__ = ("desired", "game_error", "queue_text")

    def __init__(self, desired: "Desired", game_error: str | None, queue_text: str | None = None):
        self.desired, self.game_error, self.queue_text = desired, game_error, queue_text

    def __iter__(self):
        return iter((self.desired, self.game_error))


# ---------------------------------------------------------------- the reader


def _read_text(paths: Paths, target: Path) -> str | None:
    """The text of a desired file, None if it (or the state tree) does not exist. Raises Bad."""
    for d in (paths.root, paths.desired):
        if os.path.islink(d):
            raise Bad(f"{d} is a symlink; refusing to use it")
    try:
        dfd = open_dir(paths.desired)
    except FileNotFoundError:
        return None
    try:
        data = read_bytes(dfd, target.name)
    finally:
        os.close(dfd)
    return None if data is None else decode(data)


def read_queue(paths: Paths) -> list["Request"]:
    """The usable requests in queue.toml (sorted by id number); [] if the file does not exist.
    Raises DesiredError (one line `<path>:<line>: <error>`) if it cannot be read at all."""
    return read_queue_set_aside(paths)[0]


def read_queue_set_aside(paths: Paths) -> tuple[list["Request"], list[str]]:
    """(the usable requests, one line per entry set aside). Raises DesiredError like read_queue."""
    try:
        text = _read_text(paths, paths.queue)
        if text is None:
            return [], []
        _, requests, aside = parse_queue(text)
        return requests, [a.at(paths.queue) for a in aside]
    except Bad as b:
        raise DesiredError(b.at(paths.queue)) from None


def queue_requests(text: str) -> list["Request"]:
    """The usable requests of queue.toml text (the loop's last good copy); DesiredError if it
    cannot be read at all."""
    try:
        return parse_queue(text)[1]
    except Bad as b:
        raise DesiredError(b.at("queue.toml")) from None


def read_game(paths: Paths, last_good: "Game | None" = None) -> tuple["Game", str | None]:
    """(game, error line). A missing game.toml is game mode off; a broken one gives `last_good`
    (or off if there is none) and its error line."""
    from reconciler.core.models import Game

    try:
        text = _read_text(paths, paths.game)
        return (Game() if text is None else parse_game(text)[1]), None
    except Bad as b:
        return (last_good if last_good is not None else Game()), b.at(paths.game)


def read_desired(paths: Paths, last_good: "list[Request] | None" = None, last_good_game: "Game | None" = None) -> DesiredRead:
    """Read both desired files for one reconcile pass.

    read_desired(paths, last_good=None, last_good_game=None) -> DesiredRead(desired, game_error)

    * queue.toml missing: no requests, `queue_ok` True (a real empty state).
    * queue.toml unusable (bad TOML, cut off, empty, a wrong type, an unknown key, a duplicate or
      invalid id, a value the model rejects, a symlink, not a regular file, unreadable): never read as
      empty. `desired.requests` is `last_good` (or []), `queue_ok` False, and `queue_error` one line
      `<path>:<line>: <error>` (`<path>: <error>` when no line is to blame).
    * game.toml missing: game mode off. Unusable: `desired.game` is `last_good_game` (or off) and
      `game_error` is its one-line error; nothing is raised.

    Requests come sorted by id number: the order they were asked in (ids are allocated in order under
    the writer's lock), which is the FIFO order of the queue. Nothing here takes a lock: the writer
    replaces files atomically, so a reader sees a whole old file or a whole new one.
    """
    from reconciler.core.models import Desired

    game, game_error = read_game(paths, last_good_game)
    try:
        text = _read_text(paths, paths.queue)
        requests, aside = ([], []) if text is None else parse_queue(text)[1:]
    except Bad as b:
        desired = Desired(requests=list(last_good or []), queue_ok=False, queue_error=b.at(paths.queue), game=game,
                          game_ok=game_error is None)
        return DesiredRead(desired, game_error)
    return DesiredRead(Desired(requests=requests, game=game, game_ok=game_error is None,
                               set_aside=[a.at(paths.queue) for a in aside], held=[a.id for a in aside if a.id]),
                       game_error, text)
