"""The digest of Google Gemini CLI's headless output, `gemini -p … --output-format stream-json` (JSONL)
or `--output-format json` (one pretty-printed object at the end). Pure.

What it relies on (docs/agent-output.md and docs/codex-gemini-formats.md, with sources; real samples
in tests/fixtures/gemini, the CLI's own source google-gemini/gemini-cli):

stream-json: `init {session_id, model}`, `message {role, content, delta}`, `tool_use`,
`tool_result {status, output?}`, `error {severity, message}`, and a last `result {status, error?,
stats}` — also on errors (`handleError` emits it with the stats so far, exit code = the error's).

json: `{"session_id", "response", "stats": {"models": {<model>: {"api": {"totalRequests", …},
"tokens": {"prompt", "candidates", "total", "cached", "thoughts", "tool", "input"}, "roles"?}},
"tools", "files"}, "error"?, "warnings"?}` written with JSON.stringify(…, null, 2) at the end, on
stdout; a fatal error instead writes `{"session_id", "error": {type, message, code}}` (no stats)
on stderr. Either shares the log with the CLI's stderr (warnings before, stack traces before or
after).

- Usage comes only at the end: the process's totals over every model call (helper calls to other
  models included: a classifier on a flash-lite model, loop checks). It is what the agent reports,
  so it becomes the spend exactly (`_reported`): per model where `stats.models` names them (0.34+
  in stream-json, every json version), else at the model the session asked for. Input counts the
  cached tokens inside it; output is billed as total − prompt (thinking, which the counts leave out
  of `output_tokens`/`candidates`, is billed as output), at least candidates + thoughts.
- A long-context tier is chosen per request: json gives each model's `api.totalRequests`;
  stream-json does not, so its sums are spread over the main-loop calls the stream showed.
- Until the usage comes the spend is estimated like Codex's: per model call at least
  BASE_INPUT_TOKENS of uncached input plus what was shown since, and the assistant's text by
  characters, at the model asked for — a flash model at the dearer of it and gemini-3.5-flash,
  which CLI 0.47+ may send it to.
- The json document spans many lines and a batch may end inside it: what is needed of it (all but
  the `response` text, which can be large) is kept in the state (`json_doc`) until its closing
  brace (the only `}` at the start of a line outside the response: whatever follows it on that line
  is the CLI's stderr, merged into the same log), then parsed. A response spread over lines (a terminal's hard wraps) is skipped to the next
  member.
- A model call is the first, then one after each tool result: `iterations` (json: the main
  role's requests).
- Refused: a result or error with no stats whose error is a 429 (quota, rate limit) billed nothing:
  the estimate is taken back (`_refused`). With stats (stream-json always has them) the stats say
  it: all zero after a 429.
- Success: `result.status` "success" with no error-severity `error` event before it (the CLI says
  success after "Maximum session turns exceeded"), or a json document with a response and no
  error. Failure: `result.status` "error" (its message), an error-severity event, a json document
  with an `error`, or no result at all (an auth failure in stream-json prints no JSON).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from reconciler.core.digestbase import CHARS_PER_TOKEN, CallEstimating
from reconciler.core.pricing import BadNumber, tokens

# The input of a one-call session in the real samples: 7,352 (0.11.0, "Say hello"), 10,564 over two
# models (0.39.0); with one tool call, 12,821 over two calls.
BASE_INPUT_TOKENS = 8_000
# What is kept of a json document besides its response (stats of every model and tool: a few KB).
JSON_DOC_MAX = 64 * 1024
# Gemini CLI's model aliases (packages/core/src/config/models.ts): priced by the table as the
# dearest model each may route to, which model_note says when the usage does not name the model.
ALIASES = frozenset({"auto", "pro", "flash", "flash-lite", "auto-gemini-2.5", "auto-gemini-3"})
# Model names with a table entry but no published price (the Code Assist backend's): said in model_note.
UNPUBLISHED = frozenset({"gemini-pro-default"})
# CLI 0.47+ with Gemini 3.5 Flash access sends a request for any model whose name ends in "flash"
# (gemini-2.5-flash, gemini-3-flash, flash) to this one (models.ts resolveModel, isFlashModel).
FLASH_UPGRADE = "gemini-3.5-flash"
# Setup errors of the json format's error document (FatalError exit codes): no model call was made.
_SETUP_CODES = frozenset({41, 42, 44, 52, 55})
_REFUSED = re.compile(r"\b429\b|RESOURCE_EXHAUSTED|quota|rate.?limit|exhausted your|QuotaError", re.I)
_CUT = '  "response": "",'  # the response member, its text dropped
_CUT_OPEN = '  "response": "(spread over lines)",'  # … while skipping the rest of it
_MEMBER = re.compile(r'  "(?:session_id|stats|error|warnings)": ')


class GeminiDigest(CallEstimating):
    agent = "gemini"
    base_input_tokens = BASE_INPUT_TOKENS
    events = frozenset({"init", "message", "tool_use", "tool_result", "error", "result"})

    # ---------------------------------------------------------------- lines

    def push(self, line: str) -> None:
        if self.json_doc is None:
            if line != "{" and line != "{\r":
                super().push(line)
                return
            self.lines += 1
            self.recognized += 1
            self.json_doc = "{"
            return
        if line.startswith('{"type":'):  # a stream-json event: that "{" began no document
            self.json_doc = None
            super().push(line)
            return
        self.lines += 1
        self._doc_line(line[:-1] if line.endswith("\r") else line)

    def _doc_line(self, line: str) -> None:
        """One line of a json document: kept, skipped (the response text), or the closing brace."""
        doc = self.json_doc
        assert doc is not None
        if doc.endswith(_CUT_OPEN) and line != "}" and not _MEMBER.match(line):
            return  # still inside a response spread over lines
        if line[:1] == "}":  # the document ends at its closing brace, whatever follows it on the line
            self.json_doc = None  # (stderr merged into the log: `}Warning: Limited color support …`)
            self._document(doc.rstrip(",") + "\n}")
            return
        if line.startswith('  "response": '):
            line = _CUT if _string_ends(line) else _CUT_OPEN
        elif line.lstrip()[:1] in ("}", "]"):
            doc = doc.rstrip(",")  # the member before a dropped one was not the last
        if len(doc) + len(line) > JSON_DOC_MAX:
            self.json_doc = None
            self._set_aside(f"a JSON output of over {JSON_DOC_MAX // 1024} KB besides its response")
            return
        self.json_doc = doc + "\n" + line

    def _document(self, text: str) -> None:
        obj = _loads(text)
        if type(obj) is not dict:
            i = text.find('\n  "stats": {')  # a response that broke the document: its stats still count
            obj = _loads("{" + text[i:]) if i >= 0 else None
        if type(obj) is not dict or not ({"response", "stats", "error"} & obj.keys()):
            return  # a brace-delimited block of something else
        try:
            self._json_output(obj)
        except BadNumber as e:
            self._set_aside(str(e))

    # ---------------------------------------------------------------- stream-json events

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
        stats = ev.get("stats")
        usage = None
        if stats is not None:  # every number read before anything counts (BadNumber: the line is set aside)
            usage = _stream_usage(stats, self.model, max(1, self.turn_calls))
        status = ev.get("status")
        err = ev.get("error")
        msg = err.get("message") if type(err) is dict else None
        msg = msg if isinstance(msg, str) and msg.strip() else None
        if usage is not None:
            self._report(usage)
        elif status != "success" and _refused(err):
            self._refused()
        self._turn_done()
        if status == "success" and not self.failure_signal:
            self.outcome, self.failure_reason = "success", None
        elif status == "success":
            self._fail(self.failure_signal)
        else:
            self._fail(f"result error: {msg}" if msg else "result error")

    # ---------------------------------------------------------------- json output

    def _json_output(self, obj: dict[str, Any]) -> None:
        stats, err = obj.get("stats"), obj.get("error")
        usage = calls = None
        if stats is not None:
            usage, calls = _json_usage(stats, self.model)
        sid = obj.get("session_id")
        if isinstance(sid, str) and sid:
            self.session_id = sid
        if usage is not None:
            self._report(usage)
        elif err is not None and _refused(err):
            self._refused()
        elif err is not None and self.turn_calls == 0 and not _setup_error(err):
            self._call(1)  # it failed after calling the model, and says nothing of what that billed
        if calls:
            self.turn_calls = calls
        self._turn_done()
        if err is not None:
            kind = err.get("type") if type(err) is dict else None
            msg = err.get("message") if type(err) is dict else None
            why = " ".join(str(x) for x in (kind, msg) if isinstance(x, (str, int)) and str(x).strip())
            self._fail(f"error: {why}" if why else "error")
        elif "response" in obj and not self.failure_signal:
            self.outcome, self.failure_reason = "success", None
        elif self.failure_signal:
            self._fail(self.failure_signal)

    # ---------------------------------------------------------------- usage

    def _report(self, usage: list[tuple[str | None, int, int, int, int]]) -> None:
        """The agent's own totals, per model (model, prompt with the cached inside it, cached, billed
        output, requests): the spend from now on."""
        usd, inp, out, cached = 0.0, 0, 0, 0
        notes: list[str] = []
        dearest: tuple[float, str | None] = (-1.0, None)
        for model, prompt, cache, output, requests in usage:
            cost = self.pricing.cost_tokens(model, prompt - cache, output, 0, cache, requests=requests)
            usd += cost
            inp, out, cached = inp + prompt - cache, out + output, cached + cache
            if cost > dearest[0]:
                dearest = (cost, model)
            note = self._rates_note(model)
            if note and note not in notes:
                notes.append(note)
        self._reported(usd, inp, out, cached)
        self.model_note = "; ".join(notes) if notes else None
        if dearest[1] and dearest[1] not in ALIASES:
            self.model = dearest[1]  # the model the session really used (the one it spent most on)

    def _rates_note(self, model: str | None) -> str | None:
        if not model:
            return "the output names no model (give -m): priced at the dearest rates"
        if self.pricing.resolve(model)[0] is None:
            return f"no price for model {model!r}: priced at the dearest rates"
        name = model.strip().lower()
        if name in ALIASES:
            return f"the output names only the alias {model!r}: priced as the dearest model it may route to"
        if name in UNPUBLISHED:
            return f"model {model!r} has no published price: priced as the dearest Gemini Pro"
        return None

    def _estimate(self, input_tokens: int = 0, output_tokens: int = 0) -> None:
        """Estimates are priced at the model the session may really run on (FLASH_UPGRADE)."""
        model = self.model
        if model and model.endswith("flash") and model != FLASH_UPGRADE:
            mine = self.pricing.cost_tokens(model, 1000, 100)
            if self.pricing.cost_tokens(FLASH_UPGRADE, 1000, 100) > mine:
                self.model = FLASH_UPGRADE
        try:
            super()._estimate(input_tokens, output_tokens)
        finally:
            self.model = model

    def finish(self, rc: int | None) -> None:
        if not self.finished and self.json_doc is not None:
            self.json_doc = None
            if self.outcome is None and not self.failure_signal:
                self.failure_signal = "ended inside its JSON output (cut short)"
        if not self.finished and self.outcome is None and not self.failure_signal:
            self.failure_signal = "ended without a result (no JSON: an auth or setup failure, or killed)"
        super().finish(rc)


# ---------------------------------------------------------------- reading the numbers


def _count(v: Any) -> int:
    """A token or request count the CLI wrote: absent or null is 0; a non-negative whole number is
    itself (pricing.tokens: over 10**12, NaN or infinite is BadNumber); anything else (negative, a
    string, a fraction, a bool) is no count the CLI writes: BadNumber, and the line is set aside."""
    if v is None:
        return 0
    t = type(v)
    if t is int and v >= 0:
        return tokens(v)
    if t is float:
        if not math.isfinite(v) or v > 10**12:
            return tokens(v)  # raises
        if v >= 0 and v == int(v):
            return int(v)
    raise BadNumber(f"a usage count of {_show(v)}")


def _show(v: Any) -> str:
    text = json.dumps(v) if not isinstance(v, (int, float)) or isinstance(v, bool) else repr(v)
    return text if len(text) <= 24 else text[:20] + "…"


def _stream_usage(stats: Any, model: str | None, requests: int) -> list[tuple[str | None, int, int, int, int]] | None:
    """stream-json `result.stats`: per model where `models` names them, else the totals at `model`.
    `requests`: the main-loop calls the stream showed (the stats do not say)."""
    if type(stats) is not dict:
        raise BadNumber(f"stats {_show(stats)}")
    per_model = stats.get("models")
    if per_model is not None and type(per_model) is not dict:
        raise BadNumber(f"stats.models {_show(per_model)}")
    if per_model is None and not {"total_tokens", "input_tokens", "output_tokens"} & stats.keys():
        return None  # no count at all: nothing reported
    parts = list(per_model.items()) if per_model else [(model, stats)]
    out = []
    for name, s in parts:
        if type(s) is not dict:
            raise BadNumber(f"stats.models.{name} {_show(s)}")
        prompt, total, cached = _count(s.get("input_tokens")), _count(s.get("total_tokens")), _count(s.get("cached"))
        candidates = _count(s.get("output_tokens"))
        _count(s.get("input"))
        out.append((name if isinstance(name, str) and name else model, prompt, min(cached, prompt),
                    max(total - prompt, candidates), requests))
    return out


def _json_usage(stats: Any, model: str | None) -> tuple[list[tuple[str | None, int, int, int, int]] | None, int]:
    """json `stats` (SessionMetrics): per model, with its requests; and the main loop's calls (the
    main role's requests where roles are given, else the most any model had)."""
    if type(stats) is not dict:
        raise BadNumber(f"stats {_show(stats)}")
    per_model = stats.get("models")
    if per_model is None:
        return None, 0  # no usage reported
    if type(per_model) is not dict:
        raise BadNumber(f"stats.models {_show(per_model)}")
    out, main, most = [], 0, 0
    for name, m in per_model.items():
        if type(m) is not dict:
            raise BadNumber(f"stats.models.{name} {_show(m)}")
        api, tok, roles = m.get("api") or {}, m.get("tokens") or {}, m.get("roles") or {}
        if type(api) is not dict or type(tok) is not dict or type(roles) is not dict:
            raise BadNumber(f"stats.models.{name} {_show(m)}")
        requests = _count(api.get("totalRequests"))
        _count(api.get("totalErrors"))
        prompt, total, cached = _count(tok.get("prompt")), _count(tok.get("total")), _count(tok.get("cached"))
        candidates, thoughts = _count(tok.get("candidates")), _count(tok.get("thoughts"))
        _count(tok.get("tool")), _count(tok.get("input"))
        role = roles.get("main")
        if type(role) is dict:
            main += _count(role.get("totalRequests"))
        most = max(most, requests)
        out.append((name if name else model, prompt, min(cached, prompt), max(total - prompt, candidates + thoughts),
                    max(1, requests)))
    return out, main or most


def _refused(err: Any) -> bool:
    """An error that says the API refused the call (HTTP 429: a quota or a rate limit)."""
    if type(err) is not dict:
        return False
    if err.get("code") == 429 or err.get("status") == 429:
        return True
    text = " ".join(str(err.get(k) or "") for k in ("type", "message", "status"))
    return bool(_REFUSED.search(text))


def _setup_error(err: Any) -> bool:
    """A json error document of a failure before any model call (auth, input, config, sandbox, trust)."""
    return type(err) is dict and err.get("code") in _SETUP_CODES


def _string_ends(line: str) -> bool:
    """Whether a `"response": "…"` line holds the whole string: it ends with an unescaped quote
    (and the comma before the next member). Read from its end: the line can be megabytes."""
    end = len(line) - 1 if line.endswith(",") else len(line)
    if end < len('  "response": ""') or line[end - 1] != '"':
        return False
    i = end - 2
    while line[i] == "\\":
        i -= 1
    return (end - 2 - i) % 2 == 0


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None
