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

The same script answers `POST /v1/chat/completions` (the Chat Completions API, for OpenCode's
`@ai-sdk/openai-compatible` provider): with `stream` a chunk stream (`data: {…}` lines, the usage in
a last chunk, `data: [DONE]`), a `shell` reply as a call to the `bash` tool with
`{"command", "description"}`; a request that offers no tools (OpenCode's title request) is answered
with a short text and does not take a scripted reply (`titles` counts them).

Run by hand: `python3 tests/agentcli/openai_api.py [PORT]` serves text replies with fixed usage
until interrupted."""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

from loopback import LoopbackAPI, LoopbackHandler

# How long Codex's exec_command waits for the command before it answers with a session still running
# (its default is 10 s): a command the gate queued can take longer on a loaded machine, and a model
# that knows it runs a test suite asks for a longer wait.
YIELD_MS = 30000
POLL_MS = 300000  # write_stdin's longest empty poll (Codex 0.171.0's exec tool declaration)
CELL_MS = 3600000  # the exec cell's own yield (its first-line pragma; default 30 s)


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
    # code mode only: the exec tool's JavaScript for `shell` waits for the command's end (polling its
    # session with write_stdin past exec_command's 30 s yield), as a model does for a long command
    wait: bool = False
    status: int = 200  # not 200: an HTTP error, no stream
    error: str = "rate limited"


class OpenAIServer(LoopbackAPI):
    """The lifecycle (start, stop, `with`, url): loopback.LoopbackAPI. `requests` holds the JSON body of
    every /responses request, `paths` every "METHOD /path" received."""

    requests: list[dict[str, Any]]

    def __init__(self, replies: list[Reply], repeat_last: bool = True):
        super().__init__(_Handler, name="openai-api")
        self.replies = replies
        self.repeat_last = repeat_last  # past the script: the last reply again
        self.paths: list[str] = []
        self.titles = 0  # chat requests without tools (a title, a summary): answered "Title", off the script
        self._ids = itertools.count(1)

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

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
                    "arguments": json.dumps({"cmd": reply.shell, "yield_time_ms": YIELD_MS}), "status": "completed"}
            yield {"type": "response.output_item.added", "output_index": 0, "item": {**item, "arguments": ""}}
            yield {"type": "response.output_item.done", "output_index": 0, "item": item}
        elif reply.shell is not None:  # the one JavaScript `exec` tool that reaches the others (gpt-5.6 and later)
            if not reply.wait:
                code = (f"const r = await tools.exec_command({{cmd: {json.dumps(reply.shell)}, yield_time_ms: {YIELD_MS}}});\n"
                        "text(r);")
            else:
                code = (f"// @exec: {{\"yield_time_ms\": {CELL_MS}}}\n"
                        f"let r = await tools.exec_command({{cmd: {json.dumps(reply.shell)}, yield_time_ms: {YIELD_MS}}});\n"
                        "let output = r.output;\n"
                        "while (r.exit_code === undefined && r.session_id !== undefined) {\n"
                        f"  r = await tools.write_stdin({{session_id: r.session_id, chars: '', yield_time_ms: {POLL_MS}}});\n"
                        "  output += r.output;\n"
                        "}\n"
                        "text({...r, output});")
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


class _Handler(LoopbackHandler):
    server_api: OpenAIServer
    empty_body = b"{}"
    bad_body = ("unparsed", 200)

    def do_GET(self) -> None:  # /v1/models and the like: an empty list
        self.server_api.paths.append("GET " + self.path)
        self._json(200, {"object": "list", "data": [], "models": []})

    def do_CONNECT(self) -> None:  # a client given HTTPS_PROXY = this server: traffic bound elsewhere, refused
        self.server_api.paths.append("CONNECT " + self.path)
        self._empty(403, close=True)

    def do_POST(self) -> None:
        server = self.server_api
        body = self._body()
        server.paths.append("POST " + self.path)
        if self.path.rstrip("/").endswith("/chat/completions"):
            self._chat(server, body)
            return
        if not self.path.rstrip("/").endswith("/responses"):
            self._json(404, {"error": {"message": f"no such path {self.path}"}})
            return
        reply = server._next(body)
        if reply.status != 200:
            self._json(reply.status, {"error": {"message": reply.error, "type": "rate_limit_error"
                                                if reply.status == 429 else "server_error"}})
            return
        self._event_stream()
        for ev in server._events(reply, body):
            self.wfile.write(f"event: {ev['type']}\ndata: {json.dumps(ev)}\n\n".encode())
        self.wfile.flush()


    def _chat(self, server: OpenAIServer, body: Any) -> None:
        body = body if isinstance(body, dict) else {}
        if not body.get("tools"):  # not the agent's loop: a title or a summary
            with server._lock:
                server.titles += 1
            reply = Reply(text="Title")
        else:
            reply = server._next(body)
        if reply.status != 200:
            self._json(reply.status, {"error": {"message": reply.error, "type": "rate_limit_error"
                                                if reply.status == 429 else "server_error"}})
            return
        n = next(server._ids)
        model = body.get("model") or "unknown"
        head = {"id": f"chatcmpl-{n:04d}", "object": "chat.completion.chunk", "created": 1764000000 + n, "model": model}
        u = reply.usage
        usage = {"prompt_tokens": u.input_tokens, "completion_tokens": u.output_tokens,
                 "total_tokens": u.input_tokens + u.output_tokens,
                 "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
                 "completion_tokens_details": {"reasoning_tokens": u.reasoning_tokens}}
        if reply.shell is not None:
            args = json.dumps({"command": reply.shell, "description": "Run the tests"})
            deltas = [{"role": "assistant", "content": None, "tool_calls": [
                {"index": 0, "id": f"call_{n:04d}", "type": "function", "function": {"name": "bash", "arguments": args}}]}]
            finish = "tool_calls"
        else:
            deltas = [{"role": "assistant", "content": ""}, {"content": reply.text}]
            finish = "stop"
        chunks = [{**head, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
        chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        chunks.append({**head, "choices": [], "usage": usage})
        if not body.get("stream"):
            message = {"role": "assistant", "content": reply.text if reply.shell is None else None}
            if reply.shell is not None:
                message["tool_calls"] = deltas[0]["tool_calls"]
            self._json(200, {**head, "object": "chat.completion",
                             "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage})
            return
        self._event_stream()
        for c in chunks:
            self.wfile.write(f"data: {json.dumps(c)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


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
