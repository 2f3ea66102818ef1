"""The small writer (DESIGN §2, §4), `Writer`: the only code that edits the desired files (`res run`,
`res note`, `res release`, `res game`, `res init`, and the reconciler retiring finished entries), and
its edits. It edits under an exclusive lock (desired/lock.py), keeps the user's comments and
formatting, validates before it writes, never overwrites a file it could not read, and replaces files
atomically, only if they are still the ones read (desired/disk.py). Its neighbours: the files' text in
(desired/toml_in.py, shared with the reader) and out (desired/toml_out.py), queue.toml's new text for
an append or a removal (desired/queue_edits.py), its note about the last queue.toml it wrote
(desired/note.py), its change log (desired/changes.py), the templates `res init` lays down
(desired/templates.py).

Import-light (the writer is on `res run`'s hot path): tomllib, pydantic (via models) and tomlkit are
imported inside the functions that need them, and tomlkit only when an edit cannot be made as a plain
text edit (see `Writer._appended`).
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from reconciler.config.files import digest
from reconciler.config.paths import Paths
from reconciler.desired import changes, queue_edits
from reconciler.desired.disk import Bad, Changed, decode, read_bytes, read_file, replace_if_unchanged, write_atomic
from reconciler.desired.lock import writer_locked
from reconciler.desired.note import Note, QueueFile
from reconciler.desired.reader import DesiredError
from reconciler.desired.templates import move_aside, queue_template, template
from reconciler.desired.toml_in import KINDS, MAX_ID, first_error, parse_game, parse_queue
from reconciler.desired.toml_out import entry_dict, is_plain, remove_plain

if TYPE_CHECKING:
    from reconciler.core.models import Game, Request


class CallerGone(DesiredError):
    """The request's caller stopped waiting before the writer could write it: it is not written."""

    def __init__(self, request_id: str | None):
        super().__init__(f"request {request_id or '(no id)'} reached res after its caller stopped waiting; "
                         "not written, never started")
        self.request_id = request_id


def _check_text(where: str, s: str) -> None:
    if "\x00" in s:
        raise DesiredError(f"{where}: contains a NUL character")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise DesiredError(f"{where}: not valid UTF-8 (bytes that are not text cannot be stored in queue.toml)") from None


class Writer:
    """The only code that edits desired/queue.toml and desired/game.toml.

    Every method takes `Paths.writer_lock` (flock, opened without following symlinks, 0600), waiting
    up to `timeout` seconds, then reads the file, refuses to touch it if it is unusable (DesiredError:
    `<path>:<line>: <error>; fix it or move it away, nothing was changed`), edits it keeping the
    user's comments and formatting, checks that the edited text reads back as exactly the intended
    data, and replaces it atomically. A DesiredError always means nothing was changed.

        Writer(paths, timeout=30.0)
        .add(request_fields: dict, kind="job") -> Request
        .remove(ids: Iterable[str]) -> list[str]
        .set_game(on: bool, until: float | None = None) -> Game
        .init(force=False) -> list[Path]
    """

    def __init__(self, paths: Paths, timeout: float = 30.0):
        self.paths = paths
        self.timeout = timeout
        # Who asks for the changes this writer makes (DESIGN §5.7): set per request by the loop (the
        # caller's process chain); None: this process's own.
        self.who: str | None = None
        if paths.queue.parent != paths.desired or paths.game.parent != paths.desired:
            raise ValueError("desired files must live in the desired directory")

    # ---------------------------------------------------------- loading

    def _refuse(self, path: Path, b: Bad) -> DesiredError:
        return DesiredError(f"{b.at(path)}; fix it or move it away, nothing was changed")

    def _load_queue(self, dfd: int, note: Note | None = None) -> QueueFile:
        """queue.toml, validated; from the writer's note without parsing when `note` vouches for it."""
        path = self.paths.queue
        try:
            got = read_file(dfd, path.name)
        except Bad as b:
            raise self._refuse(path, b) from None
        raw, ident = got if got is not None else (None, None)
        if raw is None:
            text = template("queue.toml")
            q = QueueFile(False, text, 1, 0, {k: 0 for k in KINDS}, plain=True)
            q.data = {}
            q.plain = is_plain(text, q.counts)
            return q
        sha = digest(raw)
        if note is not None:
            known = note.queue(raw, sha)
            if known is not None:
                known.ident = ident
                return known
        try:
            text = decode(raw)
            data, requests, aside = parse_queue(text)
        except Bad as b:
            raise self._refuse(path, b) from None
        counts = {k: len(data.get(k, [])) for k in KINDS}
        # An entry set aside keeps its id: it is never given out again either.
        top = max([r.number for r in requests] + [int(a.id[2:]) for a in aside if a.id], default=0)
        return QueueFile(True, text, data.get("next_id", 1), top, counts, is_plain(text, counts), data, ident, sha)

    def _full(self, dfd: int, q: QueueFile) -> QueueFile:
        return q if q.data is not None else self._load_queue(dfd)

    def _store_top(self) -> int:
        """The highest id number state.db has ever recorded (0 if none or unreadable): ids are never
        reused, even when queue.toml was moved away or its counter lowered by hand."""
        try:
            from reconciler.recorded.store import max_number

            return max_number(self.paths)
        except Exception:  # best effort: a missing or broken state.db must not stop `res run`
            return 0

    def _given_out(self, note: Note | None) -> int:
        """The lowest id number never given out as far as the file's neighbours tell: past state.db's
        highest id and the counter of the writer's note (either survives the file being moved away
        or its counter lowered by hand)."""
        return max(self._store_top() + 1, note.next_id if note else 1)

    def _next_free(self, q: QueueFile, note: Note | None = None, past: int = 0, given_out: bool = False) -> int:
        """The one rule of the id counter: the next id number is past the file's counter, past every
        id in the file and past `past`; with `given_out`, past every id ever given out too (unless the
        file is the writer's own last one, whose counter already is)."""
        n = max(q.next_id, q.top + 1, past + 1)
        if given_out and q.data is not None:
            n = max(n, self._given_out(note))
        return n

    def _commit_queue(self, dfd: int, q: QueueFile, new_text: str, note: Note | None, op: str = "edit",
                      ids: Iterable[str] = (), by: dict[str | None, list[str]] | None = None,
                      checked: bool = False, why: str | None = None) -> None:
        """Write the edited queue, unless the file changed since it was read (an editor saving
        meanwhile does not take the writer's lock): then Changed, and the caller starts over. `by`:
        the ids each asker's requests got, when one edit makes the changes of several (add_many).
        `checked`: the file found was already checked for changes made outside res (init)."""
        data = new_text.encode("utf-8")
        if not checked:
            self._outside_first(dfd, "queue.toml", q.found, note)
        replace_if_unchanged(dfd, self.paths.queue.name, q.ident, data)
        sha = digest(data)  # the note's and the change line's: one file, one digest
        Note.save(dfd, sha, q, note.next_id if note else 1)
        self._log_change(dfd, "queue.toml", op, list(ids), sha, by, why)

    def _outside_first(self, dfd: int, file: str, found: str, note: Note | None = None) -> None:
        """Before the writer replaces `file` (found with digest `found`): a file that is not what the
        writer last left (its note's digest; game.toml has none) may hold a change made outside res
        that no pass has seen yet. It is recorded now, as a pass would (desired/changes.record_outside),
        and a queue entry it added is held: once this write's change line vouches for the file, a
        pass would take that entry for the writer's own and start it. Nothing is written unchecked."""
        if file == "queue.toml":
            note = note or Note.load(dfd)  # the edit's own, read under this lock: not read again
            if note is not None and note.digest == found:
                return  # the writer's own last file: nothing happened to it since
        try:
            changes.record_outside(self.paths)
        except Exception as e:  # noqa: BLE001 - a forged entry must not slip through: write nothing
            raise DesiredError(f"{self.paths.desired / file}: could not check it for changes made outside res "
                               f"({' '.join(str(e).split())}); nothing was changed") from None

    def _log_change(self, dfd: int, file: str, op: str, ids: list[str], sha: str,
                    by: dict[str | None, list[str]] | None = None, why: str | None = None) -> None:
        """One line in `.changes.jsonl` per change the writer made (per asker, when one edit made the
        changes of several; else this writer's `who`): desired/changes.py `log_change`."""
        changes.log_change(dfd, file, op, sha, by or {self.who: ids}, why)

    def _retrying(self, edit: Any, path: Path | None = None) -> Any:
        """Run `edit(dfd)` under the lock, again (up to 3 times) if the file changed under it."""
        with writer_locked(self.paths, self.timeout) as dfd:
            for _ in range(3):
                try:
                    return edit(dfd)
                except Changed:
                    time.sleep(0.05)
        where = path or self.paths.queue
        raise DesiredError(f"{where}: it kept changing while being edited (an editor saving it?); nothing was changed")

    # ---------------------------------------------------------- add

    def add(self, request_fields: dict[str, Any], kind: str = "job") -> "Request":
        """Append a new request: allocate its id under the lock ("r-" + max(next_id, 1 + the highest
        id present, 1 + the highest id state.db knows); next_id goes past it), fill `created` if
        absent, validate through models.Request before anything is written, append a [[job]] or
        [[note]] table (`_appended`). Returns the Request as written (and as the reader will read it
        back); DesiredError if it was refused (nothing written)."""
        got = self.add_many([(request_fields, kind, None)])[0]
        if isinstance(got, DesiredError):
            raise got
        return got

    def add_many(self, items: list[tuple[dict[str, Any], str, str | None]]) -> list["Request | DesiredError"]:
        """Append several requests in one edit: one lock, one durable write of queue.toml (the loop's
        group commit: requests that arrive together). `items`: (fields, kind, who asked: None for
        this writer's own). Returns, in order, each one's Request as written or the DesiredError that
        refused it; a refused one never stops the others. Ids are given in the order of `items`."""
        from pydantic import ValidationError

        from reconciler.core.models import Request, parse

        results: list[Request | DesiredError | None] = [None] * len(items)
        good: list[tuple[int, dict[str, Any], str, str | None]] = []
        for i, (fields, kind, who) in enumerate(items):
            try:
                good.append((i, entry_dict(self._checked(fields, kind)), kind, who))
            except DesiredError as e:
                results[i] = e
        if not good:
            return results  # type: ignore[return-value]

        def edit(dfd: int) -> list[Request | DesiredError]:
            note = Note.load(dfd)
            q = self._load_queue(dfd, note)
            n = self._next_free(q, note, given_out=True)
            out: list[Request | DesiredError] = []
            entries, by = [], {}
            for _, base, kind, who in good:
                if n > MAX_ID:
                    out.append(DesiredError(f"{self.paths.queue}: no ids left (next would be r-{n}); nothing was changed"))
                    continue
                late = base.get("answer_by")
                if isinstance(late, (int, float)) and time.time() >= late:  # under the lock: before or never
                    out.append(CallerGone(base.get("request_id")))
                    continue
                entry = {"id": f"r-{n}", **base}
                try:
                    made = parse(Request, {**entry, "kind": kind})  # exactly what the reader will make of it
                except ValidationError as e:
                    out.append(DesiredError(f"{kind}: {first_error(e)[1]}; nothing was written"))
                    continue
                out.append(made)
                entries.append((kind, entry))
                by.setdefault(who if who is not None else self.who, []).append(made.id)
                n += 1
            if entries:
                q, new_text = self._appended(dfd, q, entries, n)
                q.top = n - 1
                self._commit_queue(dfd, q, new_text, note, "add", [e["id"] for _, e in entries], by)
            return out

        try:
            made = self._retrying(edit)
        except DesiredError as e:  # the edit as a whole (the lock, the file): nothing was written
            made = [e] * len(good)
        for (i, *_), one in zip(good, made):
            results[i] = one
        return results  # type: ignore[return-value]

    @staticmethod
    def _checked(request_fields: dict[str, Any], kind: str) -> "Request":
        """The new request as models.Request validates it (its id a stand-in), with every text it
        holds storable in queue.toml; DesiredError (nothing written) otherwise."""
        from pydantic import ValidationError

        from reconciler.core.models import Request, parse

        if kind not in KINDS:
            raise DesiredError(f"kind {kind!r}: must be one of {', '.join(KINDS)}")
        fields = dict(request_fields)
        if fields.pop("kind", kind) != kind:
            raise DesiredError(f"kind {request_fields['kind']!r} given for a {kind}")
        if "id" in fields:
            raise DesiredError("the writer allocates ids; do not pass one")
        if fields.get("created") is None:
            fields["created"] = time.time()
        for key, value in fields.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise DesiredError(f"{kind}: {key}: must be a finite number; nothing was written")
        try:
            req = parse(Request, {**fields, "id": "r-1", "kind": kind})
        except ValidationError as e:
            raise DesiredError(f"{kind}: {first_error(e)[1]}; nothing was written") from None
        texts = [("title", req.title), ("project", req.project), ("cwd", req.cwd)]
        texts += [(f"cmd[{i}]", arg) for i, arg in enumerate(req.cmd)]
        for k, v in req.env.items():
            texts += [(f"env {k!r}", k), (f"env {k}", v)]
            if "=" in k or not k:
                raise DesiredError(f"env {k!r}: not a variable name")
        texts += [(name, v) for name, v in (("lock", req.lock), ("owner_name", req.owner_name), ("by", req.by),
                                            ("task", req.task), ("reply_to", req.reply_to)) if v is not None]
        for where, text in texts:
            _check_text(where, text)
        return req

    def _appended(self, dfd: int, q: QueueFile, entries: list[tuple[str, dict[str, Any]]], next_id: int) -> tuple[QueueFile, str]:
        """(the queue, its new text) with `entries` appended as [[kind]] tables and the counter at
        `next_id`. The common case is a plain text edit (the new tables appended, the counter's digits
        replaced), checked by reading the new pieces back; a file the plain edit cannot handle exactly
        (multi-line strings, inline arrays of tables, ...) is edited with tomlkit and the whole result
        checked against the intended data."""
        added = {k: sum(1 for kind, _ in entries if kind == k) for k in KINDS}
        new_text = queue_edits.appended_plain(self.paths.queue, q, entries, next_id) if q.plain else None
        if new_text is None:
            q = self._full(dfd, q)
            new_text = queue_edits.appended_tomlkit(self.paths.queue, q, entries, next_id)
            q.counts = {k: len(q.data.get(k, [])) + added[k] for k in KINDS}
            q.plain = is_plain(new_text, q.counts)
        else:  # a plain edit of plain text stays plain: each block has one bare header, no multi-line string
            q.counts = {k: q.counts.get(k, 0) + added[k] for k in KINDS}
        q.next_id = next_id
        return q, new_text

    # ---------------------------------------------------------- remove

    def remove(self, ids: Iterable[str]) -> list[str]:
        """Remove the entries with these ids (jobs or notes). Returns the ids removed, in the order
        given; ids not in the file are fine (nothing to do). The counter is kept past every id that
        was present, so a removed id is never given out again."""
        wanted = list(dict.fromkeys(str(i) for i in ids))
        if not wanted:
            return []
        def edit(dfd: int) -> list[str]:
            note = Note.load(dfd)
            q = self._load_queue(dfd, note)
            if not q.exists:
                return []
            if q.data is None:
                done = self._removed_own(dfd, q, note, wanted)
                if done is not None:
                    return done
                q = self._full(dfd, q)
            return self._removed_any(dfd, q, note, wanted)

        return self._retrying(edit)

    def _removed_own(self, dfd: int, q: QueueFile, note: Note | None, wanted: list[str]) -> list[str] | None:
        """The writer's own last file, validated and plain: a plain text edit, each removed table
        checked on its own (its counter is already past every id in it). None: not possible here."""
        done = remove_plain(q.text, wanted)
        if done is None:
            return None
        new_text, removed = done
        if not removed:
            return []
        for kind in removed.values():
            q.counts[kind] -= 1
        self._commit_queue(dfd, q, new_text, note, "remove", list(removed))
        return [i for i in wanted if i in removed]

    def _removed_any(self, dfd: int, q: QueueFile, note: Note | None, wanted: list[str]) -> list[str]:
        """Any valid file: the entries removed as a plain text edit where the whole result reads back
        as intended, else with tomlkit; the counter kept past every id that was present."""
        assert q.data is not None
        doomed: dict[str, set[int]] = {}
        found: set[str] = set()
        for kind in KINDS:
            for i, raw in enumerate(q.data.get(kind, [])):
                if raw.get("id") in wanted:
                    doomed.setdefault(kind, set()).add(i)
                    found.add(raw["id"])
        if not found:
            return []
        next_id = self._next_free(q)
        expected: dict[str, Any] = dict(q.data)
        expected["next_id"] = next_id
        for kind, idx in doomed.items():
            expected[kind] = [e for i, e in enumerate(q.data[kind]) if i not in idx]
        counts = {k: len(expected.get(k, [])) for k in KINDS}
        new_text = queue_edits.removed_plain(self.paths.queue, q, found, next_id, expected) if q.plain else None
        if new_text is None:
            new_text = queue_edits.removed_tomlkit(self.paths.queue, q, doomed, next_id, expected)
        q.next_id, q.counts = next_id, counts
        q.plain = is_plain(new_text, counts)
        self._commit_queue(dfd, q, new_text, note, "remove", sorted(found))
        return [i for i in wanted if i in found]

    # ---------------------------------------------------------- update

    def update(self, job_id: str, changes: dict[str, Any], op: str = "update", why: str | None = None) -> bool:
        """Set keys of one entry (a value None takes its key out), as res itself changes a request (an
        auto-sized job killed at its limit, started again bigger: DESIGN §5.9; a job the ladder stopped,
        its book raised: §5.1), with tomlkit (comments and layout kept). `op`, `why`: what the change
        log says of it. True if the file changed; False when the entry is not there or already says so."""
        def edit(dfd: int) -> bool:
            q = self._full(dfd, self._load_queue(dfd))
            if not q.exists or q.data is None:
                return False
            where = next(((kind, i) for kind in KINDS for i, raw in enumerate(q.data.get(kind, []))
                          if raw.get("id") == job_id), None)
            if where is None:
                return False
            kind, i = where
            entry = {k: v for k, v in {**q.data[kind][i], **changes}.items() if v is not None}
            if entry == q.data[kind][i]:
                return False
            expected: dict[str, Any] = {**q.data, kind: [*q.data[kind][:i], entry, *q.data[kind][i + 1:]]}
            import tomlkit

            try:
                doc = tomlkit.parse(q.text)
                for key, value in changes.items():
                    if value is None:
                        if key in doc[kind][i]:
                            del doc[kind][i][key]
                    else:
                        doc[kind][i][key] = value
                new_text = tomlkit.dumps(doc)
            except Exception as e:
                raise DesiredError(f"{self.paths.queue}: could not edit it ({' '.join(str(e).split())}); nothing was changed") from None
            queue_edits.verify(self.paths.queue, new_text, expected)
            q.plain = is_plain(new_text, q.counts)
            self._commit_queue(dfd, q, new_text, None, op, [job_id], why=why)
            return True

        return self._retrying(edit)

    # ---------------------------------------------------------- restore

    def restore(self, requests: Iterable["Request"]) -> list[str]:
        """Write back entries that left queue.toml without a `res release` (the file deleted, laid
        down again by `res init --force`, or cut by hand) while the reconciler still holds them: each
        with its own id, the counter past them. Entries already present are left alone. Returns the
        ids written."""
        reqs = list(requests)
        if not reqs:
            return []

        def edit(dfd: int) -> list[str]:
            q = self._full(dfd, self._load_queue(dfd))
            assert q.data is not None
            present = {raw.get("id") for kind in KINDS for raw in q.data.get(kind, [])}
            missing = [r for r in reqs if r.id not in present]
            if not missing:
                return []
            highest = max(r.number for r in missing)
            q, text = self._appended(dfd, q, [(r.kind, {"id": r.id, **entry_dict(r)}) for r in missing],
                                     self._next_free(q, past=highest))
            q.top = max(q.top, highest)
            self._commit_queue(dfd, q, text, None, "restore", [r.id for r in missing])
            return [r.id for r in missing]

        return self._retrying(edit)

    # ---------------------------------------------------------- game

    def set_game(self, on: bool, until: float | None = None, if_until: float | None = None) -> "Game":
        """Write game mode: `on`, and `until` (epoch seconds) or no `until`. Keeps the file's comments.
        `if_until`: only if the file still says on until exactly then (the reconciler ending game
        mode must not undo a `game on` that extended it meanwhile); else the file's game is returned."""
        import tomlkit
        import tomllib

        from pydantic import ValidationError

        from reconciler.core.models import Game, parse

        if until is not None and not (isinstance(until, (int, float)) and math.isfinite(until)):
            raise DesiredError(f"until {until!r}: must be a finite time")
        try:
            game = parse(Game, {"on": on, "until": None if until is None else float(until)})
        except ValidationError as e:
            raise DesiredError(f"game: {first_error(e, Game)[1]}; nothing was written") from None
        path = self.paths.game

        def edit(dfd: int) -> "Game":
            try:
                got = read_file(dfd, path.name)
                raw, ident = got if got is not None else (None, None)
                text = template("game.toml") if raw is None else decode(raw)
                data, current = parse_game(text)
            except Bad as b:
                raise self._refuse(path, b) from None
            if if_until is not None and not (current.on and current.until == if_until):
                return current
            try:
                doc = tomlkit.parse(text)
                doc["on"] = game.on
                if game.until is None:
                    if "until" in doc:
                        del doc["until"]
                else:
                    doc["until"] = game.until
                new_text = tomlkit.dumps(doc)
            except Exception as e:
                raise DesiredError(f"{path}: could not edit it ({' '.join(str(e).split())}); nothing was changed") from None
            expected = {k: v for k, v in data.items() if k not in ("on", "until")}
            expected["on"] = game.on
            if game.until is not None:
                expected["until"] = game.until
            if tomllib.loads(new_text) != expected:
                raise DesiredError(f"{path}: the edit would not read back as intended; nothing was changed")
            self._outside_first(dfd, "game.toml", "missing" if raw is None else digest(raw))
            replace_if_unchanged(dfd, path.name, ident, new_text.encode("utf-8"))
            self._log_change(dfd, "game.toml", "on" if game.on else "off", [], digest(new_text.encode("utf-8")))
            return game

        return self._retrying(edit, path)

    # ---------------------------------------------------------- init (what it lays down: desired/templates.py)

    def init(self, force: bool = False) -> list[Path]:
        """Lay down the annotated templates (state/queue.toml, state/game.toml) where the files are
        missing, creating the state tree 0700. With `force`, existing files are replaced too; the old
        ones are kept beside them as `<name>.bak-<epoch>`, and the id counter carries on past every id
        the old queue or state.db has used. Returns the files written."""
        written: list[Path] = []
        with writer_locked(self.paths, self.timeout) as dfd:
            for name in ("queue.toml", "game.toml"):
                target = self.paths.desired / name
                try:
                    raw = read_bytes(dfd, name)
                    exists, found = raw is not None, "missing" if raw is None else digest(raw)
                except Bad:
                    exists, found = True, "unusable"  # present but unusable: only `force` replaces it
                if exists and not force:
                    continue
                self._outside_first(dfd, name, found)  # what is replaced or was removed: seen first
                if name == "queue.toml":
                    note = Note.load(dfd)
                    n = self._given_out(note)
                    if exists:
                        try:
                            n = self._next_free(self._load_queue(dfd), note, given_out=True)
                        except DesiredError:
                            pass
                    text = queue_template(n)
                else:
                    text = template(name)
                if exists:
                    move_aside(dfd, name, target)
                if name == "queue.toml":
                    counts = {k: 0 for k in KINDS}
                    fresh = QueueFile(True, text, n, 0, counts, is_plain(text, counts))
                    try:
                        self._commit_queue(dfd, fresh, text, None, "init", checked=True)
                    except Changed:
                        raise DesiredError(f"{target}: appeared while it was being laid down; try again") from None
                else:
                    write_atomic(dfd, name, text.encode("utf-8"))
                    self._log_change(dfd, name, "init", [], digest(text.encode("utf-8")))
                written.append(target)
        return written
