"""What a directory's git checkout says, read from its files (no `git` process: `res run` is a hot
path): the checkout's root, the project's name, the repository's main tree (the scope of a `--lock`), the
branch.

A worktree made by `git worktree add` has a `.git` file (`gitdir: <main>/.git/worktrees/<name>`)
whose git directory holds `commondir` (`../..`): the repository's own git directory, whose parent
is the main tree. Every worktree of one repository so has one main tree; two repositories never do.
"""
from __future__ import annotations

import os

_MAX_FILE = 4096  # a .git file, HEAD or commondir longer than this is not git's


# ---------------------------------------------------------------- pure: file contents to facts


def gitdir_from_file(text: str, base: str) -> str | None:
    """The git directory a `.git` file in `base` points to (`gitdir: PATH`, relative to `base`)."""
    line = text.strip()
    if not line.startswith("gitdir:"):
        return None
    target = line[len("gitdir:"):].strip()
    return os.path.normpath(os.path.join(base, target)) if target else None


def common_dir_of(gitdir: str, commondir_text: str | None) -> str:
    """The repository's own git directory: a worktree's `commondir` (relative to its git dir), or
    the git directory itself."""
    if commondir_text is None or not commondir_text.strip():
        return os.path.normpath(gitdir)
    return os.path.normpath(os.path.join(gitdir, commondir_text.strip()))


def main_tree_of(common_dir: str) -> str:
    """The main tree of a repository whose git directory is `common_dir`: its parent when it is a
    `.git` directory; a bare repository (no tree) is its own scope."""
    common_dir = os.path.normpath(common_dir)
    return os.path.dirname(common_dir) if os.path.basename(common_dir) == ".git" else common_dir


def branch_of(head_text: str) -> str | None:
    """The branch HEAD names (`ref: refs/heads/NAME`); None when detached."""
    line = head_text.strip()
    prefix = "ref: refs/heads/"
    return line[len(prefix):] or None if line.startswith(prefix) else None


# ---------------------------------------------------------------- reading a checkout


def _read(path: str) -> str | None:
    return read_regular(path, _MAX_FILE)


def read_regular(path: str, limit: int) -> str | None:
    """config/files.read_regular as text: None for anything but a regular file of at most `limit`
    bytes (a FIFO planted as HEAD or CLAUDE.md never blocks us)."""
    from reconciler.config.files import FileProblem
    from reconciler.config.files import read_regular as read_bytes

    try:
        data = read_bytes(path, limit)
    except (FileProblem, OSError):
        return None
    return None if data is None else data.decode("utf-8", "replace")


def checkout(cwd: str) -> tuple[str, str] | None:
    """(the checkout's root, its git directory) for `cwd`, or None outside git."""
    d = os.path.abspath(cwd)
    while True:
        dot = os.path.join(d, ".git")
        if os.path.isdir(dot):
            return d, dot
        if os.path.isfile(dot):
            text = _read(dot)
            gitdir = gitdir_from_file(text, d) if text is not None else None
            if gitdir is not None and os.path.isdir(gitdir):
                return d, gitdir
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def project_root(cwd: str) -> str:
    """The checkout root of `cwd`, else `cwd` made absolute (where a project's own files are)."""
    found = checkout(cwd)
    return found[0] if found else os.path.abspath(cwd)


def project_name(cwd: str, found: tuple[str, str] | None) -> str:
    """The project work in `cwd` counts under, the one rule (`res run`'s default --project, the gate's
    booking and the learned sizes it reads, filed by it): the name of the checkout's root (`found`:
    checkout(cwd)), else of `cwd` itself."""
    root = found[0] if found else cwd
    return os.path.basename(root) or root


def main_tree(cwd: str) -> str:
    """The repository's main tree for `cwd` (all its worktrees share it); outside git, `cwd`."""
    found = checkout(cwd)
    if found is None:
        return os.path.abspath(cwd)
    _, gitdir = found
    return main_tree_of(common_dir_of(gitdir, _read(os.path.join(gitdir, "commondir"))))


def branch(cwd: str) -> str | None:
    """The branch checked out where `cwd` is (a worktree's own HEAD), or None."""
    return branch_in(checkout(cwd))


def branch_in(found: tuple[str, str] | None) -> str | None:
    """The branch of a checkout found by checkout()."""
    if found is None:
        return None
    head = _read(os.path.join(found[1], "HEAD"))
    return branch_of(head) if head is not None else None
