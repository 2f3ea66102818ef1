"""An OpenAI Responses API served on loopback, for the real Codex CLI (tests/agentcli): `POST
/v1/responses` answers each request with the next scripted reply as a server-sent event stream
(response.created, response.output_item.added/done, response.output_text.delta, response.completed
with the usage the script chose), and records every request's body (the model the CLI asked for,
its input). No network beyond 127.0.0.1; no key checked.

    with OpenAIServer([Reply(text="hi", usage=Usage(1000, 200, 30))]) as api:
        api.base_url  # http://127.0.0.1:PORT/v1
        api.requests  # the JSON bodies received, in order

A reply may call a tool instead (`Reply(shell="echo hi", …)`: a `function_call` to Codex's shell
tool); `Reply(status=429|500, error=…)` answers with an HTTP error (no usage billed).

Run by hand: `python3 tests/agentcli/openai_api.py [PORT]` serves text replies with fixed usage
until interrupted."""
from __future__ import annotations

import itertools
import json
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Usage:
    input_tokens: int  # the whole prompt, cached included (the Responses API's meaning)
    cached_tokens: int
    output_tokens: int  # reasoning included
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0  # part of input_tokens, like cached_tokens

    def as_json(self) -> dict[str, Any]:
        details = {"cached_tokens": self.cached_tokens}
        if self.cache_write_tokens:
            details["cache_write_tokens"] = self.cache_write_tokens
        return {"input_tokens": self.input_tokens, "input_tokens_details": details,
                "output_tokens": self.output_tokens,
                "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
                "total_tokens": self.input_tokens + self.output_tokens}


@dataclass(frozen=True)
class Reply:
    text: str = ""
    usage: Usage = Usage(0, 0, 0)
    shell: str | None = None  # a shell command run by the model's tool call instead of a message
    status: int = 200  # not 200: an HTTP error, no stream
    error: str = "rate limited"


@dataclass
class OpenAIServer:
    replies: list[Reply]
    repeat_last: bool = True  # past the script: the last reply again
    requests: list[dict[str, Any]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None

    # ---------------------------------------------------------------- serving

    def __enter__(self) -> "OpenAIServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # /v1/models and the like: an empty list
                server.paths.append("GET " + self.path)
                body = json.dumps({"object": "list", "data": [], "models": []}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n) if n else b""
                server.paths.append("POST " + self.path)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"unparsed": raw[:200].decode("utf-8", "replace")}
                if not self.path.rstrip("/").endswith("/responses"):
                    self._json(404, {"error": {"message": f"no such path {self.path}"}})
                    return
                reply = server._next(body)
                if reply.status != 200:
                    self._json(reply.status, {"error": {"message": reply.error, "type": "rate_limit_error"
                                                        if reply.status == 429 else "server_error"}})
                    return
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                for ev in server._events(reply, body):
                    self.wfile.write(f"event: {ev['type']}\ndata: {json.dumps(ev)}\n\n".encode())
                self.wfile.flush()
                self.close_connection = True

            def _json(self, status: int, obj: Any) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    @property
    def base_url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    # ---------------------------------------------------------------- the script

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(body)
            i = len(self.requests) - 1
            if i < len(self.replies):
                return self.replies[i]
            if self.repeat_last and self.replies:
                return self.replies[-1]
            return Reply(text="done")

    def _events(self, reply: Reply, body: dict[str, Any]):
        n = next(self._ids)
        rid = f"resp_{n:04d}"
        model = body.get("model") or "unknown"
        base = {"id": rid, "object": "response", "created_at": 1764000000 + n, "model": model, "output": [],
                "status": "in_progress", "usage": None}
        yield {"type": "response.created", "response": base}
        if reply.shell is not None and _offers(body, "exec_command") and not _offers(body, "exec"):
            # the function tool `exec_command` (Codex with gpt-5.5 and older models)
            item = {"type": "function_call", "id": f"fc_{n:04d}", "call_id": f"call_{n:04d}", "name": "exec_command",
                    "arguments": json.dumps({"cmd": reply.shell}), "status": "completed"}
            yield {"type": "response.output_item.added", "output_index": 0, "item": {**item, "arguments": ""}}
            yield {"type": "response.output_item.done", "output_index": 0, "item": item}
        elif reply.shell is not None:  # the one JavaScript `exec` tool that reaches the others (gpt-5.6 and later)
            code = f"const r = await tools.exec_command({{cmd: {json.dumps(reply.shell)}}});\ntext(r);"
            item = {"type": "custom_tool_call", "id": f"ctc_{n:04d}", "call_id": f"call_{n:04d}", "name": "exec",
                    "input": code, "status": "completed"}
            yield {"type": "response.output_item.added", "output_index": 0, "item": {**item, "input": ""}}
            yield {"type": "response.output_item.done", "output_index": 0, "item": item}
        else:
            mid = f"msg_{n:04d}"
            item = {"type": "message", "id": mid, "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}]}
            yield {"type": "response.output_item.added", "output_index": 0,
                   "item": {**item, "status": "in_progress", "content": []}}
            yield {"type": "response.content_part.added", "item_id": mid, "output_index": 0, "content_index": 0,
                   "part": {"type": "output_text", "text": "", "annotations": []}}
            yield {"type": "response.output_text.delta", "item_id": mid, "output_index": 0, "content_index": 0,
                   "delta": reply.text}
            yield {"type": "response.output_text.done", "item_id": mid, "output_index": 0, "content_index": 0,
                   "text": reply.text}
            yield {"type": "response.output_item.done", "output_index": 0, "item": item}
        yield {"type": "response.completed",
               "response": {**base, "status": "completed", "output": [item], "usage": reply.usage.as_json()}}


def _offers(body: Any, name: str) -> bool:
    """Whether a request offers the model a tool of that name (in `tools` or nested in its input)."""
    if isinstance(body, dict):
        if body.get("name") == name and body.get("type") in ("function", "custom"):
            return True
        return any(_offers(v, name) for v in body.values())
    if isinstance(body, list):
        return any(_offers(v, name) for v in body)
    return False


if __name__ == "__main__":
    import time

    with OpenAIServer([Reply(text="hello from loopback", usage=Usage(1000, 200, 30, 10))]) as api:
        print(api.base_url, flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
