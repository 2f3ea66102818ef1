"""What every agent's output digest is made of (DESIGN §5.4–5.5): the state a digest commits with
its log offset (DigestState), the base that counts lines and decides the outcome at exit (Digest,
NullDigest for `--agent none`), and the base of the agents whose output carries their usage only at
the end (CallEstimating: Codex, Gemini), which estimates each model call until it does. Pure: no
I/O, no clock.

Each agent's own digest is a module of its own above this one (Claude Code's in core/digest.py,
Codex's in core/codex.py, Gemini's in core/gemini.py, OpenCode's in core/opencode.py), and
core/digest.make_digest picks one by the agent's name: the agents' modules import this one, never each other or make_digest's.
"""
from __future__ import annotations

import json
import json.scanner
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from reconciler.core.pricing import BadNumber, PricingTable

REASON_MAX = 200

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
    # What every message seen has cost by its own counts, never replaced by a result's total (a
    # result may leave out what a background sub-agent or an interrupted turn already spent):
    # budgets check the larger of the two (core/spend.running_spend_usd).
    estimate_usd: float = Field(default=0.0, ge=0)
    seen_message_ids: dict[str, Counted] = Field(default_factory=dict)  # oldest first, at most 64
    # Per message id (the last 64): characters of output content seen on its lines, and the exact
    # output count a stream_event message_delta gave (--include-partial-messages).
    message_size: dict[str, tuple[int, int]] = Field(default_factory=dict)  # (characters, content blocks)
    exact_output: dict[str, int] = Field(default_factory=dict)
    streaming: dict[str, str] = Field(default_factory=dict)  # stream ("" = main thread) -> its message id
    turns_before: int = Field(default=0, ge=0)  # num_turns of the results already seen in this process
    turn_calls: int = Field(default=0, ge=0)  # model calls of the turn under way (0: none yet)
    messages: int = Field(default=0, ge=0)  # distinct messages counted (sub-agents' included)
    context_chars: int = Field(default=0, ge=0)  # codex, gemini: characters shown to the model so far (estimates)
    recognized: int = Field(default=0, ge=0)  # lines that were events of the agent's format
    model: str | None = None  # from the init event
    session_id: str | None = None
    result_seen: bool = False
    failure_signal: str | None = None  # e.g. "assistant error: rate_limit"; decides only without a result
    outcome: Literal["success", "failure"] | None = None
    failure_reason: str | None = None
    finished: bool = False
    rc: int | None = None
    # Lines set aside: a usage count or cost no model call has (10**400 tokens, 1e308 USD). Nothing of
    # such a line counts; the last one is named.
    set_aside: int = Field(default=0, ge=0)
    set_aside_note: str | None = None
    # Why the rates used are the dearest ([default]): no model named, or one the table does not know.
    model_note: str | None = None
    # codex, gemini: what the turn under way has added by estimate since it began or since the agent
    # last reported its usage, taken back whole if the turn turns out to have billed nothing.
    turn_usd: float = Field(default=0.0, ge=0)
    turn_tokens: tuple[int, int] = (0, 0)  # (input, output)
    # claude: sub-agents (Task / Agent tool calls of the main thread) under way, by tool use id (the
    # last 64): (model, prompt tokens of the sub-agent's last message seen, characters of the tool
    # results it got since, whether that message called a tool, its message id; "" = none seen yet).
    # A message that called a tool is always followed by another model call; Claude Code 1.0.x never
    # streams that closing call of a sub-agent, so it is counted when the sub-agent's result arrives.
    subagents: dict[str, tuple[str, int, int, bool, str]] = Field(default_factory=dict)
    # claude: per pricing-table model, what its requests with a prompt past the model's long-context
    # threshold cost above its standard rates, counted from their own lines (a price table without
    # that tier, as Claude Code 2.1.328's for Sonnet 4 / 4.5, leaves it out of its total).
    long_extra: dict[str, float] = Field(default_factory=dict)
    # gemini: the `--output-format json` document being read across lines, its response text dropped
    json_doc: str | None = Field(default=None, max_length=65536)
    # claude: the input, cache-write and cache-read tokens of the messages streamed (each message id
    # once), never replaced by a result's totals, and what they cost at each message's rates: how a
    # result that counted every model call twice (Claude Code 1.0.77-1.0.86) is told and corrected.
    streamed: tuple[int, int, int] = (0, 0, 0)
    streamed_input_usd: float = Field(default=0.0, ge=0)
    # codex: the thread's running total (input, cached input, output, cache-write input) as its last
    # turn.completed reported it: where a resumed thread's rollout cannot be read, a later `exec
    # resume` of the thread starts from this (res's own record of it).
    thread_total: tuple[int, int, int, int] | None = None
    # codex: the thread's total before this invocation taken from res's own records of its earlier
    # invocations (the request had none: the rollout was not readable at submit), and the thread it
    # applies to ("": a fork's new thread). Kept, so that every later pass counts from the same figure.
    records_before: tuple[str, int, int, int, int] | None = None


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
            value = getattr(s, name)
            setattr(self, name, dict(value) if isinstance(value, dict) else value)  # never the committed one

    @property
    def state(self) -> DigestState:
        vals = {name: getattr(self, name) for name in _FIELDS}
        return DigestState.model_construct(**{k: dict(v) if isinstance(v, dict) else v for k, v in vals.items()})

    def push(self, line: str) -> None:
        self.lines += 1

    def push_lines(self, data: bytes) -> None:
        """push() each complete line of `data` (a log's bytes; a line ends with a newline, and what
        follows the last one is not a line yet), decoded as UTF-8 with bad bytes replaced."""
        for line in data.decode("utf-8", "replace").split("\n")[:-1]:
            self.push(line)

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

    def _set_aside(self, why: str) -> None:
        """The line just pushed is hostile or broken (BadNumber): nothing of it was counted."""
        self.set_aside += 1
        self.set_aside_note = f"line {self.lines}: {why}; set aside, nothing of it counted"

    def _fail(self, why: str) -> None:
        why = " ".join(why.split())
        self.outcome = "failure"
        self.failure_reason = why if len(why) <= REASON_MAX else why[: REASON_MAX - 1] + "…"


class NullDigest(Digest):
    """`--agent none`: reads nothing but the line count; the exit code decides."""

    agent = "none"


# What one output token is worth in characters of the content on an assistant line, at the least
# (real transcripts: 0.6–3.7 chars a token over 15 messages; tests/pure/test_digest_real.py), and the
# tokens each content block costs beyond its characters (framing, a tool call's name and id).
CHARS_PER_TOKEN = 2.0
TOKENS_PER_BLOCK = 12


class CallEstimating(Digest):
    """An agent whose output carries its usage only at the end (Codex, Gemini): each event line is a
    JSON object with a `type`, and until the usage comes each model call is estimated at
    `base_input_tokens` of uncached input plus what the session has shown the model since, priced at
    the session's model (the command line's or configuration's, else what the output names, else the
    dearest rates, which `model_note` then names).

    Once the agent reports its usage (`_reported`), that is the spend, and the running estimate comes
    down to it: estimates are only for what it has not reported yet. A turn that billed nothing (the
    API refused it: a quota, a rate limit, before any output) is taken back whole (`_refused`)."""

    base_input_tokens = 0
    events: frozenset = frozenset()  # the `type`s of the agent's format

    def __init__(self, pricing: PricingTable, state: DigestState | None = None, model: str | None = None):
        if not isinstance(pricing, PricingTable):
            raise DigestError(f"the {self.agent} digest needs a pricing table")
        super().__init__(pricing, state)
        self.asked_model = model  # the command line's -m: more exact than what the output names
        if model and not self.model:
            self.model = model
        self._noted: str | None = ""  # the model model_note was last worked out for ("": none yet)

    def push(self, line: str) -> None:
        self.lines += 1
        if line[:1] != "{":
            return  # stderr text, a notice: counted, otherwise ignored
        try:
            ev = parse_line(line)
        except (ValueError, RecursionError, StopIteration):
            return
        if type(ev) is not dict:
            return
        kind = ev.get("type")
        if kind in self.events or (isinstance(kind, str) and kind.startswith("item.") and "item.*" in self.events):
            self.recognized += 1
            try:
                self.event(kind, ev)
            except BadNumber as e:  # the event reads its numbers before it counts anything
                self._set_aside(str(e))

    def event(self, kind: str, ev: dict[str, Any]) -> None:
        raise NotImplementedError

    def _call(self, n: int, shown_chars: int = 0) -> None:
        """The turn's `n`-th model call begins: its input, estimated, counts now."""
        self.turn_calls = n
        self.iterations = self.turns_before + n
        self.context_chars += shown_chars
        self._estimate(input_tokens=self.base_input_tokens + math.ceil(self.context_chars / CHARS_PER_TOKEN))

    def _estimate(self, input_tokens: int = 0, output_tokens: int = 0) -> None:
        """Work the agent has not reported yet: it counts, by estimate, on the spend and the tokens."""
        self._note_rates(self.model)
        usd = self.pricing.cost_tokens(self.model or None, input_tokens, output_tokens)
        self.estimate_usd += usd
        self.spend_usd += usd
        self.turn_usd += usd
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.turn_tokens = (self.turn_tokens[0] + input_tokens, self.turn_tokens[1] + output_tokens)

    def _reported(self, usd: float, input: int, output: int, cache_read: int, cache_write: int = 0) -> None:
        """The agent stated its usage (priced by the caller): it is the spend from now on, and what
        was estimated before it is dropped."""
        self.spend_usd = self.estimate_usd = usd
        self.input_tokens, self.output_tokens = input, output
        self.cache_read_tokens, self.cache_write_tokens = cache_read, cache_write
        self.turn_usd, self.turn_tokens = 0.0, (0, 0)
        self.result_seen = True

    def _refused(self) -> None:
        """The turn under way billed nothing (refused before any output): its estimate is taken back."""
        self.spend_usd = max(0.0, self.spend_usd - self.turn_usd)
        self.estimate_usd = max(0.0, self.estimate_usd - self.turn_usd)
        self.input_tokens = max(0, self.input_tokens - self.turn_tokens[0])
        self.output_tokens = max(0, self.output_tokens - self.turn_tokens[1])
        self.turn_usd, self.turn_tokens = 0.0, (0, 0)

    def _note_rates(self, model: str | None) -> None:
        """model_note: why the dearest rates price this session, if they do."""
        if model == self._noted:
            return
        self._noted = model
        if self.pricing.resolve(model)[0] is not None:
            self.model_note = None
        else:
            self.model_note = (f"no price for model {model!r}" if model
                               else f"no model named (give -m)")

    def _turn_done(self) -> None:
        self.result_seen = True
        self.turns_before += self.turn_calls
        self.turn_calls = 0
        self.iterations = self.turns_before


_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # the C scanner, without json.loads' wrappers


def parse_line(line: str) -> Any:
    """One JSON value that is the whole line (trailing white space allowed), as json.loads reads it."""
    value, end = _SCAN(line, 0)
    if end != len(line) and line[end:].strip():
        raise ValueError("extra data after the value")
    return value
