"""`res clean`: agent scratch, /tmp litter and failed `res-*` units (issue 4, item 6).

Three parts, like the rest of the project:

- facts: `collect()` walks one root and returns plain `Entry` records (path, kind, size, newest mtime,
  owner, live flag, ...). It never follows a symlink and never leaves its root: every directory is
  opened relative to its parent's descriptor with O_NOFOLLOW, and checked to be the inode that lstat
  saw, on the root's file system.
- rules: `select()` is pure: entries, the time, the uid and the staleness threshold in, the removals
  with their reasons out. Every rule below lives there.
- acts: `sweep()` removes what `select()` chose, re-checking each entry right before it goes.

What Claude Code keeps in /tmp/claude-<uid>/ (its CLAUDE_CODE_TMPDIR; the sandbox's writable temp dir):

    <project-slug>/<session-id>/scratchpad/   a session's scratchpad (the system prompt tells the
                                              model to keep ALL temporary files there)
    <project-slug>/tasks/<id>.output          output of background Bash tasks
    cwd-<id>                                  the Bash tool's cwd-tracking files (sandbox mode)

<project-slug> is the session's working directory with every character other than [A-Za-z0-9]
replaced by "-" (/home/u/my.proj -> -home-u-my-proj), the same slug as ~/.claude/projects/. Sources:
anthropics/claude-code issues #17936 and #92166 (scratchpad and tasks paths), #21842 and #31024 (cwd-
files and the claude-<uid> directory), #29329 (CLAUDE_CODE_TMPDIR=/tmp/claude-<uid>).

The rules (decided here; docs/ should say the same):

Scratch root /tmp/claude-<uid>/ (must be a real directory owned by the user, else skipped):
- a top-level entry is removed when the newest mtime of it and everything beneath it (lstat, links not
  followed) is older than scratch_hours, it is owned by the user, and it is not live;
- a top-level directory that is fresh but not live is looked into one level deeper: its stale children
  (old session directories, an old tasks/) go by the same rule;
- live means: the directory named by the slug of a running `claude` process's working directory (its
  /proc cwd or its $PWD), a directory named by a session id on a running claude's command line
  (--session-id / --resume / -r), or any entry holding the cwd or an open file of any running
  process. Under a live project directory nothing is removed at all: which session directory belongs
  to the live session cannot be told, and an idle scratchpad must survive;
- an entry holding a socket, FIFO or device, a file of another user, a mount point, or anything that
  could not be read is kept (a socket's mtime does not show that it is in use; what could not be seen
  is not acted on);
- a symlink is removed as a link (never its target) when the link itself is stale.

Litter roots /tmp and /var/tmp (top level only; nothing with content, nothing of another user):
- an EMPTY directory owned by the user, older than scratch_hours, not anyone's cwd;
- a regular file `*.pid` owned by the user, older than scratch_hours, at most 32 bytes, whose whole
  content is one decimal pid, when that pid is not alive (kill(pid, 0) says ESRCH);
- never: names starting with "." (.X11-unix, .ICE-unix, ...), `claude-<n>` (the scratch roots),
  `systemd-private-*`, symlinks, sticky directories, anything with content. Names that merely look
  like they embed a pid (tmp.XXXXXXXXXX is mktemp's random suffix, not a pid), pytest-of-<user>
  (pytest keeps its own last three runs), lock files and empty files are left alone: none of them
  can be proved to be litter.

Project patterns: a project may list its own scratch in `.res-clean` at its root (see
`read_patterns`). Matches are listed by a dry run and removed only by a hand run with --yes (never by
the automatic run from the loop), under the same rules as scratch: stale, owned, not live, no hazard.

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
from typing import Awaitable, Callable, Iterable, Iterator, NamedTuple

from reconciler.core.quantities import GIB, fmt_span

SCRATCH = "scratch"
LITTER = "litter"
PROJECT = "project"

PATTERN_FILE = ".res-clean"
MAX_DEPTH = 256  # deeper trees are kept (and a descriptor per level stays within limits)
MAX_PID_FILE = 32
MAX_PATTERN_FILE = 64 * 1024
LONG_SLUG = 200  # Claude Code shortens longer slugs; these match by prefix

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_PID_TEXT = re.compile(rb"^\s*([0-9]{1,10})\s*$")
_SLUG = re.compile(r"[^A-Za-z0-9]")
_LITTER_SKIP = re.compile(r"^(\.|claude-[0-9]+$|systemd-private-)")
_UNIT = re.compile(r"^[A-Za-z0-9_.:@\\-]+\.(service|scope)$")


# ---------------------------------------------------------------------------------------- plain data

class Root(NamedTuple):
    path: str
    kind: str  # SCRATCH | LITTER | PROJECT
    patterns: tuple[str, ...] = ()  # PROJECT only: validated lines of .res-clean
    source: str = ""  # PROJECT only: the pattern file, for the reason text


class Live(NamedTuple):
    """What running processes hold: real paths (cwds, open files), claude project slugs, session ids.
    ok=False: processes could not be listed, so everything counts as live (nothing is acted on)."""

    paths: frozenset = frozenset()
    slugs: frozenset = frozenset()
    session_ids: frozenset = frozenset()
    ok: bool = True


class Entry(NamedTuple):
    path: str  # as shown: root path + rel
    rel: tuple  # names below the root, never empty
    root: str
    root_kind: str  # SCRATCH | LITTER | PROJECT
    kind: str  # "dir" | "file" | "link" | "other"
    size: int  # bytes on disk of the entry and everything beneath it
    newest: float  # newest mtime of the entry and everything beneath it
    owner: int
    ident: tuple = (0, 0)  # (st_dev, st_ino) of the entry as scanned
    live: bool = False
    empty: bool = False  # a directory with no entries
    pid: int | None = None  # the pid a *.pid file names
    pid_alive: bool | None = None
    hazard: str = ""  # why it must be kept whatever its age: "holds a socket", ...
    pattern: str = ""  # PROJECT: the pattern that matched


class Removal(NamedTuple):
    entry: Entry
    reason: str


class Outcome(NamedTuple):
    entry: Entry
    removed: bool  # the entry itself is gone
    freed: int  # bytes actually freed (also when part of a tree had to stay)
    note: str  # why (some of) it stayed; "" when all went


# ---------------------------------------------------------------------------------------- rules (pure)

def slug(path: str) -> str:
    """Claude Code's project slug of a working directory: /home/u/my.proj -> -home-u-my-proj."""
    return _SLUG.sub("-", path)


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def select(entries: Iterable[Entry], now: float, uid: int, scratch_s: float) -> list[Removal]:
    """What to remove and why. Pure: no I/O, no clock. Entries not returned are kept."""
    entries = list(entries)
    cutoff = now - scratch_s
    by_path = {e.path: e for e in entries}
    chosen: dict[str, Removal] = {}

    def stale(e: Entry) -> bool:
        return e.newest < cutoff

    def untouched(e: Entry) -> str:
        return f"untouched {fmt_span(now - e.newest)}"

    for e in entries:
        if e.owner != uid or not e.rel or e.hazard:
            continue
        if e.root_kind == LITTER:
            if len(e.rel) != 1 or _LITTER_SKIP.match(e.rel[0]) or e.live or not stale(e):
                continue
            if e.kind == "dir" and e.empty:
                chosen[e.path] = Removal(e, f"empty directory, {untouched(e)}")
            elif (e.kind == "file" and e.rel[0].endswith(".pid") and e.pid is not None and e.pid > 0
                  and e.pid_alive is False):
                chosen[e.path] = Removal(e, f"pid file of dead pid {e.pid}, {untouched(e)}")
        elif e.root_kind == SCRATCH:
            if e.live or not stale(e):
                continue
            if len(e.rel) == 1:
                chosen[e.path] = Removal(e, f"stale scratch, {untouched(e)}")
            elif len(e.rel) == 2:
                parent = by_path.get(os.path.join(e.root, e.rel[0]))
                # Only inside a directory that was seen, is the user's and is not live.
                if parent is None or parent.live or parent.owner != uid or parent.kind != "dir":
                    continue
                chosen[e.path] = Removal(e, f"stale scratch, {untouched(e)}")
        elif e.root_kind == PROJECT:
            if e.live or not stale(e):
                continue
            chosen[e.path] = Removal(e, f"project pattern {e.pattern!r}, {untouched(e)}")

    # Something inside an entry that goes anyway is not listed twice.
    out = []
    for path, r in sorted(chosen.items()):
        parts = r.entry.rel
        if any(os.path.join(r.entry.root, *parts[:i]) in chosen for i in range(1, len(parts))):
            continue
        out.append(r)
    return out


def due(last_run: float | None, now: float, every_s: float) -> bool:
    """Whether the loop's automatic cleanup should run now: never ran, ran `every_s` ago or more, or
    the clock went back past the last run (which then cannot be trusted)."""
    if last_run is None:
        return True
    return now - last_run >= every_s or now < last_run


def fmt_bytes(n: int) -> str:
    if n >= GIB:
        return f"{n / GIB:.1f} GB"
    if n >= 1024**2:
        return f"{n / 1024**2:.1f} MB"
    return f"{max(0, n) / 1024:.0f} KB"


def show(path: str) -> str:
    """A path on one line: control characters and undecodable bytes escaped."""
    return "".join(c if c.isprintable() else "\\x%02x" % (ord(c) & 0xFF) for c in path)


def render_plan(removals: list[Removal]) -> list[str]:
    if not removals:
        return ["nothing to clean"]
    lines = [f"would free {fmt_bytes(r.entry.size)}: {show(r.entry.path)} ({r.reason})" for r in removals]
    total = sum(r.entry.size for r in removals)
    n = len(removals)
    lines.append(f"would free {fmt_bytes(total)} in {n} {'entry' if n == 1 else 'entries'}; "
                 "res clean --yes removes them")
    return lines


def render_outcomes(outcomes: list[Outcome]) -> list[str]:
    lines = []
    for o in outcomes:
        if o.freed or o.removed:
            line = f"freed {fmt_bytes(o.freed)}: {show(o.entry.path)}"
            lines.append(line + (f" (kept part: {o.note})" if o.note else ""))
        else:
            lines.append(f"kept {show(o.entry.path)}: {o.note}")
    if not outcomes:
        lines.append("nothing to clean")
    elif len(outcomes) > 1:
        lines.append(f"freed {fmt_bytes(sum(o.freed for o in outcomes))} in total")
    return lines


# ---------------------------------------------------------------------------------------- project patterns

def parse_patterns(text: str, source: str = PATTERN_FILE) -> tuple[list[str], list[str]]:
    """The .res-clean format: one glob per line, relative to the project root; `#` starts a comment
    line; `/` separates names; each name is an fnmatch pattern (`*`, `?`, `[...]`); a trailing `/`
    matches directories only. Refused (named in an error line, the rest still used): absolute paths,
    `.`, `..` and `**`, anything naming `.git` or the pattern file itself, and a first name made only of
    wildcards (`*`, `*/…`: the whole project is never scratch)."""
    patterns, errors = [], []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        names = line.rstrip("/").split("/")
        why = ""
        if line.startswith("/"):
            why = "must be relative to the project"
        elif any(p in ("", ".", "..") for p in names):
            why = "empty, '.' or '..' names are not allowed"
        elif any("**" in p for p in names):
            why = "'**' is not supported"
        elif any(fnmatch.fnmatchcase(".git", p) or fnmatch.fnmatchcase(PATTERN_FILE, p) for p in names
                 if not set(p) <= set("*?")):
            why = "may not name .git or the pattern file"
        elif set(names[0]) <= set("*?"):
            why = "the first name must not be only wildcards"
        if why:
            errors.append(f"{source}:{n}: {show(line)}: {why}")
        else:
            patterns.append(line)
    return patterns, errors


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
    patterns, errors = parse_patterns(data.decode("utf-8", "replace"), show(source))
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
        if p.startswith("/") and any(_under(p, t) for t in tops):
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
        if comm != b"claude" and not (argv and os.path.basename(argv[0]) == "claude"):
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
            return any(_under(q, p) for q in live.paths) or rel[-1] in live.session_ids

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
        if _LITTER_SKIP.match(name):
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
        if (st.st_dev, st.st_ino) != e.ident or _kind(st.st_mode) != e.kind:
            return Outcome(e, False, 0, "replaced during the sweep")
        if st.st_uid != uid:
            return Outcome(e, False, 0, f"now owned by uid {st.st_uid}")
        if st.st_mtime > e.newest or st.st_mtime >= cutoff:
            return Outcome(e, False, 0, "changed during the sweep")

        if e.root_kind == LITTER:
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

        if e.kind != "dir":
            os.unlink(name, dir_fd=parent)  # a symlink goes as a link: its target is never touched
            return Outcome(e, True, st.st_blocks * 512, "")
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
    finally:
        for f in reversed(fds):
            os.close(f)


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


async def reset_failed(list_failed: Callable[[], Awaitable[Iterable[str]]],
                       reset_unit: Callable[[str], Awaitable[object]], *, yes: bool,
                       prefix: str = "res") -> list[str]:
    """`reset-failed` of the failed `<prefix>-*` units. `list_failed()` gives the names of failed units
    (over D-Bus: ListUnitsByPatterns(["failed"], [f"{prefix}-*"])); `reset_unit(name)` resets one
    (ResetFailedUnit). Only names `<prefix>-….service|scope` are touched. Never raises."""
    try:
        names = sorted({n for n in await list_failed()
                        if isinstance(n, str) and n.startswith(prefix + "-") and _UNIT.match(n)})
    except Exception as e:  # noqa: BLE001 - observation failed: act on nothing, say so in one line
        return [f"reset-failed skipped: {show(str(e)) or type(e).__name__}"]
    lines = []
    for n in names:
        if not yes:
            lines.append(f"would reset failed unit {n}")
            continue
        try:
            await reset_unit(n)
            lines.append(f"reset failed unit {n}")
        except Exception as e:  # noqa: BLE001
            lines.append(f"kept failed unit {n}: {show(str(e)) or type(e).__name__}")
    return lines
