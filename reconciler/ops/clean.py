"""`res clean`: agent scratch and /tmp litter (its failed `res-*` units: ops/failedunits.py).

Three parts, like the rest of the project:

- facts: `collect()` walks one root and returns plain `Entry` records (path, kind, size, newest mtime,
  owner, live flag, ...). It never follows a symlink and never leaves its root: every directory is
  opened relative to its parent's descriptor with O_NOFOLLOW, and checked to be the inode that lstat
  saw, on the root's file system.
- rules: `select()` is pure: entries, the time, the uid and the staleness threshold in, the removals
  with their reasons out. Every rule below lives there.
- acts: `sweep()` removes what `select()` chose, re-checking each entry right before it goes.

The rules, and what Claude Code keeps in /tmp/claude-<uid>/, are in core/clean.py.

Sweep: right before an entry goes it is looked up again through descriptors; it is kept when it is
gone, is another inode than the one scanned, changed owner, or its newest mtime moved (a file that
changed during the sweep keeps its whole entry). While a tree is removed, each entry is checked
once more and anything fresh or foreign is left with its parents. Races (ENOENT, ENOTEMPTY, ...) are
skipped, never raised.
"""
from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import re
import stat
from typing import Callable, Iterable, Iterator, NamedTuple

from reconciler.core.agents import is_session
from reconciler.core.clean import (LITTER, LITTER_SKIP, PATTERN_FILE, PROJECT, SCRATCH, Entry, Live, Outcome, Removal,
                                   Root, parse_patterns, select, slug)
from reconciler.core.clean import under as is_under
from reconciler.render.clean import pattern_error, render_outcomes, render_plan
from reconciler.render.text import escaped_path as show

MAX_DEPTH = 256  # deeper trees are kept (and a descriptor per level stays within limits)
MAX_PID_FILE = 32
MAX_PATTERN_FILE = 64 * 1024
LONG_SLUG = 200  # Claude Code shortens longer slugs; these match by prefix

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_PID_TEXT = re.compile(rb"^\s*([0-9]{1,10})\s*$")


# ---------------------------------------------------------------------------------------- project patterns

def read_patterns(project_dir: str, uid: int) -> tuple[Root | None, list[str]]:
    """The project root with its patterns from `<project_dir>/.res-clean`, or None (no file, or one
    that is a symlink, not the user's, not a regular file or too big: named in an error line)."""
    source = os.path.join(project_dir, PATTERN_FILE)
    try:
        data = _read_regular(source, MAX_PATTERN_FILE + 1,
                             ok=lambda st: st.st_uid == uid and st.st_size <= MAX_PATTERN_FILE)
    except FileNotFoundError:
        return None, []
    except OSError as e:
        return None, [f"{show(source)}: {e.strerror}"]
    if data is None:
        return None, [f"{show(source)}: not a regular file of yours under {MAX_PATTERN_FILE // 1024} KB; ignored"]
    patterns, refused = parse_patterns(data.decode("utf-8", "replace"))
    errors = [pattern_error(show(source), e) for e in refused]
    if not patterns:
        return None, errors
    return Root(project_dir, PROJECT, tuple(patterns), source), errors


# ---------------------------------------------------------------------------------------- facts (I/O)

def pid_alive(pid: int) -> bool:
    """The one rule of a live process (observed/procs.alive: a zombie holds nothing)."""
    from reconciler.observed.procs import alive

    return alive(pid)


def default_roots(uid: int, tmp: str = "/tmp", var_tmp: str = "/var/tmp") -> list[Root]:
    return [Root(os.path.join(tmp, f"claude-{uid}"), SCRATCH), Root(tmp, LITTER), Root(var_tmp, LITTER)]


def live_processes(under: Iterable[str] = (), proc: str = "/proc") -> Live:
    """Read what running processes hold. Paths are kept only when under one of `under` (real paths);
    processes that vanish or cannot be read are skipped; no /proc at all gives Live(ok=False)."""
    tops = [os.path.realpath(u) for u in under]
    paths, slugs, sessions = set(), set(), set()
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return Live(ok=False)

    def keep(p: str) -> None:
        if p.endswith(" (deleted)"):
            p = p[: -len(" (deleted)")]
        if p.startswith("/") and any(is_under(p, t) for t in tops):
            paths.add(p)

    for pid in pids:
        base = os.path.join(proc, pid)
        try:
            cwd = os.readlink(os.path.join(base, "cwd"))
        except OSError:
            continue  # gone, a kernel thread, or not ours to read
        keep(cwd)
        try:
            for fd in os.listdir(os.path.join(base, "fd")):
                try:
                    keep(os.readlink(os.path.join(base, "fd", fd)))
                except OSError:
                    pass
        except OSError:
            pass
        try:
            with open(os.path.join(base, "comm"), "rb") as f:
                comm = f.read().strip()
            with open(os.path.join(base, "cmdline"), "rb") as f:
                argv = [a.decode("utf-8", "surrogateescape") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if not is_session(comm.decode("utf-8", "surrogateescape"), argv):
            continue
        slugs.add(slug(cwd))
        try:
            with open(os.path.join(base, "environ"), "rb") as f:
                for var in f.read().split(b"\0"):
                    if var.startswith(b"PWD=/"):
                        slugs.add(slug(var[4:].decode("utf-8", "surrogateescape")))
        except OSError:
            pass
        for i, a in enumerate(argv):
            for flag in ("--session-id", "--resume", "-r"):
                if a == flag and i + 1 < len(argv):
                    sessions.add(argv[i + 1])
                elif a.startswith(flag + "="):
                    sessions.add(a[len(flag) + 1:])
    return Live(frozenset(paths), frozenset(slugs), frozenset(sessions))


class _Tree(NamedTuple):
    size: int
    newest: float
    empty: bool
    hazard: str


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "link"
    return "other"


def _open_dir(name: str, dir_fd: int | None, expect: os.stat_result | None = None) -> int:
    """Open a directory without following a symlink; with `expect`, it must be that inode."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    if expect is not None:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (expect.st_dev, expect.st_ino):
            os.close(fd)
            raise OSError(errno.ESTALE, "replaced while looked at")
    return fd


@contextlib.contextmanager
def _closing_fd(fd: int) -> Iterator[int]:
    """`with _closing_fd(_open_dir(...)) as fd:` closes the descriptor when the block is left."""
    try:
        yield fd
    finally:
        os.close(fd)


def _read_regular(name: str, most: int, dir_fd: int | None = None,
                  ok: Callable[[os.stat_result], bool] = lambda st: True) -> bytes | None:
    """At most `most` bytes of the file `name`, opened without following a symlink (and without
    blocking); None, nothing read, when it is not a regular file or `ok(its fstat)` is false.
    OSError is raised."""
    fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    with _closing_fd(fd):
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not ok(st):
            return None
        return os.read(fd, most)


def _measure(fd: int, st: os.stat_result, owner: int, depth: int, children: list | None = None) -> _Tree:
    """Size, newest mtime and hazards of the directory open as `fd` and everything beneath it.
    With `children`, (name, lstat, _Tree) of each direct child is appended to it."""
    size, newest, empty, hazard = st.st_blocks * 512, st.st_mtime, True, ""
    if depth > MAX_DEPTH:
        return _Tree(size, newest, False, "deeper than %d levels" % MAX_DEPTH)
    try:
        with os.scandir(fd) as it:
            for de in it:
                empty = False
                try:
                    cst = de.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if stat.S_ISDIR(cst.st_mode):
                    if cst.st_dev != st.st_dev:
                        sub = _Tree(0, cst.st_mtime, False, "holds a mount point")
                    else:
                        sub = _measure_child(de.name, fd, cst, owner, depth + 1)
                        if sub is None:
                            continue
                else:
                    other = ("holds a socket, FIFO or device"
                             if not (stat.S_ISREG(cst.st_mode) or stat.S_ISLNK(cst.st_mode)) else "")
                    sub = _Tree(cst.st_blocks * 512, cst.st_mtime, False, other)
                if cst.st_uid != owner and not sub.hazard:
                    sub = sub._replace(hazard=f"holds files of uid {cst.st_uid}")
                size += sub.size
                newest = max(newest, sub.newest)
                hazard = hazard or sub.hazard
                if children is not None:
                    children.append((de.name, cst, sub))
    except OSError as e:
        return _Tree(size, newest, False, hazard or f"cannot read inside: {e.strerror}")
    return _Tree(size, newest, empty, hazard)


def _measure_child(name: str, dir_fd: int, st: os.stat_result, owner: int, depth: int,
                   children: list | None = None) -> _Tree | None:
    """_measure of the subdirectory `name` of `dir_fd` (opened without following links, checked to be
    the inode `st`); None if it vanished meanwhile."""
    try:
        cfd = _open_dir(name, dir_fd, st)
    except FileNotFoundError:
        return None
    except OSError as e:
        return _Tree(st.st_blocks * 512, st.st_mtime, False, f"cannot read inside: {e.strerror}")
    with _closing_fd(cfd):
        return _measure(cfd, st, owner, depth, children)


def _entry(root: Root, rel: tuple, st: os.stat_result, tree: _Tree, live: bool, **kw) -> Entry:
    return Entry(path=os.path.join(root.path, *rel), rel=rel, root=root.path, root_kind=root.kind,
                 kind=_kind(st.st_mode), size=tree.size, newest=tree.newest, owner=st.st_uid,
                 ident=(st.st_dev, st.st_ino), live=live, empty=tree.empty, hazard=tree.hazard, **kw)


def _leaf(st: os.stat_result) -> _Tree:
    hazard = "" if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode) else "a socket, FIFO or device"
    return _Tree(st.st_blocks * 512, st.st_mtime, False, hazard)


def _open_root(root: Root, uid: int) -> tuple[int, os.stat_result]:
    fd = _open_dir(root.path, None)
    st = os.fstat(fd)
    if root.kind != LITTER and st.st_uid != uid:
        os.close(fd)
        raise PermissionError(errno.EPERM, f"owned by uid {st.st_uid}, not {uid}")
    return fd, st


def collect(root: Root, uid: int, live: Live, pid_alive: Callable[[int], bool] = pid_alive) -> tuple[list[Entry], list[str]]:
    """Entries of one root as plain data, and lines about a root that was skipped. Never raises for
    what it finds on disk."""
    try:
        fd, rst = _open_root(root, uid)
    except FileNotFoundError:
        return [], []
    except OSError as e:
        return [], [f"skipped {show(root.path)}: {e.strerror or e}"]
    try:
        real = os.path.realpath(root.path)

        def is_live(rel: tuple) -> bool:
            if not live.ok:
                return True
            p = os.path.join(real, *rel)
            return any(is_under(q, p) for q in live.paths) or rel[-1] in live.session_ids

        if root.kind == SCRATCH:
            return _collect_scratch(root, fd, rst, live, is_live), []
        if root.kind == LITTER:
            return _collect_litter(root, fd, rst, live, is_live, pid_alive), []
        return _collect_project(root, fd, rst, is_live), []
    except OSError as e:
        return [], [f"skipped {show(root.path)}: {e.strerror or e}"]
    finally:
        os.close(fd)


def _slug_live(name: str, live: Live) -> bool:
    return name in live.slugs or any(len(s) > LONG_SLUG and name.startswith(s[:LONG_SLUG]) for s in live.slugs)


def _collect_scratch(root, fd, rst, live, is_live) -> list[Entry]:
    """Each top-level entry, and each child of a top-level directory (one walk of the tree)."""
    out = []
    with os.scandir(fd) as it:
        names = [de.name for de in it]
    for name in names:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        kids: list = []
        if not stat.S_ISDIR(st.st_mode):
            tree = _leaf(st)
        elif st.st_dev != rst.st_dev:
            tree = _Tree(0, st.st_mtime, False, "a mount point")
        else:
            tree = _measure_child(name, fd, st, st.st_uid, 1, kids)
            if tree is None:
                continue
        children = [_entry(root, (name, k), kst, ktree, is_live((name, k))) for k, kst, ktree in kids]
        parent_live = is_live((name,)) or _slug_live(name, live) or any(c.live for c in children)
        out.append(_entry(root, (name,), st, tree, parent_live))
        out.extend(children)
    return out


def _collect_litter(root, fd, rst, live, is_live, alive) -> list[Entry]:
    out = []
    with os.scandir(fd) as it:
        names = [de.name for de in it]
    for name in names:
        if LITTER_SKIP.match(name):
            continue
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            if st.st_mode & stat.S_ISVTX or st.st_dev != rst.st_dev:
                continue
            try:
                with _closing_fd(_open_dir(name, fd, st)) as cfd, os.scandir(cfd) as it:
                    empty = next(iter(it), None) is None
            except OSError:
                continue
            tree = _Tree(st.st_blocks * 512 if empty else 0, st.st_mtime, empty, "")
            out.append(_entry(root, (name,), st, tree, is_live((name,))))
        elif stat.S_ISREG(st.st_mode) and name.endswith(".pid") and st.st_size <= MAX_PID_FILE:
            pid = _read_pid(name, fd, st)
            out.append(_entry(root, (name,), st, _leaf(st), is_live((name,)), pid=pid,
                              pid_alive=None if pid is None else alive(pid)))
    return out


def _read_pid(name: str, dir_fd: int, st: os.stat_result) -> int | None:
    try:
        data = _read_regular(name, MAX_PID_FILE + 1, dir_fd,
                             ok=lambda fst: (fst.st_dev, fst.st_ino) == (st.st_dev, st.st_ino))
    except OSError:
        return None
    m = None if data is None else _PID_TEXT.match(data)
    return int(m.group(1)) if m else None


def _collect_project(root, fd, rst, is_live) -> list[Entry]:
    found: dict[tuple, Entry] = {}
    for pattern in root.patterns:
        dirs_only = pattern.endswith("/")
        names = pattern.rstrip("/").split("/")
        _match(root, fd, rst, (), names, dirs_only, pattern, is_live, found)
    return list(found.values())


def _match(root, fd, dst, rel, names, dirs_only, pattern, is_live, found) -> None:
    try:
        with os.scandir(fd) as it:
            hits = [de.name for de in it if de.name not in (".git", PATTERN_FILE) and fnmatch.fnmatchcase(de.name, names[0])]
    except OSError:
        return
    for name in sorted(hits):
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        is_dir = stat.S_ISDIR(st.st_mode)
        if len(names) > 1 or is_dir:
            if not is_dir or st.st_dev != dst.st_dev:
                continue
            try:
                cfd = _open_dir(name, fd, st)
            except OSError:
                continue
            with _closing_fd(cfd):
                if len(names) > 1:
                    _match(root, cfd, st, rel + (name,), names[1:], dirs_only, pattern, is_live, found)
                    continue
                tree = _measure(cfd, st, st.st_uid, len(rel) + 1)
        elif dirs_only:
            continue
        else:
            tree = _leaf(st)
        key = rel + (name,)
        found.setdefault(key, _entry(root, key, st, tree, is_live(key), pattern=pattern))


def scan(root: Root | str, now: float, uid: int, *, scratch_s: float, kind: str = SCRATCH,
         live: Live | None = None, pid_alive: Callable[[int], bool] = pid_alive) -> tuple[list[Removal], list[str]]:
    """What one root would lose now, and lines about a root that was skipped (a dry run)."""
    if isinstance(root, str):
        root = Root(root, kind)
    if live is None:
        live = live_processes([root.path])
    entries, notes = collect(root, uid, live, pid_alive)
    return select(entries, now, uid, scratch_s), notes


# ---------------------------------------------------------------------------------------- acts

def sweep(removals: Iterable[Removal], now: float, uid: int, scratch_s: float, *,
          pid_alive: Callable[[int], bool] = pid_alive,
          before_remove: Callable[[Removal], None] | None = None) -> list[Outcome]:
    """Remove what `select` chose, each re-checked right before it goes. Never raises for a race."""
    cutoff = now - scratch_s
    out = []
    for r in removals:
        if before_remove is not None:
            before_remove(r)
        try:
            out.append(_remove(r, uid, cutoff, pid_alive))
        except FileNotFoundError:
            out.append(Outcome(r.entry, False, 0, "gone already"))
        except OSError as e:
            out.append(Outcome(r.entry, False, 0, show(e.strerror or str(e))))
    return out


def _remove(r: Removal, uid: int, cutoff: float, alive: Callable[[int], bool]) -> Outcome:
    """Remove one chosen entry, reached again from its root by descriptors (never through a path
    that could have been swapped for a symlink), only if it is still the very thing that was chosen."""
    e = r.entry
    root_fd = _open_dir(e.root, None)
    fds = [root_fd]
    try:
        dev = os.fstat(root_fd).st_dev
        for name in e.rel[:-1]:
            pst = os.stat(name, dir_fd=fds[-1], follow_symlinks=False)
            if not stat.S_ISDIR(pst.st_mode) or pst.st_dev != dev:
                return Outcome(e, False, 0, "its directory was replaced")
            fds.append(_open_dir(name, fds[-1], pst))
        parent, name = fds[-1], e.rel[-1]
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
        changed = _changed_since_chosen(e, st, uid, cutoff)
        if changed:
            return Outcome(e, False, 0, changed)
        if e.root_kind == LITTER:
            return _remove_litter(e, parent, name, st, alive)
        if e.kind != "dir":
            os.unlink(name, dir_fd=parent)  # a symlink goes as a link: its target is never touched
            return Outcome(e, True, st.st_blocks * 512, "")
        return _remove_tree(e, parent, name, st, uid, cutoff)
    finally:
        for f in reversed(fds):
            os.close(f)


def _changed_since_chosen(e: Entry, st: os.stat_result, uid: int, cutoff: float) -> str | None:
    if (st.st_dev, st.st_ino) != e.ident or _kind(st.st_mode) != e.kind:
        return "replaced during the sweep"
    if st.st_uid != uid:
        return f"now owned by uid {st.st_uid}"
    if st.st_mtime > e.newest or st.st_mtime >= cutoff:
        return "changed during the sweep"
    return None


def _remove_litter(e: Entry, parent: int, name: str, st: os.stat_result, alive: Callable[[int], bool]) -> Outcome:
    """/tmp litter: an empty directory, or a pid file whose process is gone."""
    if e.kind == "dir":
        try:
            os.rmdir(name, dir_fd=parent)  # atomic: only ever an empty directory
        except OSError as x:
            if x.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return Outcome(e, False, 0, "no longer empty")
            raise
        return Outcome(e, True, e.size, "")
    pid = _read_pid(name, parent, st)
    if pid is None or pid != e.pid or alive(pid):
        return Outcome(e, False, 0, "its pid file changed or the pid is alive")
    os.unlink(name, dir_fd=parent)
    return Outcome(e, True, e.size, "")


def _remove_tree(e: Entry, parent: int, name: str, st: os.stat_result, uid: int, cutoff: float) -> Outcome:
    """Agent scratch: a whole tree, measured again and emptied file by file; whatever changed since
    it was chosen stays."""
    with _closing_fd(_open_dir(name, parent, st)) as fd:
        now_tree = _measure(fd, st, uid, len(e.rel))
        if now_tree.hazard:
            return Outcome(e, False, 0, now_tree.hazard)
        if now_tree.newest > e.newest or now_tree.newest >= cutoff:
            return Outcome(e, False, 0, "changed during the sweep")
        freed, kept = _empty_dir(fd, st.st_dev, uid, min(e.newest, cutoff), len(e.rel))
    if kept:
        return Outcome(e, False, freed, f"{kept} changed during the sweep")
    try:
        os.rmdir(name, dir_fd=parent)
    except FileNotFoundError:
        pass
    except OSError as x:
        if x.errno in (errno.ENOTEMPTY, errno.EEXIST):
            return Outcome(e, False, freed, "something new appeared in it")
        raise
    return Outcome(e, True, freed + st.st_blocks * 512, "")


def _empty_dir(fd: int, dev: int, uid: int, limit: float, depth: int) -> tuple[int, int]:
    """Remove everything inside the directory open as `fd` whose mtime is at most `limit`, not
    following symlinks and not leaving the file system. Returns (bytes freed, entries kept)."""
    freed = kept = 0
    if depth > MAX_DEPTH:
        return 0, 1
    try:
        with os.scandir(fd) as it:
            names = [de.name for de in it]
    except OSError:
        return 0, 1
    for name in names:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if st.st_uid != uid or st.st_mtime > limit or st.st_dev != dev:
                kept += 1
                continue
            if stat.S_ISDIR(st.st_mode):
                with _closing_fd(_open_dir(name, fd, st)) as cfd:
                    f, k = _empty_dir(cfd, dev, uid, limit, depth + 1)
                freed += f
                if k:
                    kept += k
                    continue
                os.rmdir(name, dir_fd=fd)
            elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                os.unlink(name, dir_fd=fd)
            else:
                kept += 1
                continue
            freed += st.st_blocks * 512
        except FileNotFoundError:
            continue
        except OSError:
            kept += 1
    return freed, kept


# ---------------------------------------------------------------------------------------- whole runs

def clean(roots: Iterable[Root], now: float, uid: int, scratch_s: float, *, yes: bool, auto: bool = False,
          live: Live | None = None, pid_alive: Callable[[int], bool] = pid_alive,
          before_remove: Callable[[Removal], None] | None = None) -> list[str]:
    """One `res clean` (yes=False: a dry run listing what would go). `auto` is the loop's silent run:
    it acts like --yes but never touches project patterns. Returns the lines to print."""
    roots = [r for r in roots if not (auto and r.kind == PROJECT)]
    if live is None:
        live = live_processes([r.path for r in roots])
    removals, notes = [], []
    for root in roots:
        rs, ns = scan(root, now, uid, scratch_s=scratch_s, live=live, pid_alive=pid_alive)
        removals.extend(rs)
        notes.extend(ns)
    if not (yes or auto):
        return notes + render_plan(removals)
    return notes + render_outcomes(sweep(removals, now, uid, scratch_s, pid_alive=pid_alive,
                                         before_remove=before_remove))


def clean_here(cwd: str, now: float, uid: int, scratch_s: float, *, yes: bool) -> list[str]:
    """`res clean` run in `cwd`, its files: the default roots and the project's own patterns
    (`<cwd>/.res-clean`, read_patterns). The lines to print, a pattern file's errors first."""
    roots = default_roots(uid)
    root, lines = read_patterns(cwd, uid)
    if root is not None:
        roots.append(root)
    return lines + clean(roots, now, uid, scratch_s, yes=yes)
