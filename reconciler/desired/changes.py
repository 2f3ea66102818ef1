"""Changes to the user's own files (DESIGN §5.7): agents run as the same user and can edit the policy,
game.toml or the queue by hand. res cannot prevent that; it makes it visible.

Every change the writer makes is logged by the writer itself (`log_change`, `desired/.changes.jsonl`:
when, which file, what, who asked, the digest of the file it left). Each pass reads the new lines, and
compares each tracked file's digest with the last one it saw: a new digest that no writer line
accounts for is a change made outside res, recorded with what changed (`user_reserve_gb 6 → 1`). Both
kinds go to state.db's `changes` table: `res status` shows the recent ones of the policy and game
files, `res hist --changes` all of them. A queue entry that appeared outside the writer is
*hand-added*: never started (DESIGN §5.7: a forged entry is never started silently); `res release`
drops it.

A writer about to replace a file that is not what it last left runs the same tracking first
(`record_outside`): its change line will vouch for the file it leaves, so a hand edit no pass has
seen yet would otherwise pass for the writer's own, and a forged entry in it start.

`diff_values` and `queue_diff` are pure; `track` is the shell around them.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from reconciler.config.memo import ByIdentity
from reconciler.config.paths import Paths

FILE_LIMIT = 32 << 20
CHANGES_NAME = ".changes.jsonl"  # the writer's log of its own changes, in the desired directory
CHANGES_LIMIT = 1 << 20
SHOWN_FOR_S = 24 * 3600  # `res status` shows changes this recent


# ---------------------------------------------------------------------------------- pure


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=True) if not isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 60 else text[:59] + "…"


def diff_values(old: dict[str, Any], new: dict[str, Any]) -> str:
    """`user_reserve_gb 6 → 1, game_hours set to 2, tick_s removed` (keys in order), or ""."""
    parts = []
    for key in sorted(set(old) | set(new)):
        if key not in new:
            parts.append(f"{key} removed (was {_shown(old[key])})")
        elif key not in old:
            parts.append(f"{key} set to {_shown(new[key])}")
        elif old[key] != new[key]:
            parts.append(f"{key} {_shown(old[key])} → {_shown(new[key])}")
    return ", ".join(parts)


def queue_diff(old: dict[str, str], new: dict[str, str]) -> tuple[str, list[str]]:
    """(summary, the ids added) between two queue snapshots ({id: digest of its entry})."""
    added = sorted((i for i in new if i not in old), key=lambda i: int(i[2:]) if i[2:].isdigit() else 0)
    removed = sorted(i for i in old if i not in new)
    edited = sorted(i for i in new if i in old and new[i] != old[i])
    parts = []
    for what, ids in (("added", added), ("removed", removed), ("edited", edited)):
        if ids:
            parts.append(f"{', '.join(ids[:8])}{', …' if len(ids) > 8 else ''} {what}")
    return "; ".join(parts), added


def change_line(at: float, file: str, how: str, who: str, summary: str, clock) -> str:
    """One line of `res status` / `res hist --changes`; `clock(at)` gives HH:MM."""
    from reconciler.render.text import one_line

    by = "outside res" if how == "outside" else f"by res ({one_line(who, 80)})"
    return f"{file} changed {by} at {clock(at)}: {one_line(summary, 200) or 'no value changed'}"


# ---------------------------------------------------------------------------------- shell


def log_change(dfd: int, file: str, op: str, sha: str, by: dict[str | None, list[str]], why: str | None = None) -> None:
    """The writer's own change, logged by the writer in `.changes.jsonl` (in the directory `dfd`): one
    line per asker (`by`: who asked -> the ids their requests got; None: this process's own chain):
    when, which file, what, who asked, and the digest of the file it left (a pass tells changes made
    outside res by it). Kept bounded; a line that cannot be written is a change outside res."""
    from reconciler.observed.procs import process_chain

    at, own = time.time(), None
    lines = []
    for who, some in by.items():
        if who is None:
            own = own or process_chain(os.getpid())
        lines.append(json.dumps({"at": at, "file": file, "op": op, "ids": some, "who": who or own,
                                 "digest": sha, **({"why": why[:300]} if why else {})}, separators=(",", ":")) + "\n")
    line = "".join(lines)
    try:
        fd = os.open(CHANGES_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=dfd)
        try:
            if os.fstat(fd).st_size > CHANGES_LIMIT:  # keep it bounded: the pass has read it long since
                os.ftruncate(fd, 0)
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass  # the change itself is made; a pass then calls it a change outside res


def _digest(data: bytes | None) -> str:
    if data is None:
        return "missing"
    from reconciler.config.files import digest

    return digest(data)


_ENTRY_DIGESTS = ByIdentity()  # a shared queue table -> its digest


def _snapshot(file: str, data: bytes | None) -> dict[str, Any]:
    """What a file says, to diff against later: its TOML values (the queue: each entry's digest by id,
    each table read and digested once per process: the reader shares the tables it parsed)."""
    import tomllib

    from reconciler.desired.toml_in import loads_queue

    if data is None:
        return {}
    try:
        text = data.decode("utf-8")
        values = loads_queue(text) if file == "queue.toml" else tomllib.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        return {"(unreadable)": " ".join(str(e).split())[:80]}
    if file != "queue.toml":
        return values
    out = {}
    for kind in ("job", "note"):
        entries = values.get(kind)
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                out[entry["id"]] = _ENTRY_DIGESTS.get(
                    entry, lambda e: _digest(json.dumps(e, sort_keys=True, default=str).encode()))
    return out


def _read(path: Path, follow: bool = False) -> bytes | None:
    from reconciler.config.files import FileProblem, read_regular

    try:
        return read_regular(path, FILE_LIMIT, follow=follow)
    except FileProblem as e:
        return f"(unusable: {e})".encode()


def _unread_events(paths: Paths, store) -> tuple[list[dict], int, int]:
    """(the writer's change lines not read before, where they start, where they end): an offset kept
    in state.db; a log that was cut short starts over."""
    raw = _read(paths.desired / CHANGES_NAME) or b""
    offset = int(store.get_meta("changes_offset") or 0)
    if offset > len(raw):
        offset = 0
    end = raw.rfind(b"\n", offset) + 1
    events = []
    for line in raw[offset:end].splitlines():
        try:
            e = json.loads(line)
            if isinstance(e, dict) and isinstance(e.get("file"), str):
                events.append(e)
        except ValueError:
            continue
    return events, offset, end


def _writer_events(paths: Paths, store, write: bool = True) -> list[dict]:
    events, offset, end = _unread_events(paths, store)
    if end > offset and write:
        store.set_meta("changes_offset", str(end))
    return events


def _writer_row(e: dict, now: float) -> tuple[float, str, str, str, str]:
    ids = e.get("ids") or []
    why = e.get("why")
    return (float(e.get("at") or now), e["file"], "res", str(e.get("who") or ""),
            f"{e.get('op', 'edit')}" + (f" {', '.join(map(str, ids))}" if ids else "")
            + (f": {why}" if isinstance(why, str) and why else ""))


def recorded_and_pending(paths: Paths, store, since: float = 0.0, files=None) -> list[tuple[float, str, str, str, str]]:
    """The changes recorded, and the writer's own ones no pass has read yet (read-only): what `res
    hist --changes` and `res status` show, without waiting for the next pass."""
    now = time.time()
    rows = store.changes(since, files)
    pending = [_writer_row(e, now) for e in _unread_events(paths, store)[0]]
    wanted = set(files) if files is not None else None
    rows += [r for r in pending if r[0] >= since and (wanted is None or r[1] in wanted)]
    return sorted(rows, key=lambda r: r[0])


def _tracked(store) -> dict:
    """What the files said at the last pass (state.db's `tracked`), parsed once per version: a loop
    re-reads its own value every pass, and under a crowd it is thousands of entries' digests."""
    text = store.get_meta("tracked")
    if text is None:
        return {}
    kept = store.memo.get("tracked")
    if kept is not None and kept[0] == text:
        return dict(kept[1])  # a copy of the top level: this pass replaces files' entries, never edits them
    known = json.loads(text)
    store.memo["tracked"] = (text, known)
    return dict(known)


def track(paths: Paths, store, policy_path: Path, now: float | None = None, write: bool = True) -> set[str]:
    """Record this pass's changes to the policy, game and queue files; return the ids of the queue
    entries that were added outside res (and are still there). `write` False: only say what a pass
    would hold (a dry run, on a read-only store).

    The first look at queue.toml (no pass has tracked it in this state directory: after `res init`,
    or a queue written wholly by hand) has nothing to diff against: every entry in it counts as added
    since, and only the writer's own change lines vouch for one (an `add` or `restore` naming its
    id). An entry nobody vouches for is hand-added, from the first pass on (DESIGN §5.7)."""
    now = time.time() if now is None else now
    events = _writer_events(paths, store, write)
    rows = [_writer_row(e, now) for e in events]
    by_writer: dict[str, set[str]] = {}
    added_by_writer: set[str] = set()
    for e in events:
        by_writer.setdefault(e["file"], set()).add(str(e.get("digest")))
        if e["file"] == "queue.toml" and e.get("op") in ("add", "restore"):
            added_by_writer.update(map(str, e.get("ids") or []))
    known = _tracked(store)
    hand_added = set(store.get_meta_json("hand_added", []))
    before = set(hand_added)
    changed = False
    for file, path in (("policy.toml", policy_path), ("game.toml", paths.game), ("queue.toml", paths.queue)):
        data = _read(path, follow=file == "policy.toml")  # a policy may be a dotfile's symlink
        digest = _digest(data)
        prev = known.get(file)
        if prev is not None and prev.get("digest") == digest:
            continue
        snap = _snapshot(file, data)
        if file == "queue.toml" and prev is None:
            # The first look: nothing to diff against, so nothing is taken on trust.
            hand_added.update(i for i in queue_diff({}, snap)[1] if i not in added_by_writer)
        elif prev is not None and digest not in by_writer.get(file, set()):
            if file == "queue.toml":
                summary, added = queue_diff(prev.get("snapshot", {}), snap)
                hand_added.update(i for i in added if i not in added_by_writer)
            else:
                summary = diff_values(prev.get("snapshot", {}), snap)
            if data is None:
                summary = "removed" + (f" ({summary})" if summary else "")
            rows.append((now, file, "outside", "", summary))
        known[file] = {"digest": digest, "snapshot": snap}
        changed = True
    if "queue.toml" in known:
        hand_added &= set(known["queue.toml"].get("snapshot", {}))  # gone from the file: forgotten
    if not write:
        return hand_added
    if rows:
        store.add_changes(rows)
    if changed:
        text = json.dumps(known, separators=(",", ":"), sort_keys=True)
        store.set_meta("tracked", text)
        store.memo["tracked"] = (text, known)
    if hand_added != before:
        store.set_meta_json("hand_added", sorted(hand_added))
    return hand_added


def checked_ids(store) -> set[str]:
    """The queue entries the last check of queue.toml saw (every one judged hand-added or not)."""
    return set((_tracked(store).get("queue.toml") or {}).get("snapshot") or {})


def record_outside(paths: Paths) -> None:
    """What a pass would record of the user's files now (`track`), for the writer, under its lock,
    before it replaces a file that is not what it last left: a change made outside res since the last
    pass is recorded with its diff, and a queue entry it added held, before the writer's change line
    vouches for a file that holds it. Without state.db no pass has looked: nothing to tell it from."""
    if not paths.db.exists():
        return
    from reconciler.config.policy import user_policy_path
    from reconciler.recorded.store import Store

    with Store.open(paths) as store, store.transaction():
        track(paths, store, user_policy_path())
