"""Output digests (DESIGN §5.4–5.5): read an agent session's log line by line as it streams, and keep
what the guardrails need (tokens, spend, iterations) and how the session ended. Pure: no I/O, no clock.

The holder of a job's attachment reads the log past its committed byte offset, `push()`es each
complete line (a `str` without its newline), and commits `digest.state` together with the new offset
in one transaction. After a crash the next holder rebuilds the digest from that state
(`make_digest(agent, pricing, state=…)`) and pushes the lines after the offset: nothing is counted
twice or skipped, because everything a later line depends on is in the state. `finish(rc)` at exit.

This module is Claude Code's digest and `make_digest`, which picks an agent's; what every digest is
made of (the state, the base, Codex's and Gemini's CallEstimating) is core/digestbase.py's.

What Claude Code's stream-json output looks like, and the sources read for it, is in
docs/agent-output.md.

Counting rules (measured on the real transcripts in tests/fixtures/claude/real; docs/agent-output.md)
--------------
- Usage is counted once per `message.id`; a later line of a message replaces what it added before,
  tokens and spend, by the difference. A line without an id counts on its own. `<synthetic>` lines
  (notices Claude Code writes itself) count nothing.
- Output: the `output_tokens` of an assistant line is a placeholder (1–8) on nearly every line. A
  message's output counts as the largest of that, an estimate from its content (characters of text,
  thinking and tool input / CHARS_PER_TOKEN, + TOKENS_PER_BLOCK a block), and — with
  `--include-partial-messages` — the exact count of its `stream_event` `message_delta`, which wins.
- Sub-agents (a Task / Agent tool call): a message that calls a tool is always followed by another
  model call, and Claude Code 1.0.x streams a sub-agent's tool calls but never the call that writes
  its answer (anthropics/claude-code#4845). When the sub-agent's result reaches the main thread and
  its last message seen called a tool (or none was seen), that call counts, at the least it can have
  cost: the last prompt seen read from the cache, the tool results since written to it, the result's
  text as output. Not for a background agent's launch result (its lines come later).
- `seen_message_ids` and the per-message sizes keep the last 64 ids, oldest first: the lines of one
  response are adjacent in the stream apart from a few tool results or the messages of parallel
  sub-agents, so 64 is far more than needed, and the state stays a few KB.
- `iterations`: Claude Code's num_turns counts one turn for a turn's first model call and one for
  each main-thread `user` line with content blocks (a tool's result, an interruption): two parallel
  tool calls are two. Each result's `num_turns` is its own turn's; a process serving several turns
  adds them up.
- `spend_usd`: tokens × the pricing table per message (its own model; an unknown model pays the
  conservative default) while streaming; a result's `total_cost_usd` (the whole process's, restated
  at every result) replaces it, unless it says 0 while tokens were spent. `estimate_usd` is never
  replaced; a budget checks `running_spend_usd` (core/spend.py): the larger of the two, the estimate
  with a margin for background calls no line shows (BACKGROUND_MARGIN). The result's `modelUsage`
  (else `usage`) totals replace the token counts.
- A result that counted every model call twice: Claude Code 1.0.77-1.0.86 added each API response's
  usage to its totals twice (anthropics/claude-code#5904; 1.0.88: "Fixed incorrect usage tracking in
  /cost"), so its `usage` holds exactly twice the input, cache-write and cache-read tokens of the
  messages it streamed, and its `total_cost_usd` about twice the bill (output: once, plus one token
  a call). Where a result without `modelUsage` says exactly that, the second count of those tokens
  (`streamed_input_usd`, at each message's rates) is taken off its total and its token counts are
  halved; the doubled background calls no line shows stay in (a slight over-read). Seen on real
  Opus 4.1 transcripts of Claude Code 1.0.8x (tests/fixtures/claude/real/githubgg-*).
- Outcome: a seen result event decides (`is_error` or a subtype other than "success" → failure, with
  the subtype and its first error); without one, a failure signal (an assistant `error`) fails the run;
  only an output that says neither leaves it to the exit code at `finish(rc)`.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import ValidationError

from reconciler.core.agentclis import CLIS
from reconciler.core.digestbase import (CHARS_PER_TOKEN, TOKENS_PER_BLOCK, Counted, Digest, DigestError, DigestState,
                                        NullDigest, parse_line)
from reconciler.core.pricing import MAX_TOKENS, BadNumber, PricingTable, tokens, usage_tokens, usd

SEEN_IDS_KEPT = 64
SYNTHETIC = "<synthetic>"

# How a request was served, where its usage says so, kept with its model in the counts (`model|fast`).
MODE_FAST = "|fast"
MODE_US = "|us"


def _served(model: str) -> tuple[str, bool, bool]:
    """(the model, answered in fast mode, run in the US only) of a counted message's model."""
    if "|" not in model:
        return model, False, False
    name, _, flags = model.partition("|")
    return name, "fast" in flags, "us" in flags


# The tools that start a sub-agent (Claude Code 1.0.x: Task; 2.x: Agent).
SUBAGENT_TOOLS = frozenset({"Task", "Agent"})


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
        head = line[:40]  # "type" comes first on every line but a result (there it may come late)
        if '"user"' in head:  # tool results: most of the bytes; only whether it starts a model call
            self.recognized += 1
            self._user(line)
            return
        if '"stream_event"' in head:
            self.recognized += 1
            try:
                if line.startswith(_COMPACT_EVENT):  # the event's type at a known place: no scan of the line
                    if line.startswith(("message_start", "message_delta"), len(_COMPACT_EVENT)):
                        self._stream_line(line)
                elif '"message_start"' in line or '"message_delta"' in line:
                    self._stream_line(line)
            except BadNumber as e:
                self._set_aside(str(e))
            return  # text deltas: nothing in them that counts
        elif '"system"' in head:
            if '"init"' not in line[:80] or self._init_line(line):
                self.recognized += 1
                return  # hooks, status, thinking-token ticks; an init line read in place
        elif '"rate_limit_event"' in head or '"control_' in head:
            return
        try:
            ev = parse_line(line)
        except (ValueError, RecursionError, StopIteration):
            return  # a truncated or garbled line
        if type(ev) is not dict:
            return
        kind = ev.get("type")
        if kind in ("assistant", "result", "system", "stream_event"):
            self.recognized += 1
        try:
            if kind == "assistant":
                self._assistant(ev)
            elif kind == "stream_event":
                self._stream_event(ev)
            elif kind == "result":
                self._result(ev)
        except BadNumber as e:  # read before anything of the line was counted
            self._set_aside(str(e))
            return
        if kind == "system":
            if ev.get("subtype") == "init":
                m, sid = ev.get("model"), ev.get("session_id")
                if isinstance(m, str) and m:
                    self.model = m
                if isinstance(sid, str) and sid:
                    self.session_id = sid

    # ---------------------------------------------------------------- events

    def _init_line(self, line: str) -> bool:
        """The session's model and id from an init line without parsing its lists of tools, where
        each key is there once (so at the top level) with a plain string: else False."""
        if line.count('"model":') != 1 or line.count('"session_id":') != 1:
            return False
        model, sid = _INIT_MODEL.search(line), _INIT_SESSION.search(line)
        if model is None or sid is None:
            return False
        self.model, self.session_id = model.group(1), sid.group(1)
        return True


    def _assistant(self, ev: dict[str, Any]) -> None:
        msg = ev.get("message")
        usage = msg.get("usage") if type(msg) is dict else None
        if type(usage) is not dict:
            usage = {}
        inp, out, cw, cr, cw1h = usage_tokens(usage)  # first: a line with a hostile count changes nothing
        mode = (MODE_FAST if usage.get("speed") == "fast" else "") + (MODE_US if usage.get("inference_geo") == "us" else "")
        err = ev.get("error")
        if isinstance(err, str) and err:
            self.failure_signal = f"assistant error: {err}"
        if type(msg) is not dict:
            return
        model = msg.get("model")
        if not isinstance(model, str) or not model:
            model = self.model or ""
        if model == SYNTHETIC:
            return  # a notice Claude Code writes itself (an API error's text): no model call, no cost
        counted_model = model + mode  # how it was served rides with the model: the rates depend on it
        content = msg.get("content")
        chars, blocks = _content_size(content)
        parent = ev.get("parent_tool_use_id")
        if parent is None and self.turn_calls == 0:
            self._calls(1)  # a turn's first model call
        mid = msg.get("id")
        if parent is None:
            self._subagents_started(content, model, inp + cw + cr)
        elif type(parent) is str and parent in self.subagents:
            self._subagent_call(parent, model, mid if isinstance(mid, str) else "", inp + cw + cr, content)
        if not isinstance(mid, str) or not mid:
            self._add((counted_model, inp, max(out, _estimate(chars, blocks)), cw, cr, cw1h), 1)
            return
        before = self.message_size.get(mid, (0, 0))
        chars, blocks = chars + before[0], blocks + before[1]
        _keep(self.message_size, mid, (chars, blocks))
        self._count(mid, (counted_model, inp, out, cw, cr, cw1h), _estimate(chars, blocks))

    def _count(self, mid: str, new: Counted, estimate: int) -> None:
        """What message `mid` adds, from its latest line: the output its lines show (a placeholder on
        most), at least what its content's size says, or the exact count a message_delta gave."""
        model, inp, out, cw, cr, cw1h = new
        old = self.seen_message_ids.get(mid)
        exact = self.exact_output.get(mid)
        if exact is not None:
            out = exact
        else:
            out = max(out, estimate, old[2] if old is not None else 0)
        new = (model, inp, out, cw, cr, cw1h)
        streamed = not mid.endswith("#answer")  # a sub-agent's answer counted by the digest: not a line
        if old is None:
            _keep(self.seen_message_ids, mid, new)
            self.messages += 1
            self._add(new, 1, streamed)
        elif new != old:
            self.seen_message_ids[mid] = new
            self._add(old, -1, streamed)
            self._add(new, 1, streamed)

    def _stream_line(self, line: str) -> None:
        """A message_start or message_delta event, read without parsing the whole line where its
        shape is the usual one (a few thousand of these a session)."""
        m = _STREAM_HEAD.match(line)
        if m is None:
            self._stream_parsed(line)
            return
        kind, rest = m.group(1), line[m.end():]
        stream = _stream_of(line)
        if stream is None:
            return
        if kind == "message_start":
            mid = _MESSAGE_ID.search(rest)
            if mid is not None:
                _keep(self.streaming, stream, mid.group(1))
        else:
            out = _DELTA_OUTPUT.search(rest)
            if out is None:  # a usage shaped otherwise: parsed whole
                self._stream_parsed(line)
                return
            digits = out.group(1)
            count = tokens(int(digits) if len(digits) <= 15 else float("inf"))
            mid = self.streaming.get(stream)
            if mid is not None:
                self._exact(mid, count)

    def _stream_parsed(self, line: str) -> None:
        try:
            ev = json.loads(line)
        except (ValueError, RecursionError):
            return
        if type(ev) is dict:
            self._stream_event(ev)

    def _exact(self, mid: str, output: int) -> None:
        _keep(self.exact_output, mid, output)
        old = self.seen_message_ids.get(mid)
        if old is not None:
            self._count(mid, old, 0)

    def _stream_event(self, ev: dict[str, Any]) -> None:
        """--include-partial-messages: a message_start names the message its stream is in; the
        message_delta that ends it carries its real output count (the assistant lines only a
        placeholder)."""
        e = ev.get("event")
        if type(e) is not dict:
            return
        stream = ev.get("parent_tool_use_id") or ""
        if not isinstance(stream, str):
            return
        if e.get("type") == "message_start":
            m = e.get("message")
            mid = m.get("id") if type(m) is dict else None
            if isinstance(mid, str) and mid:
                _keep(self.streaming, stream, mid)
        elif e.get("type") == "message_delta":
            mid = self.streaming.get(stream)
            u = e.get("usage")
            if mid is None or type(u) is not dict or "output_tokens" not in u:
                return
            self._exact(mid, tokens(u.get("output_tokens")))

    def _user(self, line: str) -> None:
        """A main-thread user line with content blocks (a tool's result, an interruption) starts
        another model call of the turn: Claude Code's num_turns counts them so. Told without
        parsing the line (it holds the tool's whole output)."""
        if '"parent_tool_use_id":null' not in line and '"parent_tool_use_id": null' not in line:
            if self.subagents:  # a sub-agent's tool result: what its next model call reads
                i = line.rfind('"parent_tool_use_id"')  # the top-level key, after the message: no scan
                p = _PARENT_ANY.match(line, i) if i >= 0 else None
                sub = self.subagents.get(p.group(1)) if p is not None else None
                if sub is not None:
                    self.subagents[p.group(1)] = (sub[0], sub[1], sub[2] + len(line), sub[3], sub[4])
            return
        m = _CONTENT.search(line)
        if m is not None and m.group(1) == "[":
            self._calls(self.turn_calls + 1 if self.turn_calls else 2)
        if self.subagents:
            for tid in [t for t in self.subagents if t in line]:
                self._subagent_done(tid, line)

    # ------------------------------------------------------------ sub-agents

    def _subagents_started(self, content: Any, model: str, prompt: int) -> None:
        """A main-thread message that calls Task / Agent starts a sub-agent: until one of its messages
        is seen, its answer is a model call of no known size (its prompt counted as the caller's, its
        input the task's text)."""
        if type(content) is not list:
            return
        for block in content:
            if (type(block) is dict and block.get("type") == "tool_use" and block.get("name") in SUBAGENT_TOOLS
                    and isinstance(block.get("id"), str) and block["id"]):
                task = len(_TOOL_INPUT_JSON(block.get("input")))
                _keep(self.subagents, block["id"], (model, prompt, task, True, ""))

    def _subagent_call(self, tid: str, model: str, mid: str, prompt: int, content: Any) -> None:
        """A line of sub-agent `tid`'s own messages (the lines of one message are adjacent)."""
        calls = type(content) is list and any(type(b) is dict and b.get("type") == "tool_use" for b in content)
        _, _, chars, called, last = self.subagents[tid]
        if mid and mid == last:
            self.subagents[tid] = (model, prompt, chars, called or calls, last)
        else:  # its next model call: the tool results before it are in its prompt
            self.subagents[tid] = (model, prompt, 0, calls, mid)

    def _subagent_done(self, tid: str, line: str) -> None:
        """Sub-agent `tid`'s result reached the main thread. If its last message seen called a tool,
        or none was seen, the call that wrote its answer was never streamed (Claude Code 1.0.x streams
        only a sub-agent's tool calls): it counts now, at the least it can have cost — the prompt of
        the last message seen read from the cache, the tool results since written to it, the answer
        (the result's text) as output. Not for a background agent just launched (its lines come
        later) nor a failed one (it may have made no call)."""
        try:
            ev = parse_line(line)
        except (ValueError, RecursionError, StopIteration):
            return
        msg = ev.get("message") if type(ev) is dict else None
        content = msg.get("content") if type(msg) is dict else None
        result = next((b for b in content if type(b) is dict and b.get("type") == "tool_result"
                       and b.get("tool_use_id") == tid), None) if type(content) is list else None
        if result is None:
            return  # the id named otherwise: not its result
        model, prompt, chars, open_, _ = self.subagents.pop(tid)
        if not open_ or result.get("is_error") is True or "async_launched" in line:
            return
        answer = result.get("content")
        out = _estimate(*((len(answer), 1) if isinstance(answer, str) else _content_size(answer)))
        self._count(f"{tid}#answer", (model, 0, out, math.ceil(chars / CHARS_PER_TOKEN), prompt, 0), out)

    def _calls(self, n: int) -> None:
        self.turn_calls = n
        self.iterations = self.turns_before + n

    def _add(self, c: Counted, sign: int, streamed: bool = True) -> None:
        model, inp, out, cw, cr, cw1h = c
        if streamed and (inp or cw or cr):
            name, fast, us = _served(model)
            i, w, r = self.streamed
            self.streamed = (max(0, i + sign * inp), max(0, w + sign * cw), max(0, r + sign * cr))
            price = self.pricing.cost_tokens(name or None, inp, 0, cw, cr, cw1h, fast=fast, us_only=us)
            self.streamed_input_usd = max(0.0, self.streamed_input_usd + sign * price)
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
            name, fast, us = _served(model)
            usd = self.pricing.cost_tokens(name or None, inp, out, cw, cr, cw1h, fast=fast, us_only=us)
            self.spend_usd = max(0.0, self.spend_usd + sign * usd)
            self.estimate_usd = max(0.0, self.estimate_usd + sign * usd)
            long = None if fast else self.pricing.rates(name or None).long
            if long is not None and inp + cw + cr > long.above:  # (rare: a long-context request)
                standard = self.pricing.standard_cost(name or None, inp, out, cw, cr, cw1h)
                standard *= self.pricing.inference_geo_us if us else 1.0
                key = self.pricing.key(name) or ""
                self.long_extra[key] = max(0.0, self.long_extra.get(key, 0.0) + sign * (usd - standard))

    def _result(self, ev: dict[str, Any]) -> None:
        totals = self._result_totals(ev)  # first: a line with a hostile number changes nothing
        cost = usd(ev.get("total_cost_usd"))
        correction = self._cost_correction(ev.get("modelUsage"))
        if correction and cost is not None:
            cost += correction
        if totals is not None and self._counted_twice(ev, totals):
            totals = [totals[0] // 2, totals[1], totals[2] // 2, totals[3] // 2]
            if cost is not None:
                cost = max(0.0, cost - self.streamed_input_usd)
        turns = ev.get("num_turns")
        if type(turns) is int and turns > MAX_TOKENS:
            raise BadNumber(f"num_turns {turns}"[:40])
        self.result_seen = True
        if totals is not None:
            self.input_tokens, self.output_tokens, self.cache_write_tokens, self.cache_read_tokens = totals
        # One process may serve several turns (--input-format stream-json): each result's num_turns
        # is its own turn's, its total_cost_usd and modelUsage the whole process's.
        if type(turns) is int and turns >= 0:
            self.turns_before += turns
        else:
            self.turns_before += self.turn_calls
        self.turn_calls = 0
        self.iterations = self.turns_before
        if cost is not None and (cost > 0 or self.spend_usd == 0):
            self.spend_usd = cost
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

    def _cost_correction(self, mu: Any) -> float:
        """What the result's total_cost_usd leaves out or adds, model by model from its modelUsage:
        a model the CLI has no price for (costBasis "unknown", charged at its default model's rates)
        costs the pricing table's price instead; and where the CLI's table has no long-context tier
        that ours has, the requests past it cost what they did above the standard rates. 0 where the
        CLI's figures stand (or modelUsage gives no costUSD: older versions)."""
        if type(mu) is not dict:
            return 0.0
        total = 0.0
        for model, per in mu.items():
            if type(per) is not dict:
                continue
            cost = usd(per.get("costUSD"))
            if cost is None:
                continue
            counts = (tokens(per.get("inputTokens")), tokens(per.get("outputTokens")),
                      tokens(per.get("cacheCreationInputTokens")), tokens(per.get("cacheReadInputTokens")),
                      tokens(per.get("cacheCreationEphemeral1hInputTokens")))
            if per.get("costBasis") == "unknown":
                total += self.pricing.cost_tokens(model, *counts) - cost
            elif self.long_extra:
                extra = self.long_extra.get(self.pricing.key(model) or "", 0.0)
                if extra > 0 and abs(cost - self.pricing.standard_cost(model, *counts)) <= 1e-9 + 1e-9 * cost:
                    total += extra  # the CLI priced every request at the standard rates
        return total

    def _counted_twice(self, ev: dict[str, Any], totals: list[int]) -> bool:
        """A result of Claude Code 1.0.77-1.0.86, which counted every API response twice: no
        modelUsage, and its input, cache-write and cache-read tokens exactly twice what was streamed."""
        if "modelUsage" in ev or not any(self.streamed):
            return False
        inp, _, cw, cr = totals
        return (inp, cw, cr) == tuple(2 * n for n in self.streamed)

    @staticmethod
    def _result_totals(ev: dict[str, Any]) -> list[int] | None:
        """The result's running totals, which replace the streamed counts: modelUsage (every model,
        sub-agents and background calls included) where given, else usage; None if it has neither."""
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
        return totals






_CONTENT = re.compile(r'"content"[ \t\r\n]*:[ \t\r\n]*([\["])')  # JSON's white space only
# The compact shape Claude Code writes: {"type":"stream_event","event":{"type":"message_start",…
_COMPACT_EVENT = '{"type":"stream_event","event":{"type":"'
_STREAM_HEAD = re.compile(r'\{"type":"stream_event","event":\{"type":"(message_start|message_delta)"')
_MESSAGE_ID = re.compile(r'"message":\{[^{}]*?"id":"([^"\\]+)"')
# A message_delta's own usage: output_tokens before any nested object (output_tokens_details, iterations)
_DELTA_OUTPUT = re.compile(r'"usage":\{(?:"\w+":(?:\d+|null|"[^"]*"),)*?"output_tokens":(\d+)')


def _stream_of(line: str) -> str | None:
    """The stream a compact stream_event line belongs to: "" for the main thread, else the tool use
    that started the sub-agent; None when it cannot be told without parsing."""
    if '"parent_tool_use_id":null' in line:
        return ""
    m = _PARENT.search(line)
    return m.group(1) if m is not None else None


_INIT_MODEL = re.compile(r'"model":"([^"\\]+)"')
_INIT_SESSION = re.compile(r'"session_id":"([^"\\]+)"')
_PARENT = re.compile(r'"parent_tool_use_id":"([^"\\]+)"')
_PARENT_ANY = re.compile(r'"parent_tool_use_id"[ \t\r\n]*:[ \t\r\n]*"([^"\\]+)"')  # JSON's white space only


_TOOL_INPUT_JSON = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(…, ensure_ascii=False), made once


def _content_size(content: Any) -> tuple[int, int]:
    """(characters of output in a message's content blocks, how many blocks): text, thinking, a tool
    call's name and input as JSON."""
    if type(content) is not list:
        return 0, 0
    chars = blocks = 0
    for block in content:
        if type(block) is not dict:
            continue
        blocks += 1
        kind = block.get("type")
        if kind == "text":
            chars += len(block.get("text") or "")
        elif kind == "thinking":
            chars += len(block.get("thinking") or "")
        elif kind == "tool_use":
            chars += len(str(block.get("name") or "")) + len(_TOOL_INPUT_JSON(block.get("input")))
    return chars, blocks


def _estimate(chars: int, blocks: int) -> int:
    return math.ceil(chars / CHARS_PER_TOKEN) + TOKENS_PER_BLOCK * blocks


def _keep(d: dict, key: str, value) -> None:
    """d[key] = value; at most SEEN_IDS_KEPT keys, the first seen going first."""
    if key in d:
        d[key] = value
        return
    d[key] = value
    if len(d) > SEEN_IDS_KEPT:
        del d[next(iter(d))]


def _kinds() -> dict[str, type[Digest]]:
    from reconciler.core.codex import CodexDigest
    from reconciler.core.copilot import CopilotDigest
    from reconciler.core.gemini import GeminiDigest
    from reconciler.core.opencode import OpenCodeDigest

    # what a CLI's record calls its digest (NullDigest: its output carries no usage)
    named = {d.__name__: d for d in (ClaudeDigest, CodexDigest, GeminiDigest, OpenCodeDigest, CopilotDigest, NullDigest)}
    return {"none": NullDigest, **{name: named[cli.digest] for name, cli in CLIS.items()}}


def make_digest(agent: str, pricing: PricingTable | None,
                state: DigestState | dict[str, Any] | str | bytes | None = None, model: str | None = None) -> Digest:
    """The digest for `--agent <agent>`, fresh or resumed from a committed state (model, dict or JSON).
    `model`: what the session's command line asks for (agents.model_from_command), where the output
    does not say it exactly."""
    kind = (agent or "none").strip().lower()
    cls = _kinds().get(kind)
    if cls is None:
        raise DigestError(f"unknown agent {agent!r} (known: {', '.join(_kinds())})")
    st: DigestState | None
    try:
        if state is None or isinstance(state, DigestState):
            st = state
        elif isinstance(state, (str, bytes)):
            st = DigestState.model_validate_json(state)
        else:
            st = DigestState.model_validate(state)
    except ValidationError as e:
        from reconciler.core.invalid import first

        raise DigestError(f"digest state: {first(e.errors(), DigestState)[1]}") from None
    if cls in (NullDigest, ClaudeDigest):
        return cls(pricing, st)  # type: ignore[arg-type]
    return cls(pricing, st, model=model)  # type: ignore[call-arg]
