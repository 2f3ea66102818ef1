"""What a lock key means (issue 14, DESIGN §5.2). Pure.

A `--lock KEY` is KEY within the caller's repository: `KEY@<main tree>` (config/gitrepo.main_tree:
every worktree of one repository has one main tree; outside git, the cwd). So two agents in two
worktrees of one repository exclude each other, and agents in two repositories never do. The
policy's `lock_title_words` take a lock unasked: a job whose title starts with such a word takes
the lock of that name."""
from __future__ import annotations


def scoped(key: str) -> bool:
    """Whether `key` is scoped already (written as `KEY@/path`: an absolute path after its last `@`);
    `db@staging` is a key like any other."""
    return "@" in key and key.rpartition("@")[2].startswith("/")


def lock_scope(key: str, scope: str) -> str:
    """`KEY@<scope>`; a key scoped already is kept as it is."""
    return key if scoped(key) else f"{key}@{scope}"


def title_lock(title: str, words) -> str | None:
    """The lock a title takes unasked: its first word (without trailing punctuation, any case) when it
    is one of the policy's `words`; else None."""
    first = title.split(maxsplit=1)[0].rstrip(":,;.!").lower() if title.strip() else ""
    return next((w for w in words if w.lower() == first), None) if first else None

