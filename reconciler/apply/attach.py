"""Streaming a job's output into its digest (DESIGN §5.4): read the log past the committed byte offset,
push complete lines, and hand back the record to commit — offset and digest state together, in one
compare-and-set on the holder, so a crash between reading and committing re-reads the same lines and
counts each of them once."""
from __future__ import annotations

import os
from pathlib import Path

from reconciler.core.agentclis import CLIS
from reconciler.core.agents import codex_call, model_from_command
from reconciler.core.codex import CodexDigest
from reconciler.core.digest import make_digest
from reconciler.core.lifecycle import transition
from reconciler.core.models import JobRecord, copy
from reconciler.core.pricing import PricingError, PricingTable, load_pricing
from reconciler.config.resources import shipped
from reconciler.runtime import read_output

CHUNK = 1 << 20  # read at a time: the bytes, their text and its lines stay in a core's cache
PRICING_LIMIT = 1 << 20
# Bytes of a job's log read in one pass: a job that writes without end (`yes`) never holds up a pass;
# its reader catches up over the next passes. A plain command's log past this at its end is skipped
# (nothing in it counts for anything but its line count).
PASS_READ_BYTES = 16 << 20


class AttachError(Exception):
    """Reading or digesting a job's output failed; the attachment is given up and retried."""


def pricing_override_path() -> Path:
    if os.environ.get("RES_PRICING_FILE"):
        return Path(os.environ["RES_PRICING_FILE"])
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(config) / "res" / "pricing.toml"


def load_pricing_files() -> tuple[PricingTable | None, str | None]:
    """The shipped table merged with the user's override; (None, one-line error) if either is broken."""
    from reconciler.config.files import FileProblem, read_text

    shipped_path = shipped("policies") / "pricing.toml"
    override_path = pricing_override_path()
    try:
        shipped_text = read_text(shipped_path, PRICING_LIMIT)
        if shipped_text is None:
            return None, f"pricing table unreadable: {shipped_path}: missing"
        override_text = read_text(override_path, PRICING_LIMIT)  # a FIFO or device: one line, never a hang
        return load_pricing(shipped_text, override_text, shipped_name=str(shipped_path),
                            override_name=str(override_path)), None
    except PricingError as e:
        return None, str(e)
    except FileProblem as e:
        return None, f"pricing table unreadable: {e}"


def ingest(rec: JobRecord, log_path: Path, pricing: PricingTable | None, final_rc: int | None = None,
           final: bool = False, limit: int | None = None, records=None) -> tuple[JobRecord, bool]:
    """(the record with its log read on from `log_offset`, whether the read reached the end). At
    most `limit` bytes are read (None: no limit): a job that writes without end never holds up a
    pass. To the last complete line; when `final` (the unit has ended) and the end is reached, a last
    line without a newline is complete and the digest is finished with `final_rc`. `records()`:
    res's other records (live and pruned), where a resumed Codex thread's earlier total is looked
    up when its rollout was not read. Nothing is committed here."""
    try:
        digest = make_digest(rec.request.agent, pricing, rec.digest, model=_asked_model(rec.request))
        if isinstance(digest, CodexDigest):  # what res run read of the session's configuration
            digest.session(usage_before=rec.request.usage_before, resumes=rec.request.resumes,
                           model_note=None if rec.request.model else rec.request.model_from,
                           earlier=None if records is None else thread_before(rec, records))
        offset = rec.log_offset
        budget = limit
        reached_end = False
        while True:
            want = CHUNK if budget is None else min(CHUNK, budget)
            if want <= 0:
                break
            data, new_offset = read_output(log_path, offset, want)
            if not data:
                reached_end = True
                break
            digest.push_lines(data)
            offset = new_offset
            if budget is not None:
                budget -= len(data)
        if final and reached_end:
            rest, _ = _read_rest(log_path, offset)
            if rest:
                digest.push(rest.decode("utf-8", "replace"))
                offset += len(rest)
            if not digest.finished:
                _read_session_usage(rec, digest)
            digest.finish(final_rc)
    except AttachError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of reading or digesting is an attach failure:
        # counted on the record with its error (last_error), and the job stopped at the limit
        # (ATTACH_FAILURES_MAX), so even a bug in a digest is said and never retried without end.
        raise AttachError(" ".join(f"{type(e).__name__}: {e}".split())[:300]) from None
    return copy(rec, **{"log_offset": offset, "digest": digest.state}), reached_end


def _read_session_usage(rec: JobRecord, digest) -> None:
    """For a CLI whose output names its session but not what it used (its record's usage_source): that
    from the CLI's own file of the session, what was written since the job started, handed to the
    digest once, as its output ends (a pass that crashes before committing reads it again, the same)."""
    cli = CLIS.get(rec.request.agent)
    if cli is None or cli.usage_source is None or not digest.session_id or rec.started is None:
        return
    from reconciler.config import agentusage

    found = getattr(agentusage, cli.usage_source)(digest.session_id, rec.request.env, rec.request.cwd, rec.started)
    if found is not None:
        digest.session_file(*found)


def thread_before(rec: JobRecord, records):
    """For a `codex exec resume` / `fork` whose rollout `res run` could not read (no usage_before):
    the function the digest asks, with the thread id its stream shows, for the thread's total before
    this invocation: the last total res recorded of it (`digest.thread_total` of the latest
    invocation of that thread started before this one, among `records()`), as (the thread it applies
    to, or "" for a fork's new thread; four counts); None where res never saw the thread.
    `records()` yields groups of records, live ones first: a later group is read only when the
    earlier ones hold no invocation of the thread (the pruned history can be long)."""
    call = codex_call(rec.request.cmd)
    if rec.request.usage_before is not None or call is None or call.subcommand not in ("resume", "fork"):
        return None

    def earlier(shown: str | None) -> tuple | None:
        thread = call.session or (shown if call.subcommand == "resume" else None)  # resume --last: the stream's
        if not thread:
            return None
        best = None
        for group in records():
            for r in group:
                d = r.digest
                if (r.id == rec.id or r.request.agent != "codex" or d is None or d.session_id != thread
                        or d.thread_total is None or r.started is None
                        or (rec.started is not None and r.started >= rec.started)):
                    continue
                if best is None or r.started > best.started:
                    best = r
            if best is not None:
                break
        if best is None:
            return None
        return ("" if call.subcommand == "fork" else thread, *best.digest.thread_total)

    return earlier


def _asked_model(req) -> str | None:
    """The model the session runs, as `res run` read it from its configuration (Codex), else as its
    command line says (`-m`)."""
    if req.model:
        return req.model
    if req.model_from and req.agent in CLIS and CLIS[req.agent].model_source:
        return None  # read, and not known: the digest prices it at the dearest rates, and says why
    return model_from_command(req.cmd)


def _read_rest(log_path: Path, offset: int) -> tuple[bytes, int]:
    try:
        with open(log_path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return b"", offset
    return data, offset + len(data)


class Streamer:
    """This reconciler's attachments: each pass it reads on the output of the jobs it holds, commits
    offset + digest state with a renewed lease (a compare-and-set on its hold), and gives up an
    attachment whose read failed so that it is re-attached (and counted) by a later pass."""

    def __init__(self, store, policy, holder: str, log_path):
        self.store, self.policy, self.holder, self.log_path = store, policy, holder, log_path
        self.pricing: PricingTable | None = None
        self.pricing_error: str | None = None
        self._pricing_key: tuple | None = None
        # Test-only fault injection (the fault tier): "once" fails the first read of each job in this
        # process, "always" every read.
        self.fault = os.environ.get("RES_FAULT_INGEST", "")
        self._faulted: set[str] = set()

    def refresh_pricing(self) -> None:
        """Reload the pricing table when its files change. A broken table keeps the last good one for
        sessions already running (never weaker) and reports the error, which starts no new session."""
        key = tuple(_stat_key(p) for p in (shipped("policies") / "pricing.toml", pricing_override_path()))
        if key == self._pricing_key:
            return
        table, error = load_pricing_files()
        self._pricing_key = key
        self.pricing_error = error
        if table is not None:
            self.pricing = table

    def stream(self, records: dict[str, JobRecord], now: float) -> None:
        """Read on every job this instance holds; `records` is updated with what was committed."""
        from reconciler.core.models import Phase

        for rec in list(records.values()):
            if rec.phase != Phase.running or rec.request.kind != "job" or rec.attached_by != self.holder:
                continue
            if rec.request.agent != "none" and self.pricing is None:
                continue  # no table to price it with yet: read nothing, count nothing
            try:
                read = self._ingest(rec, limit=PASS_READ_BYTES)
            except AttachError as e:
                self._failed(rec, str(e), now, records)
                continue
            renew = rec.lease_until is None or rec.lease_until - now < self.policy.attach_lease_s - self.policy.attach_renew_s
            if read.log_offset == rec.log_offset and not renew and rec.attach_failures == 0:
                continue
            new = transition(rec, "stream", now, read=read, lease_s=self.policy.attach_lease_s if renew else None)
            if self.store.put(new, expect_phase=rec.phase, expect_holder=self.holder):
                records[rec.id] = new

    def final(self, rec: JobRecord, rc: int | None, now: float) -> JobRecord | None:
        """The record with its whole log digested and the digest finished; None if the read failed
        (recorded; a later pass retries), unless that was the last failure allowed, or if an agent's
        log is not read to its end yet (committed so far; a later pass goes on). A plain command's
        log is not read past PASS_READ_BYTES: the rest is skipped."""
        from reconciler.core.plan import ATTACH_FAILURES_MAX

        try:
            read = self._ingest(rec, final=True, rc=rc, limit=PASS_READ_BYTES)
            if read.digest is not None and not read.digest.finished:
                if rec.request.agent != "none":
                    if self.store.put(read, expect_phase=rec.phase, expect_holder=rec.attached_by):
                        pass  # what was read counts; the rest next pass
                    return None
                size = _size(self.log_path(rec.id, rec.log_dir))
                read = self._ingest(copy(read, **{"log_offset": max(size, read.log_offset)}),
                                    final=True, rc=rc, limit=PASS_READ_BYTES)
            return read
        except AttachError as e:
            if rec.attach_failures + 1 >= ATTACH_FAILURES_MAX:
                return transition(rec, "read_failed", now, error=str(e))
            self._failed(rec, str(e), now, None)
            return None

    def _ingest(self, rec: JobRecord, final: bool = False, rc: int | None = None, limit: int | None = None) -> JobRecord:
        if self.fault == "always" or (self.fault == "once" and rec.id not in self._faulted):
            self._faulted.add(rec.id)
            raise AttachError("injected read failure (RES_FAULT_INGEST)")
        return ingest(rec, self.log_path(rec.id, rec.log_dir), self.pricing, final_rc=rc, final=final, limit=limit,
                      records=self._all_records)[0]

    def _all_records(self):
        """The records res keeps, live, then pruned (asked only for a resumed Codex thread whose
        rollout was not read, at each of its turn.completed until its earlier total is found)."""
        yield self.store.records().values()
        yield self.store.history()

    def _failed(self, rec: JobRecord, error: str, now: float, records: dict[str, JobRecord] | None) -> None:
        given_up = transition(rec, "attach_failed", now, error=error)
        if self.store.put(given_up, expect_phase=rec.phase, expect_holder=self.holder) and records is not None:
            records[rec.id] = given_up


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _stat_key(path: Path) -> tuple:
    try:
        st = path.stat()
        return (str(path), st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        return (str(path), None)
