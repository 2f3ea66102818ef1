"""What the scripted model APIs of tests/agentcli (anthropic_api.py, gemini_api.py, openai_api.py) share:
a ThreadingHTTPServer on 127.0.0.1 with an ephemeral port, served from a daemon thread of the test
process and started and stopped as a context manager (`LoopbackAPI`), and the request handler's body
reading, JSON replies and the head of a server-sent event stream (`LoopbackHandler`). Stdlib only.

    class MyAPI(LoopbackAPI):
        def __init__(self):
            super().__init__(_Handler, name="my-api")     # the handler sees this object as `server_api`

    with MyAPI() as api:                                  # api.url -> "http://127.0.0.1:<port>"
        ...

`ScriptedAPI` adds what the Anthropic and Gemini servers keep alike: a script of turns, the calls
`answered`, and `paths()` of the requests logged.
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


class LoopbackHandler(BaseHTTPRequestHandler):
    """A handler bound (by `LoopbackAPI.start`) to one API object, `server_api`; quiet (the API keeps
    its own log), HTTP/1.1."""

    server_api: Any
    protocol_version = "HTTP/1.1"
    json_type = "application/json"  # the content-type of `_json` replies
    empty_body = b""  # what an empty request body parses as (b"": None)
    bad_body = ("_raw", 2000)  # a body that is not JSON: {key: its first chars}

    def log_message(self, *args: Any) -> None:
        pass

    def _body(self) -> Any:
        """The request body, parsed as JSON."""
        n = int(self.headers.get("content-length") or 0)
        raw = (self.rfile.read(n) if n else b"") or self.empty_body
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            key, chars = self.bad_body
            return {key: raw[:chars].decode("utf-8", "replace")}

    def _reply_headers(self) -> dict[str, str]:
        """Headers added to every `_json` reply and event stream."""
        return {}

    def _json(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", self.json_type)
        self.send_header("content-length", str(len(data)))
        for k, v in self._reply_headers().items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _event_stream(self) -> None:
        """The head of a 200 text/event-stream reply, the connection closed after it: the caller
        writes the events to `wfile`."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        for k, v in self._reply_headers().items():
            self.send_header(k, v)
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True

    def _empty(self, code: int, close: bool = False) -> None:
        """A reply without a body (`close`: and the connection closed after it)."""
        self.send_response(code)
        self.send_header("content-length", "0")
        self.end_headers()
        if close:
            self.close_connection = True


class LoopbackAPI:
    """The server's lifecycle: `start()` / `stop()` (or `with`), `url`; `requests` (what the subclass
    logs in it) and `_lock` (guarding it and whatever else the subclass keeps)."""

    def __init__(self, handler: type[LoopbackHandler], name: str):
        self.requests: list[Any] = []
        self._lock = threading.Lock()
        self._handler = handler
        self._name = name
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Self:
        handler = type(self._handler.__name__, (self._handler,), {"server_api": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=self._name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _log(self, entry: Any) -> None:
        with self._lock:
            self.requests.append(entry)


class ScriptedAPI(LoopbackAPI):
    """A server answering from a script of turns: `requests` logs {"method", "path", …} per request,
    `answered` what each scripted call was answered with."""

    def __init__(self, handler: type[LoopbackHandler], name: str):
        super().__init__(handler, name)
        self.answered: list[Any] = []
        self._script: list[Any] = []

    def script(self, *turns: Any) -> None:
        """Replace the script: the next scripted calls get these turns, in order; `requests` and
        `answered` start again."""
        with self._lock:
            self._script = list(turns)
            self.requests.clear()
            self.answered.clear()

    def paths(self) -> list[str]:
        with self._lock:
            return [f"{r['method']} {r['path']}" for r in self.requests]
