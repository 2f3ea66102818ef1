"""The last good version of each desired file (DESIGN §2 step 2), for the passes and `res status`
while a file is broken: the queue's as the text of the last queue.toml that read well, a file beside
state.db (`Paths.last_good_queue`), read back with the reader; the game's as its JSON in state.db.
Each is written only when it changed. res before 2026-12 kept both in one state.db value
(`desired_last_good`): read from there until the first save, then dropped."""
from __future__ import annotations

import json
import logging
import os

from reconciler.config.paths import Paths
from reconciler.core.models import Game, Request, dump, parse

log = logging.getLogger("res.tick")

GAME_KEY = "desired_last_good_game"
OLD_KEY = "desired_last_good"


def save_queue(paths: Paths, store, text: str) -> None:
    """Keep `text` as the last good queue.toml. A cache: no fsync (nothing is started or stopped
    while queue.toml is broken anyway), and what cannot be written there (a full disk, a directory
    planted at its path) is logged and retried next pass, never a pass stopped."""
    from reconciler.desired.disk import write_atomic

    if store.memo.get("last_good_queue") == text:
        return
    path = paths.last_good_queue
    try:
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            write_atomic(dfd, path.name, text.encode("utf-8"), durable=False)
        finally:
            os.close(dfd)
    except OSError as e:
        log.warning("could not keep the last good queue.toml in %s: %s", path, e.strerror or e)
        return
    store.memo["last_good_queue"] = text
    if store.get_meta(OLD_KEY) is not None:
        store.delete_meta(OLD_KEY)


def save_game(store, game: Game) -> None:
    if store.memo.get("last_good_game") == game:
        return
    text = json.dumps(dump(game))
    if store.get_meta(GAME_KEY) != text:
        store.set_meta(GAME_KEY, text)
    store.memo["last_good_game"] = game


def requests(paths: Paths, store) -> list[Request]:
    """The requests of the last queue.toml that read well: none when there is no such copy, or when
    it cannot be read either."""
    from reconciler.config.files import FileProblem, read_regular
    from reconciler.desired.disk import MAX_FILE_BYTES
    from reconciler.desired.reader import DesiredError, queue_requests

    try:
        data = read_regular(paths.last_good_queue, MAX_FILE_BYTES, follow=False)
    except FileProblem:
        data = None
    if data is None:
        return [parse(Request, r) for r in _old(store).get("requests", [])]
    try:
        return queue_requests(data.decode("utf-8"))
    except (DesiredError, UnicodeDecodeError):
        return []


def game(store) -> Game | None:
    """The last good game setting, None if none was kept."""
    text = store.get_meta(GAME_KEY)
    saved = json.loads(text) if text is not None else _old(store).get("game")
    return parse(Game, saved) if saved else None


def _old(store) -> dict:
    try:
        return json.loads(store.get_meta(OLD_KEY) or "{}")
    except ValueError:
        return {}
