"""Output digests (DESIGN §5.4–5.5): read an agent session's log line by line as it streams, and keep
what the guardrails need (tokens, spend, iterations) and how the session ended. Pure: no I/O, no clock.

The holder of a job's attachment reads the log past its committed byte offset, `push()`es each
complete line (a `str` without its newline), and commits `digest.state` together with the new offset
in one transaction. After a crash the next holder rebuilds the digest from that state
(`make_digest(agent, pricing, state=…)`) and pushes the lines after the offset: nothing is counted
twice or skipped, because everything a later line depends on is in the state. `finish(rc)` at exit.

What Claude Code's stream-json output looks like, and the sources read for it, is in
docs/agent-output.md.

Counting rules
--------------
- Usage is counted once per `message.id`. Of the lines of one message, the one with the highest
  `output_tokens` counts (the latest on a tie, so a mid-stream model fallback is taken whole): a later
  line replaces what the message added before, tokens and spend, by the difference. A line without an
  id counts on its own.
- `seen_message_ids` keeps the last 64 ids with what was counted for each (model and tokens), oldest
  first. The lines of one response are adjacent in the stream apart from a few tool results or the
  messages of parallel sub-agents, so 64 is far more than needed, and the state stays a few KB.
- `iterations`: distinct main-thread messages (`parent_tool_use_id` null, not `<synthetic>`), until a
  result event gives `num_turns`.
- `spend_usd`: tokens × the pricing table per message (its own model; an unknown model pays the
  conservative default) while streaming; a result's `total_cost_usd` replaces it (unless it says 0
  while tokens were spent: an agent that cannot price its model does not make the run free). The
  result's `modelUsage` (else `usage`) totals replace the token counts.
- Outcome: a seen result event decides (`is_error` or a subtype other than "success" → failure, with
  the subtype and its first error); without one, a failure signal (an assistant `error`) fails the run;
  only an output that says neither leaves it to the exit code at `finish(rc)`.
"""
from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reconciler.core.pricing import PricingTable, tokens, usage_tokens

SEEN_IDS_KEPT = 64
SYNTHETIC = "<synthetic>"
REASON_MAX = 200
AGENTS = ("none", "claude")

# (model, input, output, cache_write, cache_read, cache_write_1h) counted for one message id
Counted = tuple[str, int, int, int, int, int]


class DigestError(ValueError):
    """An unknown agent kind, or a state that does not belong to this digest."""


class DigestState(BaseModel):
    """Everything a digest knows: JSON round-trips exactly (model_dump_json / model_validate_json)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    agent: str = "none"
    lines: int = Field(default=0, ge=0)  # complete lines pushed, JSON or not
    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cache_write_tokens: int = Field(default=0, ge=0)
    cache_read_tokens: int = Field(default=0, ge=0)
    iterations: int = Field(default=0, ge=0)
    spend_usd: float = Field(default=0.0, ge=0)
    seen_message_ids: dict[str, Counted] = Field(default_factory=dict)  # oldest first, at most 64
    model: str | None = None  # from the init event
    session_id: str | None = None
    result_seen: bool = False
    failure_signal: str | None = None  # e.g. "assistant error: rate_limit"; decides only without a result
    outcome: Literal["success", "failure"] | None = None
    failure_reason: str | None = None
    finished: bool = False
    rc: int | None = None


_FIELDS = tuple(DigestState.model_fields)


class Digest:
    """push(line) as output streams, finish(rc) at exit, `state` to commit. Base: counts lines only."""

    agent = "none"

    def __init__(self, pricing: PricingTable | None = None, state: DigestState | None = None):
        self.pricing = pricing
        s = state or DigestState(agent=self.agent)
        if s.agent != self.agent:
            raise DigestError(f"a {s.agent!r} digest state cannot resume a {self.agent!r} digest")
        for name in _FIELDS:
            setattr(self, name, getattr(s, name))
        self.seen_message_ids = dict(s.seen_message_ids)

    @property
    def state(self) -> DigestState:
        vals = {name: getattr(self, name) for name in _FIELDS}
        vals["seen_message_ids"] = dict(self.seen_message_ids)
        return DigestState.model_construct(**vals)

    def push(self, line: str) -> None:
        self.lines += 1

    def finish(self, rc: int | None) -> None:
        """The process exited with `rc` (None: unknown, e.g. killed). Idempotent: the first call counts."""
        if self.finished:
            return
        self.finished = True
        self.rc = rc
        if self.outcome is not None:  # a result event decided
            return
        if self.failure_signal:
            self._fail(self.failure_signal)
        elif rc == 0:
            self.outcome, self.failure_reason = "success", None
        else:
            self._fail(f"exit code {rc}" if rc is not None else "no exit code (killed or lost)")

    def _fail(self, why: str) -> None:
        why = " ".join(why.split())
        self.outcome = "failure"
        self.failure_reason = why if len(why) <= REASON_MAX else why[: REASON_MAX - 1] + "…"


class NullDigest(Digest):
    """`--agent none`: reads nothing but the line count; the exit code decides."""

    agent = "none"


_SKIP = ('{"type":"user"', '{"type":"stream_event"')  # never needed: skip the parse (most of the bytes)


class ClaudeDigest(Digest):
    """Claude Code `--output-format stream-json --verbose` (see the module docstring)."""

    agent = "claude"

    def __init__(self, pricing: PricingTable, state: DigestState | None = None):
        if not isinstance(pricing, PricingTable):
            raise DigestError("the claude digest needs a pricing table")
        super().__init__(pricing, state)

    def push(self, line: str) -> None:
        self.lines += 1
        if line[:1] != "{":
            line = line.lstrip()
            if line[:1] != "{":
                return  # stderr text, a banner: counted, otherwise ignored
        if line.startswith(_SKIP):
            return
        try:
            ev = json.loads(line)
        except (ValueError, RecursionError):
            return  # a truncated or garbled line
        if type(ev) is not dict:
            return
        kind = ev.get("type")
        if kind == "assistant":
            self._assistant(ev)
        elif kind == "result":
            self._result(ev)
        elif kind == "system":
            if ev.get("subtype") == "init":
                m, sid = ev.get("model"), ev.get("session_id")
                if isinstance(m, str) and m:
                    self.model = m
                if isinstance(sid, str) and sid:
                    self.session_id = sid

    # ---------------------------------------------------------------- events

    def _assistant(self, ev: dict[str, Any]) -> None:
        err = ev.get("error")
        if isinstance(err, str) and err:
            self.failure_signal = f"assistant error: {err}"
        msg = ev.get("message")
        if type(msg) is not dict:
            return
        usage = msg.get("usage")
        if type(usage) is not dict:
            usage = {}
        model = msg.get("model")
        if not isinstance(model, str) or not model:
            model = self.model or ""
        new: Counted = (model, *usage_tokens(usage))
        mid = msg.get("id")
        if not isinstance(mid, str) or not mid:
            self._add(new, 1)
            self._count_turn(ev, model)
            return
        seen = self.seen_message_ids
        old = seen.get(mid)
        if old is None:
            seen[mid] = new
            if len(seen) > SEEN_IDS_KEPT:
                del seen[next(iter(seen))]
            self._add(new, 1)
            self._count_turn(ev, model)
        elif new != old and new[2] >= old[2]:  # the highest-output line of a message counts
            seen[mid] = new
            self._add(old, -1)
            self._add(new, 1)

    def _count_turn(self, ev: dict[str, Any], model: str) -> None:
        if ev.get("parent_tool_use_id") is None and model != SYNTHETIC:
            self.iterations += 1

    def _add(self, c: Counted, sign: int) -> None:
        model, inp, out, cw, cr, cw1h = c
        if sign > 0:
            self.input_tokens += inp
            self.output_tokens += out
            self.cache_write_tokens += cw
            self.cache_read_tokens += cr
        else:  # never below 0 (a result's totals may have replaced the counts since)
            self.input_tokens = max(0, self.input_tokens - inp)
            self.output_tokens = max(0, self.output_tokens - out)
            self.cache_write_tokens = max(0, self.cache_write_tokens - cw)
            self.cache_read_tokens = max(0, self.cache_read_tokens - cr)
        if inp or out or cw or cr:
            usd = self.pricing.cost_tokens(model or None, inp, out, cw, cr, cw1h)
            self.spend_usd = max(0.0, self.spend_usd + sign * usd)

    def _result(self, ev: dict[str, Any]) -> None:
        self.result_seen = True
        self._result_tokens(ev)
        turns = ev.get("num_turns")
        if type(turns) is int and turns >= 0:
            self.iterations = turns
        cost = ev.get("total_cost_usd")
        if type(cost) in (int, float) and math.isfinite(cost) and cost >= 0:
            if cost > 0 or self.spend_usd == 0:
                self.spend_usd = float(cost)
        subtype = ev.get("subtype")
        subtype = subtype if isinstance(subtype, str) and subtype else "result"
        is_error = ev.get("is_error") is True
        if subtype == "success" and not is_error:
            self.outcome, self.failure_reason = "success", None
            return
        detail = ""
        errors = ev.get("errors")
        if isinstance(errors, list):
            detail = next((e for e in errors if isinstance(e, str) and e.strip()), "")
        if not detail and is_error and isinstance(ev.get("result"), str):
            detail = ev["result"]
        why = subtype if subtype != "success" else "is_error"
        self._fail(f"{why}: {detail}" if detail.strip() else why)

    def _result_tokens(self, ev: dict[str, Any]) -> None:
        """The result's running totals replace the streamed counts: modelUsage (every model, sub-agents
        and background calls included) where given, else usage."""
        totals = None
        mu = ev.get("modelUsage")
        if type(mu) is dict and mu:
            acc, any_ = [0, 0, 0, 0], False
            for per in mu.values():
                if type(per) is not dict:
                    continue
                for i, k in enumerate(("inputTokens", "outputTokens", "cacheCreationInputTokens", "cacheReadInputTokens")):
                    if k in per:
                        any_ = True
                        acc[i] += tokens(per[k])
            totals = acc if any_ else None
        if totals is None:
            u = ev.get("usage")
            if type(u) is dict and any(k in u for k in ("input_tokens", "output_tokens")):
                totals = [tokens(u.get("input_tokens")), tokens(u.get("output_tokens")),
                          tokens(u.get("cache_creation_input_tokens")), tokens(u.get("cache_read_input_tokens"))]
        if totals is not None:
            self.input_tokens, self.output_tokens, self.cache_write_tokens, self.cache_read_tokens = totals


_KINDS: dict[str, type[Digest]] = {"none": NullDigest, "claude": ClaudeDigest}


def make_digest(agent: str, pricing: PricingTable | None,
                state: DigestState | dict[str, Any] | str | bytes | None = None) -> Digest:
    """The digest for `--agent <agent>`, fresh or resumed from a committed state (model, dict or JSON)."""
    kind = (agent or "none").strip().lower()
    cls = _KINDS.get(kind)
    if cls is None:
        raise DigestError(f"unknown agent {agent!r} (known: {', '.join(AGENTS)})")
    st: DigestState | None
    try:
        if state is None or isinstance(state, DigestState):
            st = state
        elif isinstance(state, (str, bytes)):
            st = DigestState.model_validate_json(state)
        else:
            st = DigestState.model_validate(state)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "state"
        raise DigestError(f"digest state: {where}: {err['msg']}") from None
    if cls is ClaudeDigest:
        return ClaudeDigest(pricing, st)  # type: ignore[arg-type]
    return cls(pricing, st)
