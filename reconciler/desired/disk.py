"""The desired files on disk (DESIGN §4), for the reader and the writer: a file is opened relative
to an fd of its directory, never through a symlink, never blocking on a FIFO, refused unless it is a
regular file of sane size, not empty and UTF-8; it is replaced atomically (a temp file beside it,
fsync, rename, fsync of the directory), and by the writer only if it is still the file it read.

What is wrong with a file is a `Bad` (one line, and the line to blame when there is one): the reader
turns it into the pass's error line, the writer into a DesiredError that changes nothing.

Import-light (`res run` and the passes read through it).
"""
from __future__ import annotations

import errno
import os
import time
from pathlib import Path

MAX_FILE_BYTES = 8 << 20  # a desired file bigger than this is a mistake (thousands of entries), not a queue
# game.toml holds two keys: a big one is an attack on the writer (tomlkit takes seconds a megabyte).
MAX_BYTES = {"game.toml": 64 << 10}


class Bad(Exception):
    """A desired file that cannot be used: what is wrong, and the line if one is to blame."""

    def __init__(self, msg: str, line: int | None = None):
        super().__init__(msg)
        self.msg = " ".join(str(msg).split()) or "unreadable"  # always one line
        self.line = line

    def at(self, path: Path) -> str:
        return f"{path}:{self.line}: {self.msg}" if self.line else f"{path}: {self.msg}"


class Changed(Exception):
    """The file changed between being read and being replaced (see `replace_if_unchanged`)."""


# ---------------------------------------------------------------- reading


def open_dir(d: Path) -> int:
    """An fd of the directory `d`, refusing a symlink. FileNotFoundError if it does not exist."""
    try:
        return os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        if os.path.islink(d):
            raise Bad(f"{d} is a symlink; refusing to use it") from None
        raise Bad(f"{d}: {e.strerror}") from None


def read_bytes(dfd: int, name: str) -> bytes | None:
    """The file `name` in the directory `dfd`, or None if it does not exist. Never follows a symlink,
    never blocks on a FIFO, refuses anything but a regular file of sane size."""
    got = read_file(dfd, name)
    return None if got is None else got[0]


def ident(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def read_file(dfd: int, name: str) -> tuple[bytes, tuple[int, int, int, int]] | None:
    """read_bytes, and the file's identity (device, inode, size, mtime) when it was read."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Bad("is a symlink; refusing to read it") from None
        raise Bad(e.strerror or str(e)) from None
    from reconciler.config.files import FileProblem, read_fd

    try:
        data, st = read_fd(fd, MAX_BYTES.get(name, MAX_FILE_BYTES))
    except FileProblem as e:
        raise Bad(str(e)) from None
    finally:
        os.close(fd)
    if not data:
        # The writer never writes an empty file: zero bytes is what a crash or a cut-off save leaves.
        raise Bad("the file is empty (cut off?); delete it if nothing is wanted, or restore it", 1)
    return data, ident(st)


def decode(data: bytes) -> str:
    """The file's text; Bad (with the line) if it is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Bad("not valid UTF-8", data[: e.start].count(b"\n") + 1) from None


# ---------------------------------------------------------------- writing


def write_atomic(dfd: int, name: str, data: bytes, durable: bool = True) -> None:
    """Replace `name` in the directory `dfd` with `data`: a 0600 temp file in the same directory,
    fsync, rename over, fsync the directory. A reader sees the old file or the new one, never a mix."""
    tmp = f".{name}.tmp-{os.getpid()}-{time.monotonic_ns()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise
    if durable:
        os.fsync(dfd)


def replace_if_unchanged(dfd: int, name: str, was: tuple[int, int, int, int] | None, data: bytes) -> None:
    """Replace the file with `data` (write_atomic) if it is still the one read (`was`, its `ident`;
    None: it did not exist), else Changed. An editor saving meanwhile does not take the writer's lock:
    the writer then starts over from the new file."""
    try:
        now = ident(os.stat(name, dir_fd=dfd, follow_symlinks=False))
    except FileNotFoundError:
        now = None
    if now != was:
        raise Changed()
    write_atomic(dfd, name, data)
