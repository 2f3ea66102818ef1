"""The digest of OpenAI Codex CLI's `codex exec --json` output (JSONL). Pure.

What it relies on (docs/codex-gemini-formats.md, with sources; real samples in tests/fixtures/codex,
real CLI runs in tests/agentcli): `thread.started {thread_id}`, `turn.started`,
`item.started|updated|completed {item}` (items: agent_message, reasoning, command_execution,
file_change, mcp_tool_call, web_search, collab_tool_call, todo_list, plan, error),
`turn.completed {usage}`, `turn.failed {error}`, and top-level `error {message}`.

- Usage comes only with `turn.completed`: the thread's running total (input_tokens with
  cached_input_tokens and cache_write_input_tokens inside it, output_tokens with reasoning inside it),
  summed over every model request. It is reported (`_reported`): the spend becomes its price, and the
  running estimate comes down to it.
- A resumed thread's total (`codex exec resume`) and a forked one's (`exec fork`, under a new thread
  id) start from the earlier thread's total, on every release measured (0.150.1, 0.152.0, 0.158.0,
  0.171.0). `res run` reads that total from the thread's rollout (config/agentmodel.py) and the
  request carries it (`usage_before`, `resumes`): it is taken off, so that each invocation counts
  once. Where the rollout could not be read (the log copied elsewhere, `$CODEX_HOME` not readable),
  the thread's last total as res itself recorded it (`thread_total` of its latest earlier
  invocation) is taken off instead: the shell answers `earlier(thread)` from its records, and the
  answer is kept (`records_before`). A total below it in any count started afresh, and counts
  whole; so does a resumed thread whose earlier total is not known (a conservative over-read).
- The prompt-length tier (gpt-5.4 / gpt-5.5 / gpt-6 `long`, over 272K) is chosen per request, from
  the average prompt of the model requests the digest counted (`iterations`).
- Until the usage comes the spend is estimated per model call: a call costs at least
  BASE_INPUT_TOKENS of uncached input (the largest single-call input in the real samples), plus what
  the thread has shown since (tool outputs go back in as input), plus its own output by characters.
- A model call is the turn's first, then one after each tool item (a tool's result goes back to
  the model): `iterations`.
- The stream never names the model; `res run` reads it from the session's configuration (core/agents
  codex_model: -m, -c model=, the project's and the user's config.toml, the CLI release's default),
  and a `model rerouted: A -> B` notice overrides it. Where none is known the dearest rates price the
  session and `model_note` says why.
- A `turn.failed` whose turn showed no model output billed nothing (the API refused the request: a
  quota, a rate limit, an invalid request; measured: Codex sends the request, gets the error, and
  reports no usage): its estimate is taken back (`_refused`). One after model output keeps it.
- A usage count that is no count (negative, a string, over 10**12, not finite) sets the line aside
  whole (BadNumber): it is read before anything is counted.
- Success: `turn.completed`. Failure: `turn.failed` (its message), or no marker at all (an
  interruption ends the stream without one), whatever the exit code.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Callable

from reconciler.core.digestbase import CHARS_PER_TOKEN, TOKENS_PER_BLOCK, CallEstimating
from reconciler.core.pricing import BadNumber, tokens

# The largest input a single model call of a fresh `codex exec` showed in the real samples
# (0.147.0: 17,792 tokens in one call); smaller ones: 3,020 (0.46.0), 14,429 (0.142.5).
BASE_INPUT_TOKENS = 18_000
TOOL_ITEMS = frozenset({"command_execution", "file_change", "mcp_tool_call", "web_search", "collab_tool_call"})
OUTPUT_ITEMS = TOOL_ITEMS | {"agent_message", "reasoning", "plan", "todo_list"}
USAGE_KEYS = ("input_tokens", "cached_input_tokens", "output_tokens", "cache_write_input_tokens")
_REROUTED = re.compile(r"model rerouted: \S+ -> (\S+)")


class CodexDigest(CallEstimating):
    agent = "codex"
    base_input_tokens = BASE_INPUT_TOKENS
    events = frozenset({"thread.started", "turn.started", "turn.completed", "turn.failed", "error", "item.*"})

    def __init__(self, pricing, state=None, model: str | None = None):
        super().__init__(pricing, state, model=model)
        self.usage_before: tuple[int, int, int, int] | None = None
        self.prompt_before = 0  # the thread's last request's prompt before this invocation (its context)
        self.resumes: str | None = None
        self.asked_note: str | None = None
        self.earlier: Callable[[str | None], tuple | None] | None = None

    def session(self, usage_before: list[int] | None = None, resumes: str | None = None,
                model_note: str | None = None, earlier: Callable[[str | None], tuple | None] | None = None) -> None:
        """What `res run` read of the session (the request's fields): the thread's usage before this
        invocation, for the thread `resumes` (None: whichever thread it starts, a fork's), and why no
        model is known, where none is. `earlier(thread id the stream shows)`: for a resume or fork
        whose rollout was not read, the shell's answer from its own records: (the thread it applies
        to, or "" for a fork's; input, cached input, output, cache-write input), or None."""
        if usage_before is not None and len(usage_before) in (4, 5):
            self.usage_before = tuple(int(x) for x in usage_before[:4])  # type: ignore[assignment]
            self.prompt_before = int(usage_before[4]) if len(usage_before) == 5 else 0
        self.resumes = resumes
        self.asked_note = model_note
        self.earlier = earlier

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
            self._failed_turn()
            why = f"turn.failed: {msg}" if isinstance(msg, str) and msg.strip() else "turn.failed"
            self.failure_signal = why  # it decides the run's outcome, reported usage or not
            self._fail(why)
        elif kind == "error":
            msg = ev.get("message")
            if isinstance(msg, str) and not msg.startswith("Reconnecting"):
                self.failure_signal = f"error: {msg}"

    # ---------------------------------------------------------------- events

    def _item(self, item: Any) -> None:
        if type(item) is not dict:
            return
        kind = item.get("type")
        if kind in ("agent_message", "reasoning", "plan"):
            self._estimate_output(len(item.get("text") or "") if isinstance(item.get("text"), str) else 0)
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

    def _call(self, n: int, shown_chars: int = 0) -> None:
        """The turn's `n`-th model call begins: its input, estimated, counts now: BASE_INPUT_TOKENS and
        what the thread has shown since; a resumed or forked thread's first call sends its whole
        context again (the prompt of its last request before, from the rollout: `usage_before`), at
        the input rate (its cache may be cold), the calls after it at the cache-read rate. Where the
        model bills cache writes above its input rate (GPT-6: 1.25x), the prompt is priced as written
        to the cache: a fresh thread's first call writes nearly all of it."""
        self.turn_calls = n
        self.iterations = self.turns_before + n
        self.context_chars += shown_chars
        shown = math.ceil(self.context_chars / CHARS_PER_TOKEN)
        rates = self.pricing.rates(self.model or None)
        if self.prompt_before and self.iterations == 1:  # a resumed thread's context, sent anew
            estimate = max(self.base_input_tokens, self.prompt_before) + shown
        else:  # … and in the cache for the calls after it
            cached = self.prompt_before * rates.cache_read / rates.input if rates.input > 0 else 0
            estimate = self.base_input_tokens + shown + math.ceil(cached)
        if rates.input > 0 and rates.cache_write > rates.input:
            estimate = math.ceil(estimate * rates.cache_write / rates.input)
        self._estimate(input_tokens=estimate)

    def _estimate_output(self, chars: int) -> None:
        self._estimate(output_tokens=math.ceil(chars / CHARS_PER_TOKEN) + TOKENS_PER_BLOCK)

    def _completed(self, usage: Any) -> None:
        counts = _usage(usage)  # first: a hostile count sets the line aside before anything counts
        self._turn_done()
        self.outcome, self.failure_reason = "success", None
        if counts is None or not any(counts):
            self.result_seen = self.spend_usd == 0  # no usage (a provider that reports none): the estimate stands
            return
        self.thread_total = counts
        inp, cached, out, cw = self._this_invocation(counts)
        cached = min(cached, inp)
        cw = min(cw, inp - cached)
        uncached = inp - cached - cw
        self._note_rates(self.model)
        usd = self.pricing.cost_tokens(self.model or None, uncached, out, cw, cached, requests=max(1, self.iterations))
        self._reported(usd, uncached, out, cached, cw)

    def _this_invocation(self, counts: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
        """This invocation's part of the thread's running total: the total less the thread's total
        before it (a resumed or forked thread), unless the total is below it in some count (it
        started afresh: counted whole)."""
        base, applies = self.usage_before, self.resumes
        if base is None and self.records_before is None and self.earlier is not None:
            self.records_before = _before(self.earlier(self.session_id))
        if base is None and self.records_before is not None:
            thread, *before = self.records_before
            base, applies = tuple(before), thread or None
        if base is None or (applies is not None and self.session_id not in (None, applies)):
            return counts
        if all(c >= b for c, b in zip(counts, base)):
            return tuple(c - b for c, b in zip(counts, base))  # type: ignore[return-value]
        return counts

    def _failed_turn(self) -> None:
        """The turn ended failed: with no model output seen in it (no item the model wrote since it
        began or since the last usage), the API refused it and it billed nothing; else what it did
        cost stays, by estimate, and no longer belongs to a turn under way."""
        refused = self.turn_tokens[1] == 0
        self.turns_before += self.turn_calls
        self.turn_calls = 0
        self.iterations = self.turns_before
        if refused:
            self._refused()
            if self.spend_usd == 0:
                self.result_seen = True  # nothing billed at all: $0.00 exactly
        else:
            self.turn_usd, self.turn_tokens = 0.0, (0, 0)
            self.result_seen = False  # the spend includes an estimate of what this turn billed

    def _note_rates(self, model: str | None) -> None:
        super()._note_rates(model)
        if model is None and self.asked_note and self.model_note:
            self.model_note = self.asked_note

    def finish(self, rc: int | None) -> None:
        if not self.finished and self.outcome is None and not self.failure_signal:
            self.failure_signal = "ended without turn.completed (interrupted, or killed)"
        super().finish(rc)


def _before(found: Any) -> tuple[str, int, int, int, int] | None:
    """The shell's answer of a thread's earlier total, if it is one: (thread or "", four counts)."""
    if not isinstance(found, tuple) or len(found) != 5 or not isinstance(found[0], str):
        return None
    if not all(type(c) is int and 0 <= c <= 10**12 for c in found[1:]):
        return None
    return found


def _usage(usage: Any) -> tuple[int, int, int, int] | None:
    """(input, cached input, output, cache-write input) of a turn.completed usage; None without one. A
    count that is present and no count (negative, a string, a bool, over 10**12, not finite) raises
    BadNumber: the line is set aside. Absent or null counts are 0 (older CLIs have fewer fields)."""
    if type(usage) is not dict:
        return None
    out = []
    for key in USAGE_KEYS:
        v = usage.get(key)
        if v is None:
            out.append(0)
            continue
        if type(v) not in (int, float) or v < 0 or (type(v) is float and not v.is_integer() and math.isfinite(v)):
            raise BadNumber(f"usage.{key} {str(v)[:24]!r} is no token count")
        out.append(tokens(v))
    return out[0], out[1], out[2], out[3]
