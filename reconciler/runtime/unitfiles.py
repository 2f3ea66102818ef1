"""The user manager's unit files on disk: where they go, writing and removing the ones res renders
(render/unitfiles.py), and what decides whether the slices' files need rendering again."""
from __future__ import annotations

import os
from pathlib import Path

from reconciler.render.unitfiles import MARK, SLICE_TEMPLATES, ours


def user_unit_dir() -> Path:
    """Where the user's own unit files go: $XDG_CONFIG_HOME/systemd/user (~/.config/systemd/user),
    the first persistent directory of a user manager's search path (systemd.unit(5))."""
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config) / "systemd" / "user"


def _current(path: Path, verb: str) -> str | None:
    """The unit file's text, None if there is none; a symlink is the user's arrangement: refused."""
    if path.is_symlink():
        raise OSError(f"{path} is a symlink; refusing to {verb} it")
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def install_unit(directory: Path, name: str, text: str) -> bool:
    """Write unit file `name` if its content differs; True when it changed (a daemon-reload is then
    due). Atomic (a temp file of its own, then rename). An existing file that res did not write (no
    MARK at its top), or that is a symlink, is the user's own: refused with one line, never replaced."""
    import tempfile

    if "/" in name or name.startswith("."):
        raise ValueError(f"not a unit name: {name!r}")
    if not ours(text):
        raise ValueError(f"{name}: the rendered text lacks {MARK!r}")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    current = _current(path, "replace")
    if current == text:
        return False
    if current is not None and not ours(current):
        raise OSError(f"{path} was not written by res; move it away to let res manage it")
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".res-tmp", dir=directory)  # O_EXCL: no sharing
    try:
        os.fchmod(fd, 0o644)
        os.write(fd, text.encode())
        os.fsync(fd)
        os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.close(fd)
        except OSError:
            pass
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return True


def remove_unit(directory: Path, name: str) -> bool:
    """Remove unit file `name` if it is there and res wrote it (a symlink or the user's own file is
    refused with one line); True if removed."""
    path = directory / name
    current = _current(path, "remove")
    if current is None:
        return False
    if not ours(current):
        raise OSError(f"{path} was not written by res; leaving it")
    os.unlink(path)
    return True


OOMD_PATHS = ("/lib/systemd/systemd-oomd", "/usr/lib/systemd/systemd-oomd")


def oomd_present() -> bool:
    """systemd-oomd is on this machine (it then acts on ManagedOOMMemoryPressure= of a slice)."""
    return any(os.path.exists(p) for p in OOMD_PATHS)


def slice_units_key(policy, ram_gb: float, oomd: bool) -> str:
    """Everything the slices' unit files depend on, templates included (by size and mtime): while it
    is the same, the texts rendered last time are still right, and jinja2 need not load (a one-shot
    `res run` would pay ~80 ms for it)."""
    import json

    from reconciler.core.game import slice_target
    from reconciler.core.models import Game
    from reconciler.config.resources import shipped

    stats = [(st.st_size, st.st_mtime_ns) for st in (os.stat(shipped("templates/units") / t) for t in SLICE_TEMPLATES)]
    return json.dumps([policy.agents_slice, policy.jobs_slice, slice_target(policy.rules(), Game(), 0.0, ram_gb, 0.0), oomd, stats])
