"""The digest of OpenCode's `opencode run --format json` output (JSONL, one event a line). Pure.

What it relies on (docs/agent-output.md; real samples in tests/fixtures/opencode, from OpenCode 1.18.33
against a model on loopback): every event has `type`, `timestamp`, `sessionID` and `part`:
`step_start` (a model call begins), `text`, `reasoning` (with --thinking), `tool_use` (once, when the
tool completed or failed: `part.state.status`, `input`, `output` or `error`), `step_finish` (a model
call ended: `part.reason` "tool-calls" or "stop", `part.tokens` {total, input, output, reasoning,
cache {read, write}}, `part.cost` in USD), and `error` (`error.name`, `error.data.message`).

- Each model call reports its own usage at its `step_finish`: `input` is the prompt without what was
  read from or written to the cache, `output` without `reasoning`. Until it comes, the call is
  estimated (BASE_INPUT_TOKENS plus what the session has shown the model since, its output by
  characters); at its step_finish the estimate is taken back and the reported usage counts.
- Spend: `part.cost` where OpenCode priced the call (its catalogue's price); 0 is also what it says
  for a model it has no price for (a custom provider), so then the tokens are priced by res's table
  at the model the command line names (`-m provider/model`; the provider is taken off), else the
  dearest rates, which `model_note` names.
- A model call is a step: `iterations` counts step_starts.
- Outcome: an `error` event fails the run (its name and message); else the exit code decides.
"""
from __future__ import annotations

import math
from typing import Any

from reconciler.core.digestbase import CHARS_PER_TOKEN, TOKENS_PER_BLOCK, CallEstimating
from reconciler.core.pricing import BadNumber, tokens, usd

# The prompt of a fresh `opencode run` call with its default tools and system prompt: 1.18.33 sent
# about 9,000 tokens' worth (its request body to the loopback model, by characters / 4); the sample
# of 1.18.21 in docs/research/opencode-copilot.md reported 7,952 uncached.
BASE_INPUT_TOKENS = 8_000


class OpenCodeDigest(CallEstimating):
    agent = "opencode"
    base_input_tokens = BASE_INPUT_TOKENS
    events = frozenset({"step_start", "step_finish", "text", "reasoning", "tool_use", "error"})

    def __init__(self, pricing, state=None, model: str | None = None):
        if model and "/" in model:  # `-m provider/model`: the table knows models by their own names
            model = model.split("/", 1)[1]
        super().__init__(pricing, state, model=model)

    def event(self, kind: str, ev: dict[str, Any]) -> None:
        sid = ev.get("sessionID")
        if isinstance(sid, str) and sid and self.session_id is None:
            self.session_id = sid
        part = ev.get("part") if type(ev.get("part")) is dict else {}
        if kind == "step_start":
            self._call(self.turn_calls + 1)
        elif kind in ("text", "reasoning"):
            text = part.get("text")
            self._estimate(output_tokens=math.ceil(len(text) / CHARS_PER_TOKEN) + TOKENS_PER_BLOCK
                           if isinstance(text, str) else TOKENS_PER_BLOCK)
        elif kind == "tool_use":
            state = part.get("state") if type(part.get("state")) is dict else {}
            shown = state.get("output") if isinstance(state.get("output"), str) else state.get("error")
            self.context_chars += len(shown) if isinstance(shown, str) else 0
        elif kind == "step_finish":
            self._step_finish(part)
        elif kind == "error":
            err = ev.get("error") if type(ev.get("error")) is dict else {}
            data = err.get("data") if type(err.get("data")) is dict else {}
            name = err.get("name") if isinstance(err.get("name"), str) else "error"
            msg = data.get("message") if isinstance(data.get("message"), str) else ""
            self.failure_signal = f"{name}: {msg}" if msg else name
            self._fail(self.failure_signal)

    def _step_finish(self, part: dict[str, Any]) -> None:
        counts = _tokens(part.get("tokens"))  # first: a hostile count sets the line aside before anything counts
        cost = part.get("cost")
        if cost is not None:
            cost = usd(cost)
        # the call's estimate out, its own report in
        self.spend_usd = max(0.0, self.spend_usd - self.turn_usd)
        self.estimate_usd = max(0.0, self.estimate_usd - self.turn_usd)
        self.input_tokens = max(0, self.input_tokens - self.turn_tokens[0])
        self.output_tokens = max(0, self.output_tokens - self.turn_tokens[1])
        self.turn_usd, self.turn_tokens = 0.0, (0, 0)
        self.turns_before += self.turn_calls
        self.turn_calls = 0
        self.iterations = self.turns_before
        if counts is None:
            return
        inp, out, cache_read, cache_write = counts
        self._note_rates(self.model)
        if cost:
            spent = cost
            self.model_note = None  # OpenCode priced it
        else:
            spent = self.pricing.cost_tokens(self.model or None, inp, out, cache_write, cache_read)
        self.spend_usd += spent
        self.estimate_usd += spent
        self.input_tokens += inp
        self.output_tokens += out
        self.cache_read_tokens += cache_read
        self.cache_write_tokens += cache_write
        self.result_seen = True
        if part.get("reason") == "stop" and self.outcome is None:
            self.outcome, self.failure_reason = "success", None


def _tokens(value: Any) -> tuple[int, int, int, int] | None:
    """(input, output with reasoning, cache read, cache write) of a step_finish's tokens; None without
    them. A count that is present and no count raises BadNumber."""
    if type(value) is not dict:
        return None
    cache = value.get("cache") if type(value.get("cache")) is dict else {}
    out = []
    for v in (value.get("input"), value.get("output"), value.get("reasoning"), cache.get("read"), cache.get("write")):
        if v is None:
            out.append(0)
            continue
        if type(v) not in (int, float) or v < 0 or (type(v) is float and not (math.isfinite(v) and v.is_integer())):
            raise BadNumber(f"tokens {str(v)[:24]!r} is no token count")
        out.append(tokens(v))
    return out[0], out[1] + out[2], out[3], out[4]
