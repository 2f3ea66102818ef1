"""The digest of GitHub Copilot CLI's `copilot -p … --output-format json` output (JSONL, one event a
line), and of the usage its session file records. Pure.

What it relies on (docs/agent-output.md; real samples in tests/fixtures/copilot: 1.0.102 against a
model on loopback, and a public 1.0.55-1 session file): every line is `{type, data, id, timestamp,
parentId, ephemeral?}`. `model.call_start` (a model call begins; `data.model`), `assistant.message`
(`data.model`, `data.content`, `data.toolRequests`), `tool.execution_complete` (`success`,
`result.content` or `error.message`), and a last `result` (`sessionId`, `exitCode`, `usage` with
premium requests, durations and code changes). No line of the stream names a token count.

- Until the session's own record is read, each model call is estimated (BASE_INPUT_TOKENS plus what
  the session has shown the model since; its output by characters), so that a cost budget sees a
  running session's spend growing.
- The tokens are in the session's file, `$COPILOT_HOME/session-state/<sessionId>/events.jsonl`: 1.0.102
  writes a `session.usage_record` for each model call (`usage`: model, inputTokens with the cached and
  cache-written ones in it, outputTokens, cacheReadTokens, cacheWriteTokens, reasoningTokens, cost);
  earlier versions only a `session.shutdown` at exit whose `modelMetrics` sum them per model. The
  shell reads them at the job's end (config/agentusage.py: this job's records only, by their time)
  and hands them to `session_file`: they replace the estimates.
- Spend: the tokens priced by res's table at the model each record names (Copilot's `cost` is premium
  requests, not dollars, and 0 for a model of your own).
- `iterations` counts model calls (model.call_start). Outcome: a `result` with a non-zero exitCode
  fails the run; else the exit code decides.
"""
from __future__ import annotations

import json
import math
from typing import Any

from reconciler.core.digestbase import CHARS_PER_TOKEN, TOKENS_PER_BLOCK, CallEstimating
from reconciler.core.pricing import BadNumber, tokens

# The prompt of a fresh `copilot -p` call with its default tools: 1.0.102 sent 47,967 bytes to the
# loopback model for a one-line prompt (its request body; ~12,000 tokens at 4 characters a token).
BASE_INPUT_TOKENS = 12_000

# One model call's usage as the session file records it, as res counts it:
# (model, uncached input, output with reasoning, cache read, cache write)
Usage = tuple[str, int, int, int, int]


class CopilotDigest(CallEstimating):
    agent = "copilot"
    base_input_tokens = BASE_INPUT_TOKENS
    events = frozenset({"model.call_start", "assistant.message", "tool.execution_complete", "result"})

    def event(self, kind: str, ev: dict[str, Any]) -> None:
        data = ev.get("data") if type(ev.get("data")) is dict else {}
        if kind == "model.call_start":
            if not self.model and isinstance(data.get("model"), str):
                self.model = data["model"]
            self._call(self.turn_calls + 1)
        elif kind == "assistant.message":
            if not self.asked_model and isinstance(data.get("model"), str) and data["model"]:
                self.model = data["model"]
            text = data.get("content") if isinstance(data.get("content"), str) else ""
            calls = data.get("toolRequests") if type(data.get("toolRequests")) is list else []
            chars = len(text) + sum(len(json.dumps(c.get("arguments"), ensure_ascii=False))
                                    for c in calls if type(c) is dict)
            self._estimate(output_tokens=math.ceil(chars / CHARS_PER_TOKEN) + TOKENS_PER_BLOCK * (1 + len(calls)))
        elif kind == "tool.execution_complete":
            result = data.get("result") if type(data.get("result")) is dict else {}
            error = data.get("error") if type(data.get("error")) is dict else {}
            shown = result.get("content") if isinstance(result.get("content"), str) else error.get("message")
            self.context_chars += len(shown) if isinstance(shown, str) else 0
        elif kind == "result":
            sid = ev.get("sessionId")
            if isinstance(sid, str) and sid:
                self.session_id = sid
            # the run's calls are over, but what they used is still the estimate (result_seen stays
            # False: the spend reads as estimated until the session's file has been read)
            self.turns_before += self.turn_calls
            self.turn_calls = 0
            self.iterations = self.turns_before
            code = ev.get("exitCode")
            if type(code) is int and code != 0:
                self.failure_signal = f"copilot exit code {code}"

    def session_file(self, records: list[Any], shutdowns: list[Any]) -> None:
        """What the session file holds of this run (config/agentusage.py: the `usage` of each
        `session.usage_record`, the data of each `session.shutdown`, written since the job started):
        the records where there are any (1.0.102: one per model call), else the shutdowns' per-model
        totals (earlier versions). They are the spend from now on, the estimates dropped. A record
        with a count no model call has is set aside, nothing of it counted."""
        calls: list[Usage] = []
        for item in records if records else shutdowns:
            try:
                if records:
                    u = usage_of_record(item)
                    calls.extend([u] if u is not None else [])
                else:
                    calls.extend(usage_of_shutdown(item))
            except BadNumber as e:
                self._set_aside(f"copilot's session file: {e}")
        if not calls:
            return
        spent = 0.0
        inp = out = cache_read = cache_write = 0
        for model, i, o, cr, cw in calls:
            self._note_rates(model or self.model)
            spent += self.pricing.cost_tokens(model or self.model or None, i, o, cw, cr)
            inp, out, cache_read, cache_write = inp + i, out + o, cache_read + cr, cache_write + cw
        self._reported(spent, inp, out, cache_read, cache_write)

def usage_of_record(usage: Any) -> Usage | None:
    """One `session.usage_record`'s `usage` (or one model's `modelMetrics[m].usage`, with its model),
    as res counts it: inputTokens holds the cached and cache-written tokens, so they are taken out of
    it; outputTokens is the whole output (reasoningTokens a part of it: in the 1.0.55 sample a model
    that reasoned has reasoningTokens 0 and tokenDetails.output equal to outputTokens). None where it
    is no usage object. A count no model call has raises BadNumber."""
    if type(usage) is not dict:
        return None
    model = usage.get("model") if isinstance(usage.get("model"), str) else ""
    counts = []
    for key in ("inputTokens", "outputTokens", "reasoningTokens", "cacheReadTokens", "cacheWriteTokens"):
        v = usage.get(key)
        if v is not None and (type(v) not in (int, float) or v < 0
                              or (type(v) is float and not (math.isfinite(v) and v.is_integer()))):
            raise BadNumber(f"{key} {str(v)[:24]!r} is no token count")
        counts.append(tokens(v) if v is not None else 0)
    total_in, out, _reasoning, cache_read, cache_write = counts
    return model, max(0, total_in - cache_read - cache_write), out, cache_read, cache_write


def usage_of_shutdown(data: Any) -> list[Usage]:
    """A `session.shutdown`'s per-model totals (`modelMetrics`), one entry per model."""
    metrics = data.get("modelMetrics") if type(data) is dict else None
    out = []
    for model, m in (metrics.items() if type(metrics) is dict else ()):
        u = usage_of_record(dict(m.get("usage"), model=model) if type(m) is dict and type(m.get("usage")) is dict else None)
        if u is not None:
            out.append(u)
    return out
