"""What `res init` lays down in the desired directory (DESIGN §2): the shipped annotated templates
(`state/queue.toml`, `state/game.toml`; a one-line stand-in when they are not found), the queue's with
its id counter carried on, and the file a template replaces kept beside it as `<name>.bak-<epoch>`.
The writer also starts from a template when it edits a file that does not exist yet.
`Writer.init` is the edit that uses these (under the writer's lock)."""
from __future__ import annotations

import os
import time
from pathlib import Path

from reconciler.desired.reader import DesiredError
from reconciler.desired.toml_out import set_next_id


def template(name: str) -> str:
    """The shipped template of the desired file `name` (queue.toml or game.toml)."""
    from reconciler.config.resources import shipped

    path = shipped("state") / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        if name == "queue.toml":
            return "# res: desired state, the request queue (the annotated template was not found)\nnext_id = 1\n"
        return "# res: desired state, game mode (the annotated template was not found)\non = false\n"


def queue_template(next_id: int) -> str:
    """The queue.toml template, its counter at `next_id` (ids already given out are not given again)."""
    text = template("queue.toml")
    if next_id > 1:
        edited = set_next_id(text, next_id)
        if edited is None:  # pragma: no cover - the shipped template is plain
            raise DesiredError("template queue.toml: cannot set next_id")
        text = edited
    return text


def move_aside(dfd: int, name: str, target: Path) -> None:
    """Rename `name` (in the directory `dfd`, shown as `target`) to a free `<name>.bak-<epoch>[-i]`
    beside it; DesiredError (nothing changed) if it cannot be moved."""
    backup = f"{name}.bak-{int(time.time())}"
    for i in range(1, 1000):
        try:
            os.stat(backup, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            break
        backup = f"{name}.bak-{int(time.time())}-{i}"
    try:
        os.rename(name, backup, src_dir_fd=dfd, dst_dir_fd=dfd)
    except OSError as e:
        raise DesiredError(f"{target}: could not move it aside ({e.strerror}); nothing was changed") from None
