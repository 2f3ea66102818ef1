"""A scripted Anthropic Messages API on loopback, for driving the real Claude Code CLI offline
(tests/agentcli). Stdlib only: a ThreadingHTTPServer on 127.0.0.1 with an ephemeral port, run in a
thread of the test process, started and stopped by the test's fixture.

    with AnthropicAPI() as api:                       # api.url -> "http://127.0.0.1:<port>"
        api.script(Turn(usage=Usage(input_tokens=1000, output_tokens=50), text="done"))
        ... run `claude` with ANTHROPIC_BASE_URL=api.url ...
        api.answered                                  # every /v1/messages call answered, with its usage

What it serves:
- POST /v1/messages, streaming (SSE: message_start with the usage, content_block_start / _delta /
  _stop per block, message_delta with the usage's output_tokens, message_stop) or not (one JSON
  message), as the request asks. A *main-loop* call (one that offers the model tools: the agent's
  own turns) takes the next scripted `Turn`; any other call (Claude Code's background calls: a title,
  a topic check, a quota probe) is answered with `background` (a short text and its usage), and so
  is a main-loop call once the script is used up. Every answer is recorded in `answered` with the
  model asked for and the usage sent, so a test knows the exact totals the CLI must report.
- POST /v1/messages/count_tokens: {"input_tokens": <a fixed count>}.
- HEAD /api/hello (a start-up connectivity check): 200. CONNECT (a client that uses this server as
  its proxy, see `proxy_url`): 403, logged. Anything else: 404 with an Anthropic-shaped error body.
  Every request (method, path, a few headers, the parsed body) is logged in `requests`, so a test
  can show what the CLI called, and that it called nothing beyond loopback.

The server never talks to anything but the client that connected to it.
"""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from loopback import LoopbackHandler, ScriptedAPI


@dataclass(frozen=True)
class Usage:
    """What one API response reports. `cache_5m` + `cache_1h` are the cache writes (sent as
    cache_creation_input_tokens with the cache_creation split)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_5m: int = 0
    cache_1h: int = 0
    extra: dict = field(default_factory=dict)  # more usage keys, sent as they are (e.g. inference_geo)

    @property
    def cache_write(self) -> int:
        return self.cache_5m + self.cache_1h

    def start_json(self) -> dict[str, Any]:
        """The usage of message_start (and of a non-streaming message, with the real output)."""
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_write,
            "cache_read_input_tokens": self.cache_read,
            "cache_creation": {"ephemeral_5m_input_tokens": self.cache_5m,
                               "ephemeral_1h_input_tokens": self.cache_1h},
            "output_tokens": 1,  # the API's placeholder until message_delta
            "service_tier": "standard",
            **self.extra,
        }

    def full_json(self) -> dict[str, Any]:
        return {**self.start_json(), "output_tokens": self.output_tokens}


@dataclass(frozen=True)
class Turn:
    """One scripted main-loop answer: text, or a tool call (`tool` name, `tool_input`) after an
    optional text."""

    usage: Usage
    text: str = ""
    tool: str | None = None
    tool_input: dict = field(default_factory=dict)
    model: str | None = None  # the model the answer names (default: the one asked for)


@dataclass
class Answered:
    """One /v1/messages call answered: the model asked for, the usage sent, and whether it was a
    scripted main-loop turn."""

    model: str
    usage: Usage
    main: bool
    stream: bool
    path: str


class AnthropicAPI(ScriptedAPI):
    """The lifecycle (start, stop, `with`, url), `requests`, `answered`, `paths()` and `script()` (the
    turns of the next main-loop calls): loopback.ScriptedAPI."""

    requests: list[dict[str, Any]]
    answered: list[Answered]
    _script: list[Turn]

    def __init__(self, background: Usage = Usage(input_tokens=200, output_tokens=10), background_text: str = "Test",
                 count_tokens: int = 100):
        super().__init__(_Handler, name="anthropic-api")
        self.background = background
        self.background_text = background_text
        self.count_tokens = count_tokens
        self._ids = itertools.count(1)

    @property
    def proxy_url(self) -> str:
        """The same server as an HTTP(S) proxy: what a client sends anywhere but NO_PROXY arrives here
        as a CONNECT (or an absolute-URI request), is logged and refused."""
        return self.url

    # ------------------------------------------------------------ script

    def totals(self) -> dict[str, int]:
        """What every answered call's usage adds up to (input, output, cache read, 5m and 1h writes)."""
        with self._lock:
            us = [a.usage for a in self.answered]
        return {"input": sum(u.input_tokens for u in us), "output": sum(u.output_tokens for u in us),
                "cache_read": sum(u.cache_read for u in us), "cache_5m": sum(u.cache_5m for u in us),
                "cache_1h": sum(u.cache_1h for u in us), "calls": len(us)}

    def _next(self, body: dict[str, Any], path: str, stream: bool) -> tuple[Turn, Answered]:
        main = bool(body.get("tools"))
        with self._lock:
            if main and self._script:
                turn = self._script.pop(0)
            else:
                turn, main = Turn(usage=self.background, text=self.background_text), False
            a = Answered(model=str(body.get("model") or ""), usage=turn.usage, main=main, stream=stream, path=path)
            self.answered.append(a)
        return turn, a

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_loopback{next(self._ids):06d}"


class _Handler(LoopbackHandler):
    server_api: AnthropicAPI

    def _record(self, body: Any) -> str:
        path = self.path.split("?", 1)[0]
        keep = ("anthropic-beta", "anthropic-version", "user-agent", "x-app", "accept")
        headers = {k: v for k, v in self.headers.items() if k.lower() in keep}
        self.server_api._log({"method": self.command, "path": self.path, "headers": headers, "body": body})
        return path

    def _reply_headers(self) -> dict[str, str]:
        return {"request-id": self.server_api.new_id("req")}

    def _not_found(self) -> None:
        self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": f"loopback: no {self.path}"}})

    def do_GET(self) -> None:
        self._record(None)
        self._not_found()

    def do_HEAD(self) -> None:  # Claude Code checks HEAD /api/hello on the base URL at start (without
        path = self._record(None)  # CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC)
        self._empty(200 if path == "/api/hello" else 404)

    def do_CONNECT(self) -> None:
        """A client using this server as its HTTPS proxy (the tests point HTTPS_PROXY here): logged,
        so that a test sees every attempt to reach anything beyond loopback, and refused."""
        self._record(None)
        self._empty(403, close=True)

    def do_POST(self) -> None:
        body = self._body()
        path = self._record(body)
        if path == "/v1/messages/count_tokens":
            self._json(200, {"input_tokens": self.server_api.count_tokens})
        elif path == "/v1/messages" and isinstance(body, dict):
            self._messages(body, path)
        else:
            self._not_found()

    do_PUT = do_POST
    do_DELETE = do_GET

    # ------------------------------------------------------------ /v1/messages

    def _messages(self, body: dict[str, Any], path: str) -> None:
        api = self.server_api
        stream = body.get("stream") is True
        turn, answered = api._next(body, path, stream)
        model = turn.model or answered.model or "claude-loopback"
        mid = api.new_id("msg")
        blocks: list[dict[str, Any]] = []
        if turn.text:
            blocks.append({"type": "text", "text": turn.text})
        if turn.tool:
            blocks.append({"type": "tool_use", "id": api.new_id("toolu"), "name": turn.tool, "input": turn.tool_input})
        if not blocks:
            blocks.append({"type": "text", "text": "ok"})
        stop = "tool_use" if turn.tool else "end_turn"
        if not stream:
            self._json(200, {"id": mid, "type": "message", "role": "assistant", "model": model, "content": blocks,
                             "stop_reason": stop, "stop_sequence": None, "usage": turn.usage.full_json()})
            return
        self._event_stream()

        def event(name: str, data: dict[str, Any]) -> None:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())

        event("message_start", {"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": turn.usage.start_json()}})
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                event("content_block_start", {"type": "content_block_start", "index": i,
                                              "content_block": {"type": "text", "text": ""}})
                event("content_block_delta", {"type": "content_block_delta", "index": i,
                                              "delta": {"type": "text_delta", "text": b["text"]}})
            else:
                event("content_block_start", {"type": "content_block_start", "index": i, "content_block": {
                    "type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}})
                event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(b["input"])}})
            event("content_block_stop", {"type": "content_block_stop", "index": i})
        event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                "usage": {"output_tokens": turn.usage.output_tokens}})
        event("message_stop", {"type": "message_stop"})
        self.wfile.flush()
