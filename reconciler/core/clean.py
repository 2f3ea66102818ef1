"""The rules of `res clean` (ops/clean.py gathers the facts and acts): which entries of the
scratch and litter roots go, and why. Pure: entries, the time, the uid and the threshold in,
removals with their reasons (a code and the figures: render/clean.py makes the text) out.

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
"""
from __future__ import annotations

import fnmatch
import posixpath
import re
from typing import Iterable, NamedTuple

SCRATCH = "scratch"
LITTER = "litter"
PROJECT = "project"

PATTERN_FILE = ".res-clean"
_SLUG = re.compile(r"[^A-Za-z0-9]")
LITTER_SKIP = re.compile(r"^(\.|claude-[0-9]+$|systemd-private-)")


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
    code: str  # why it goes: EMPTY_DIR, DEAD_PID, STALE_SCRATCH, PROJECT_PATTERN (render.clean.removal_reason)
    idle_s: float  # how long nothing in it changed: now - entry.newest


EMPTY_DIR, DEAD_PID, STALE_SCRATCH, PROJECT_PATTERN = "empty_dir", "dead_pid", "stale_scratch", "project_pattern"


class PatternError(NamedTuple):
    """A line of a pattern file that is refused (render.clean.pattern_error makes its line)."""

    line_no: int
    line: str  # the line as written (stripped)
    code: str  # ABSOLUTE, DOT_NAMES, DOUBLE_STAR, NAMES_GIT, ONLY_WILDCARDS


ABSOLUTE, DOT_NAMES, DOUBLE_STAR, NAMES_GIT, ONLY_WILDCARDS = (
    "absolute", "dot_names", "double_star", "names_git", "only_wildcards")


class Outcome(NamedTuple):
    entry: Entry
    removed: bool  # the entry itself is gone
    freed: int  # bytes actually freed (also when part of a tree had to stay)
    note: str  # why (some of) it stayed; "" when all went


# ---------------------------------------------------------------------------------------- rules (pure)

def slug(path: str) -> str:
    """Claude Code's project slug of a working directory: /home/u/my.proj -> -home-u-my-proj."""
    return _SLUG.sub("-", path)


def under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def select(entries: Iterable[Entry], now: float, uid: int, scratch_s: float) -> list[Removal]:
    """What to remove and why. Pure: no I/O, no clock. Entries not returned are kept."""
    entries = list(entries)
    cutoff = now - scratch_s
    by_path = {e.path: e for e in entries}
    chosen: dict[str, Removal] = {}

    def stale(e: Entry) -> bool:
        return e.newest < cutoff

    def removal(e: Entry, code: str) -> Removal:
        return Removal(e, code, now - e.newest)

    for e in entries:
        if e.owner != uid or not e.rel or e.hazard:
            continue
        if e.root_kind == LITTER:
            if len(e.rel) != 1 or LITTER_SKIP.match(e.rel[0]) or e.live or not stale(e):
                continue
            if e.kind == "dir" and e.empty:
                chosen[e.path] = removal(e, EMPTY_DIR)
            elif (e.kind == "file" and e.rel[0].endswith(".pid") and e.pid is not None and e.pid > 0
                  and e.pid_alive is False):
                chosen[e.path] = removal(e, DEAD_PID)
        elif e.root_kind == SCRATCH:
            if e.live or not stale(e):
                continue
            if len(e.rel) == 1:
                chosen[e.path] = removal(e, STALE_SCRATCH)
            elif len(e.rel) == 2:
                parent = by_path.get(posixpath.join(e.root, e.rel[0]))
                # Only inside a directory that was seen, is the user's and is not live.
                if parent is None or parent.live or parent.owner != uid or parent.kind != "dir":
                    continue
                chosen[e.path] = removal(e, STALE_SCRATCH)
        elif e.root_kind == PROJECT:
            if e.live or not stale(e):
                continue
            chosen[e.path] = removal(e, PROJECT_PATTERN)

    # Something inside an entry that goes anyway is not listed twice.
    out = []
    for path, r in sorted(chosen.items()):
        parts = r.entry.rel
        if any(posixpath.join(r.entry.root, *parts[:i]) in chosen for i in range(1, len(parts))):
            continue
        out.append(r)
    return out


def due(last_run: float | None, now: float, every_s: float) -> bool:
    """Whether the loop's automatic cleanup should run now: never ran, ran `every_s` ago or more, or
    the clock went back past the last run (which then cannot be trusted)."""
    if last_run is None:
        return True
    return now - last_run >= every_s or now < last_run


def parse_patterns(text: str) -> tuple[list[str], list[PatternError]]:
    """The .res-clean format: one glob per line, relative to the project root; `#` starts a comment
    line; `/` separates names; each name is an fnmatch pattern (`*`, `?`, `[...]`); a trailing `/`
    matches directories only. Refused (a PatternError each, the rest still used): absolute paths,
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
            why = ABSOLUTE
        elif any(p in ("", ".", "..") for p in names):
            why = DOT_NAMES
        elif any("**" in p for p in names):
            why = DOUBLE_STAR
        elif any(fnmatch.fnmatchcase(".git", p) or fnmatch.fnmatchcase(PATTERN_FILE, p) for p in names
                 if not set(p) <= set("*?")):
            why = NAMES_GIT
        elif set(names[0]) <= set("*?"):
            why = ONLY_WILDCARDS
        if why:
            errors.append(PatternError(n, line, why))
        else:
            patterns.append(line)
    return patterns, errors
