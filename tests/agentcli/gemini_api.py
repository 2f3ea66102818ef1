"""A scripted Gemini API (generativelanguage v1beta) on loopback, for driving the real Gemini CLI
offline (tests/agentcli). Stdlib only: a ThreadingHTTPServer on 127.0.0.1 with an ephemeral port, run
in a thread of the test process, started and stopped by the test's fixture.

    with GeminiAPI() as api:                          # api.url -> "http://127.0.0.1:<port>"
        api.script(Turn(usage=Usage(prompt=9000, candidates=40, thoughts=100), text="done"))
        ... run `gemini` with GEMINI_API_KEY=<anything>, GOOGLE_GEMINI_BASE_URL=api.url ...
        api.answered                                  # every generate call answered, with its usage

The CLI is pointed here by GOOGLE_GEMINI_BASE_URL (read by @google/genai's client, the API-key
auth path: GEMINI_API_KEY). What it serves:
- POST /v1beta/models/<model>:streamGenerateContent?alt=sse: the next scripted `Turn` as SSE
  (`data: <GenerateContentResponse>` events: the text in one or two chunks, a functionCall part for
  a tool call, the usageMetadata on the last chunk, as the real API sends it), or, for a `Turn`
  with `status` (429, 500, …), that HTTP error with a google.rpc-shaped body. Once the script is
  used up, `default` answers.
- POST /v1beta/models/<model>:generateContent: helper calls (the model router's classifier, loop and
  next-speaker checks). One that asks for JSON (generationConfig.responseJsonSchema / responseSchema)
  is answered with an object of that schema (strings: an enum's first value, numbers: 10 — the
  router then picks flash) and `helper` usage; any other takes the next scripted `Turn`.
- POST /v1beta/models/<model>:countTokens: {"totalTokens": count_tokens}.
- Anything else: 404 with a google.rpc error body; a proxy CONNECT (the client given HTTPS_PROXY =
  this server, to catch traffic bound elsewhere) is refused with 403. Every request is logged in
  `requests`.

The server never talks to anything but the client that connected to it.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from loopback import LoopbackHandler, ScriptedAPI


@dataclass(frozen=True)
class Usage:
    """A GenerateContentResponse's usageMetadata. `prompt` includes `cached`; `total` is prompt +
    candidates + thoughts + tool unless given."""

    prompt: int = 0
    candidates: int = 0
    thoughts: int = 0
    cached: int = 0
    tool: int = 0
    total: int | None = None

    @property
    def total_tokens(self) -> int:
        return self.total if self.total is not None else self.prompt + self.candidates + self.thoughts + self.tool

    def json(self) -> dict[str, Any]:
        u: dict[str, Any] = {"promptTokenCount": self.prompt, "candidatesTokenCount": self.candidates,
                             "totalTokenCount": self.total_tokens}
        if self.thoughts:
            u["thoughtsTokenCount"] = self.thoughts
        if self.cached:
            u["cachedContentTokenCount"] = self.cached
        if self.tool:
            u["toolUsePromptTokenCount"] = self.tool
        return u


@dataclass(frozen=True)
class Turn:
    """One scripted answer: text and/or a tool call (`tool` name, `args`), with its usage; or, with
    `status`, an HTTP error (429: RESOURCE_EXHAUSTED) and no usage at all."""

    usage: Usage = Usage()
    text: str = ""
    tool: str | None = None
    args: dict = field(default_factory=dict)
    status: int | None = None
    error_message: str = "Resource has been exhausted (e.g. check quota)."
    retry_delay_s: float | None = None  # a 429's RetryInfo, if any
    quota_id: str | None = None  # a 429's QuotaFailure violation (…PerDay…: the CLI does not retry it)


@dataclass
class Answered:
    """One generate call answered: the model in its path, the usage sent (None for an error)."""

    model: str
    usage: Usage | None
    stream: bool
    status: int


class GeminiAPI(ScriptedAPI):
    """The lifecycle (start, stop, `with`, url), `requests`, `answered`, `paths()` and `script()` (the
    turns of the next generate calls): loopback.ScriptedAPI."""

    requests: list[dict[str, Any]]
    answered: list[Answered]
    _script: list[Turn]

    def __init__(self, default: Turn = Turn(usage=Usage(prompt=300, candidates=5), text="ok"), count_tokens: int = 100,
                 helper: Usage = Usage(prompt=1200, candidates=20)):
        super().__init__(_Handler, name="gemini-api")
        self.default = default
        self.helper = helper
        self.count_tokens = count_tokens

    def billed(self) -> dict[str, list[Usage]]:
        """Per model, the usage of every call answered with one (errors bill nothing)."""
        out: dict[str, list[Usage]] = {}
        with self._lock:
            for a in self.answered:
                if a.usage is not None:
                    out.setdefault(a.model, []).append(a.usage)
        return out

    def _next(self, model: str, stream: bool, schema: Any = None) -> Turn:
        with self._lock:
            if schema is not None:
                turn = Turn(usage=self.helper, text=json.dumps(_schema_answer(schema)))
            else:
                turn = self._script.pop(0) if self._script else self.default
            self.answered.append(Answered(model=model, usage=None if turn.status else turn.usage, stream=stream,
                                          status=turn.status or 200))
        return turn


_GENERATE = re.compile(r"^/v1(?:beta|alpha|)/models/([^/:]+):(streamGenerateContent|generateContent|countTokens)$")


class _Handler(LoopbackHandler):
    server_api: GeminiAPI
    json_type = "application/json; charset=UTF-8"

    def _error(self, code: int, status: str, message: str, details: list | None = None) -> None:
        self._json(code, {"error": {"code": code, "message": message, "status": status, **({"details": details} if details else {})}})

    def do_GET(self) -> None:
        self.server_api._log({"method": "GET", "path": self.path, "body": None})
        self._error(404, "NOT_FOUND", f"loopback: no {self.path}")

    def do_CONNECT(self) -> None:
        self.server_api._log({"method": "CONNECT", "path": self.path, "body": None})
        self._empty(403, close=True)

    def do_POST(self) -> None:
        body = self._body()
        self.server_api._log({"method": "POST", "path": self.path, "body": body})
        m = _GENERATE.match(self.path.split("?", 1)[0])
        if m is None:
            self._error(404, "NOT_FOUND", f"loopback: no {self.path}")
            return
        model, verb = m.group(1), m.group(2)
        if verb == "countTokens":
            self._json(200, {"totalTokens": self.server_api.count_tokens})
            return
        stream = verb == "streamGenerateContent"
        config = body.get("generationConfig") if isinstance(body, dict) else None
        schema = None
        if isinstance(config, dict) and not stream:
            schema = config.get("responseJsonSchema") or config.get("responseSchema")
        turn = self.server_api._next(model, stream, schema if isinstance(schema, dict) else None)
        if turn.status:
            details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED",
                        "domain": "googleapis.com", "metadata": {"service": "generativelanguage.googleapis.com"}}]
            if turn.quota_id:
                details.append({"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                    {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                     "quotaId": turn.quota_id}]})
            if turn.retry_delay_s is not None:
                details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{turn.retry_delay_s:g}s"})
            status = {429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 400: "INVALID_ARGUMENT"}.get(turn.status, "UNKNOWN")
            self._error(turn.status, status, turn.error_message, details)
            return
        chunks = _chunks(turn, model)
        if not stream:
            merged = chunks[-1]
            parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
            merged["candidates"][0]["content"]["parts"] = parts
            self._json(200, merged)
            return
        self._event_stream()
        for c in chunks:
            self.wfile.write(f"data: {json.dumps(c)}\r\n\r\n".encode())
        self.wfile.flush()


def _schema_answer(schema: dict[str, Any]) -> Any:
    """A value of a JSON schema: an object's properties each filled in."""
    kind = str(schema.get("type") or "").lower()
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {k: _schema_answer(v if isinstance(v, dict) else {}) for k, v in props.items()}
    if schema.get("enum"):
        return schema["enum"][0]
    if kind in ("integer", "number"):
        return 10
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    return "loopback"


def _chunks(turn: Turn, model: str) -> list[dict[str, Any]]:
    """The GenerateContentResponse chunks of one answer: the text split in two (as the API streams
    it), then a functionCall, the usage and finishReason on the last chunk."""
    texts = []
    if turn.text:
        cut = max(1, len(turn.text) // 2)
        texts = [turn.text[:cut], turn.text[cut:]] if len(turn.text) > 1 else [turn.text]
    parts_list: list[list[dict[str, Any]]] = [[{"text": t}] for t in texts if t]
    if turn.tool:
        parts_list.append([{"functionCall": {"name": turn.tool, "args": turn.args}}])
    if not parts_list:
        parts_list = [[{"text": "ok"}]]
    out = []
    for i, parts in enumerate(parts_list):
        last = i == len(parts_list) - 1
        cand: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if last:
            cand["finishReason"] = "STOP"
        chunk: dict[str, Any] = {"candidates": [cand], "modelVersion": model, "responseId": f"loopback-{i}"}
        if last:
            chunk["usageMetadata"] = turn.usage.json()
        out.append(chunk)
    return out
