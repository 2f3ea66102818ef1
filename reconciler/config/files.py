"""Reading a file any agent may have replaced (the policy, the pricing override): it must be a regular
file of sane size, and is never waited on. Import-light."""
from __future__ import annotations

import errno
import os
import stat


class FileProblem(Exception):
    """The file cannot be used; the message is one line naming it."""


def read_regular(path, limit: int, follow: bool = True) -> bytes | None:
    """The bytes of `path`, or None if it does not exist. A FIFO, a device (`/dev/zero`,
    `/dev/stdin`), a directory or a file over `limit` bytes is a FileProblem, found without blocking
    and without reading more than `limit` + 1 bytes. `follow` False also refuses a symlink."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise FileProblem(f"{path}: is a symlink; refusing to read it") from None
        raise FileProblem(f"{path}: {e.strerror}") from None
    try:
        return read_fd(fd, limit)[0]
    except FileProblem as e:
        raise FileProblem(f"{path}: {e}") from None
    finally:
        os.close(fd)


def read_fd(fd: int, limit: int) -> tuple[bytes, os.stat_result]:
    """(the bytes, the stat) of an open file that must be regular and at most `limit` bytes; a
    FileProblem (without the path: the caller names it) otherwise."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileProblem("not a regular file")
        if st.st_size > limit:
            raise FileProblem(f"too large ({st.st_size} bytes; at most {limit})")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                raise FileProblem(f"too large (more than {limit} bytes)")
            chunks.append(chunk)
        return b"".join(chunks), st
    except OSError as e:
        raise FileProblem(e.strerror or str(e)) from None


def read_text(path, limit: int, follow: bool = True) -> str | None:
    """read_regular, decoded as UTF-8 (a FileProblem naming the line if it is not)."""
    data = read_regular(path, limit, follow)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise FileProblem(f"{path}:{line}: not valid UTF-8") from None


def digest(data: bytes) -> str:
    """The content digest the writer notes and the change tracking compares (blake2b, 20 bytes)."""
    try:
        from _blake2 import blake2b  # cheap to import; hashlib pulls in OpenSSL (~15 ms)
    except ImportError:  # pragma: no cover
        from hashlib import blake2b
    return blake2b(data, digest_size=20).hexdigest()
