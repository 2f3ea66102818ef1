"""The digest of Google Gemini CLI's `gemini -p … --output-format stream-json` output (JSONL). Pure.

What it relies on (docs/codex-gemini-formats.md, with sources; real samples in tests/fixtures/gemini):
`init {session_id, model}`, `message {role, content, delta}`, `tool_use`, `tool_result {status}`,
`error {severity, message}`, and a last `result {status, error?, stats?}`.

- Usage comes only with `result.stats`, the process's totals over every model call (helper calls
  to other models included): input_tokens (cached inside it), output_tokens (thinking outside
  it), total_tokens. Output is billed as total − input, thinking included; per model when
  `stats.models` names them.
- Until then the spend is estimated like Codex's: per model call at least BASE_INPUT_TOKENS of
  uncached input plus what was shown since, and the assistant's text by characters.
- A model call is the first, then one after each tool result: `iterations`.
- `init.model` is often an alias (`auto`, `auto-gemini-2.5`): the pricing table prices an alias as
  the dearest model it may route to.
- Success: `result.status` "success" with no error-severity `error` event before it (the CLI says
  success after "Maximum session turns exceeded"). Failure: `result.status` "error" (its message),
  an error-severity event, or no result at all (an auth failure prints no JSON).
"""
from __future__ import annotations

import json
import math
from typing import Any

from reconciler.core.digest import CHARS_PER_TOKEN, CallEstimating
from reconciler.core.pricing import tokens

# The input of a one-call session in the real samples: 7,352 (0.11.0, "Say hello"); with one tool
# call, 12,821 over two calls.
BASE_INPUT_TOKENS = 8_000


class GeminiDigest(CallEstimating):
    agent = "gemini"
    base_input_tokens = BASE_INPUT_TOKENS
    events = frozenset({"init", "message", "tool_use", "tool_result", "error", "result"})

    def event(self, kind: str, ev: dict[str, Any]) -> None:
        if kind == "init":
            m, sid = ev.get("model"), ev.get("session_id")
            if isinstance(m, str) and m and not self.asked_model:
                self.model = m
            if isinstance(sid, str) and sid:
                self.session_id = sid
            self._call(1)
        elif kind == "message":
            if ev.get("role") == "assistant":
                if self.turn_calls == 0:
                    self._call(1)
                self._estimate(output_tokens=math.ceil(len(str(ev.get("content") or "")) / CHARS_PER_TOKEN))
        elif kind == "tool_result":
            shown = ev.get("output") or ev.get("error") or ""
            self._call(self.turn_calls + 1 if self.turn_calls else 2,
                       len(shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False)))
        elif kind == "error":
            if ev.get("severity") == "error":
                self.failure_signal = f"error: {ev.get('message') or 'an error event'}"
        elif kind == "result":
            self._result(ev)

    def _result(self, ev: dict[str, Any]) -> None:
        self._turn_done()
        stats = ev.get("stats")
        if type(stats) is dict:
            self._usage(stats)
        status = ev.get("status")
        if status == "success" and not self.failure_signal:
            self.outcome, self.failure_reason = "success", None
        elif status == "success":
            self._fail(self.failure_signal)
        else:
            err = ev.get("error")
            msg = err.get("message") if type(err) is dict else None
            self._fail(f"result error: {msg}" if isinstance(msg, str) and msg.strip() else "result error")

    def _usage(self, stats: dict[str, Any]) -> None:
        """The process's totals replace the counts; the spend, model by model where named."""
        per_model = stats.get("models")
        parts = list(per_model.items()) if type(per_model) is dict and per_model else [(self.model, stats)]
        spend = 0.0
        totals = [0, 0, 0]
        for model, s in parts:
            if type(s) is not dict:
                continue
            inp, total = tokens(s.get("input_tokens")), tokens(s.get("total_tokens"))
            cached = min(tokens(s.get("cached")), inp)
            out = max(total - inp, tokens(s.get("output_tokens")))  # thinking is billed as output
            spend += self.pricing.cost_tokens(model if isinstance(model, str) else None, inp - cached, out, 0, cached)
            totals[0] += inp - cached
            totals[1] += out
            totals[2] += cached
        self.input_tokens, self.output_tokens, self.cache_read_tokens = totals
        self.cache_write_tokens = 0
        if spend > 0 or self.spend_usd == 0:
            self.spend_usd = spend

    def finish(self, rc: int | None) -> None:
        if not self.finished and self.outcome is None and not self.failure_signal:
            self.failure_signal = "ended without a result (no JSON: an auth or setup failure, or killed)"
        super().finish(rc)
