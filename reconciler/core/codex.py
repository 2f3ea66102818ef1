"""The digest of OpenAI Codex CLI's `codex exec --json` output (JSONL). Pure.

What it relies on (docs/codex-gemini-formats.md, with sources; real samples in tests/fixtures/codex):
`thread.started {thread_id}`, `turn.started`, `item.started|updated|completed {item}` (items:
agent_message, reasoning, command_execution, file_change, mcp_tool_call, web_search,
collab_tool_call, todo_list, plan, error), `turn.completed {usage}`, `turn.failed {error}`, and
top-level `error {message}`.

- Usage comes only with `turn.completed`: the thread's running total (input_tokens with
  cached_input_tokens inside it, output_tokens with reasoning inside it). It replaces the spend. A
  resumed thread's total includes its earlier runs: counted whole (a conservative over-read).
- Until then the spend is estimated per model call: a call costs at least BASE_INPUT_TOKENS of
  uncached input (the largest single-call input in the real samples), plus what the thread has
  shown since (tool outputs go back in as input), plus its own output by characters.
- A model call is the turn's first, then one after each tool item (a tool's result goes back to
  the model): `iterations`.
- The stream never names the model; the digest takes it from the command line (`-m` / `--model`),
  else from a `model rerouted: A -> B` notice, else prices the session as the dearest known model.
- Success: `turn.completed`. Failure: `turn.failed` (its message), or no marker at all (an
  interruption ends the stream without one), whatever the exit code.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from reconciler.core.digest import CHARS_PER_TOKEN, TOKENS_PER_BLOCK, CallEstimating
from reconciler.core.pricing import tokens

# The largest input a single model call of a fresh `codex exec` showed in the real samples
# (0.147.0: 17,792 tokens in one call); smaller ones: 3,020 (0.46.0), 14,429 (0.142.5).
BASE_INPUT_TOKENS = 18_000
TOOL_ITEMS = frozenset({"command_execution", "file_change", "mcp_tool_call", "web_search", "collab_tool_call"})
_REROUTED = re.compile(r"model rerouted: \S+ -> (\S+)")


class CodexDigest(CallEstimating):
    agent = "codex"
    base_input_tokens = BASE_INPUT_TOKENS
    events = frozenset({"thread.started", "turn.started", "turn.completed", "turn.failed", "error", "item.*"})

    def event(self, kind: str, ev: dict[str, Any]) -> None:
        if kind == "thread.started":
            tid = ev.get("thread_id")
            if isinstance(tid, str) and tid:
                self.session_id = tid
        elif kind == "turn.started":
            if self.turn_calls == 0:
                self._call(1)
        elif kind == "item.completed":
            self._item(ev.get("item"))
        elif kind == "turn.completed":
            self._completed(ev.get("usage"))
        elif kind == "turn.failed":
            err = ev.get("error")
            msg = err.get("message") if type(err) is dict else None
            self.result_seen = True
            self._fail(f"turn.failed: {msg}" if isinstance(msg, str) and msg.strip() else "turn.failed")
        elif kind == "error":
            msg = ev.get("message")
            if isinstance(msg, str) and not msg.startswith("Reconnecting"):
                self.failure_signal = f"error: {msg}"

    # ---------------------------------------------------------------- events

    def _item(self, item: Any) -> None:
        if type(item) is not dict:
            return
        kind = item.get("type")
        if kind in ("agent_message", "reasoning"):
            self._estimate_output(len(item.get("text") or ""))
        elif kind in TOOL_ITEMS:
            # its call's arguments were the model's output; its result goes back in with the next call
            self._estimate_output(len(json.dumps(item.get("arguments") or item.get("command") or item.get("changes") or "",
                                                 ensure_ascii=False)))
            shown = item.get("aggregated_output") or item.get("result") or ""
            self._call(self.turn_calls + 1 if self.turn_calls else 2,
                       len(shown if isinstance(shown, str) else json.dumps(shown, ensure_ascii=False)))
        elif kind == "error":
            m = _REROUTED.search(str(item.get("message") or ""))
            if m is not None:
                self.model = m.group(1).rstrip(".,);")

    def _estimate_output(self, chars: int) -> None:
        self._estimate(output_tokens=math.ceil(chars / CHARS_PER_TOKEN) + TOKENS_PER_BLOCK)

    def _completed(self, usage: Any) -> None:
        self._turn_done()
        self.outcome, self.failure_reason = "success", None
        if type(usage) is not dict:
            return
        inp, cached, out = tokens(usage.get("input_tokens")), tokens(usage.get("cached_input_tokens")), tokens(usage.get("output_tokens"))
        cached = min(cached, inp)
        self.input_tokens, self.cache_read_tokens, self.output_tokens = inp - cached, cached, out
        self.cache_write_tokens = 0
        self.spend_usd = self.pricing.cost_tokens(self.model or None, inp - cached, out, 0, cached)

    def finish(self, rc: int | None) -> None:
        if not self.finished and self.outcome is None and not self.failure_signal:
            self.failure_signal = "ended without turn.completed (interrupted, or killed)"
        super().finish(rc)
