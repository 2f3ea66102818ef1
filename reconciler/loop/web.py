"""The page's server in the loop (docs/watching.md, "The page's server"): `res web` asks the loop to
listen, and a browser on this machine, of this user, sees the machine view live.

A minimal HTTP/1.1 server on asyncio streams, on 127.0.0.1 only, started by the first `web` request
and then kept while the loop runs. What it lets in:

- a request line and headers of at most HEAD_LIMIT, sent within HEAD_S; a body (POST /act only) of at
  most BODY_LIMIT; at most MAX_CONNECTIONS at once; one request per connection (but /events, which
  stays open until the browser goes);
- the token (state/web.token, 32 random bytes, 0600, made once, never through a symlink), as the
  query's `token=` or the cookie the first page load sets (HttpOnly, SameSite=Strict), compared in
  constant time;
- a peer whose socket is owned by the loop's own uid (/proc/net/tcp, observed/sockets.py): another
  user on the machine who learned the token is refused all the same;
- a Host header naming this listener (a page elsewhere that rebinds its name to 127.0.0.1 is not us).

Anything else is 403 with the body `forbidden`. The view itself comes from the watchers
(loop/watch.py): built only while someone watches."""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.config.paths import Paths

if TYPE_CHECKING:
    from reconciler.loop.serve import Ticker
    from reconciler.ops.engine import Engine

log = logging.getLogger("res.web")

HOST = "127.0.0.1"
HEAD_LIMIT = 16 << 10  # request line and headers
BODY_LIMIT = 4 << 10  # POST /act's JSON: {"do": ..., "id": ...}
HEAD_S = 10.0  # to send the request line and headers (and a body)
MAX_CONNECTIONS = 64  # open at once, /events streams included
TOKEN_BYTES = 32
TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{43}")  # 32 bytes, url-safe base64 without padding
COOKIE = "res_token"
HISTORY_MAX_HOURS = 48.0  # what the history keeps (docs/watching.md, "The history")
ACTIONS = ("release", "stop", "game_on", "game_off")

REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 500: "Internal Server Error"}
# The page is one file: its own inline script and style, nothing fetched from elsewhere, nothing framed.
PAGE_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


class WebRefused(Exception):
    """The listener cannot start: one line saying why and what to do."""


def token_path(paths: Paths) -> Path:
    return paths.root / "web.token"


def port_path(paths: Paths) -> Path:
    return paths.root / "web.port"


def page_path() -> Path:
    from reconciler.config.resources import shipped

    return shipped("templates/web") / "page.html"


# ---------------------------------------------------------------- the token file


def load_token(path: Path) -> str:
    """The token kept in `path`, made (0600, O_EXCL) when there is none. Never through a symlink:
    a link planted there is refused, not followed, and nothing is written where it points. A file
    others may read, or not ours, is refused too (the token would be theirs as well)."""
    for _ in range(3):  # made meanwhile by another `res web` of ours, or an empty leftover replaced
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            token = secrets.token_urlsafe(TOKEN_BYTES)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                continue
            try:
                os.write(fd, token.encode() + b"\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            return token
        except OSError as e:
            if e.errno == 40:  # ELOOP: a symbolic link
                raise WebRefused(f"{path} is a symbolic link, not res's token file; remove it, then run res web again") from None
            raise WebRefused(f"{path}: {e.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise WebRefused(f"{path} is not a regular file; remove it, then run res web again")
            if st.st_uid != os.geteuid() or st.st_mode & 0o077:
                raise WebRefused(f"{path} is not this user's alone (mode {stat.S_IMODE(st.st_mode):04o}, uid "
                                 f"{st.st_uid}): the token may be known to others; remove it, then run res web again")
            text = os.read(fd, 256).decode("ascii", "replace").strip()
        finally:
            os.close(fd)
        if TOKEN_SHAPE.fullmatch(text):
            return text
        # Not a token (an empty file a crash left between its making and its writing): made anew.
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    raise WebRefused(f"{path} keeps changing under res; remove it, then run res web again")


def write_port(path: Path, port: int) -> None:
    """The port, for whoever looks (written whole: a temporary file renamed over it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, f"{port}\n".encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


# ---------------------------------------------------------------- a request


class Request:
    __slots__ = ("method", "path", "query", "headers")

    def __init__(self, method: str, path: str, query: dict[str, str], headers: dict[str, str]):
        self.method, self.path, self.query, self.headers = method, path, query, headers

    def cookies(self) -> list[tuple[str, str]]:
        out = []
        for part in self.headers.get("cookie", "").split(";"):
            name, eq, value = part.strip().partition("=")
            if eq:
                out.append((name.strip(), value.strip()))
        return out


def parse_head(head: bytes) -> Request | None:
    """The request line and headers (up to and without the blank line), or None when they are not
    a request this server takes: a method other than GET or POST, a target that is not a path, a
    header line without a name, a folded line, a second Host or Content-Length."""
    from urllib.parse import parse_qsl, unquote

    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        return None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        return None
    method, target, version = parts
    if method not in ("GET", "POST") or not target.startswith("/") or version not in ("HTTP/1.0", "HTTP/1.1"):
        return None
    path, _, query = target.partition("?")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or any(c in name for c in " \t"):
            return None  # a folded line, or no name
        name, value = name.lower(), value.strip()
        if name in headers:
            if name == "cookie":
                headers[name] += "; " + value
                continue
            if name in ("host", "content-length"):
                return None
        headers.setdefault(name, value)
    try:
        pairs = parse_qsl(query, keep_blank_values=True, max_num_fields=20)
    except ValueError:
        return None
    return Request(method, unquote(path), dict(pairs), headers)


def response(code: int, body: bytes, kind: str = "text/plain; charset=utf-8", extra: tuple[str, ...] = ()) -> bytes:
    head = [f"HTTP/1.1 {code} {REASONS.get(code, 'Error')}", f"Content-Type: {kind}", f"Content-Length: {len(body)}",
            "Connection: close", "Cache-Control: no-store", "X-Content-Type-Options: nosniff",
            "Referrer-Policy: no-referrer", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


FORBIDDEN = response(403, b"forbidden")
BAD_REQUEST = response(400, b"bad request")


def as_json(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":"), default=str).encode()


# ---------------------------------------------------------------- the server


class WebServer:
    """The page's listener. `watchers`: loop/watch.py's Watchers (view, subscribe, unsubscribe,
    history); `engine` and `ticker`: what POST /act acts through (and the policy, read when asked:
    a policy edited while the loop runs is the one in force)."""

    def __init__(self, paths: Paths, watchers, engine: "Engine | None" = None, ticker: "Ticker | None" = None,
                 policy=None, uid: int | None = None, tcp_file: str | None = None):
        self.paths, self.watchers, self.engine, self.ticker = paths, watchers, engine, ticker
        self._policy = policy
        self.uid = os.geteuid() if uid is None else uid
        self.tcp_file = tcp_file
        self.server: asyncio.AbstractServer | None = None
        self.port = 0
        self.token = ""
        self.page = b""
        self.connections = 0
        self.handlers: set[asyncio.Task] = set()
        self._starting = asyncio.Lock()

    @property
    def policy(self):
        return self.engine.policy if self.engine is not None else self._policy

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}/?token={self.token}"

    async def start(self) -> str:
        """Listen, if not yet; the URL (with the token). WebRefused when it cannot."""
        async with self._starting:
            if self.server is None:
                self.paths.ensure()
                self.token = load_token(token_path(self.paths))
                try:
                    self.page = page_path().read_bytes()
                except OSError as e:
                    raise WebRefused(f"the page is missing from this install ({e})") from None
                want = int(self.policy.web_port)
                try:
                    server = await asyncio.start_server(self._handle, HOST, want, limit=HEAD_LIMIT)
                except OSError as e:
                    raise WebRefused(f"cannot listen on {HOST}:{want} (policy web_port): {e.strerror or e}") from None
                self.port = server.sockets[0].getsockname()[1]
                self.server = server
                write_port(port_path(self.paths), self.port)
                log.info("the page is served at http://%s:%d/", HOST, self.port)
            return self.url

    async def close(self) -> None:
        server, self.server = self.server, None
        if server is None:
            return
        server.close()
        for task in list(self.handlers):  # /events streams stay open otherwise (Python 3.11)
            task.cancel()
        await asyncio.gather(*self.handlers, return_exceptions=True)
        await server.wait_closed()

    # ------------------------------------------------------------ one connection

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self.handlers.add(task)
        self.connections += 1
        try:
            if self.connections > MAX_CONNECTIONS:
                return
            answer = await self._answer(reader, writer)
            if answer:
                writer.write(answer)
                await writer.drain()
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass  # the browser went, or the loop is stopping
        except Exception:  # noqa: BLE001 - a bad request never stops the loop
            log.exception("answering a page request")
        finally:
            self.connections -= 1
            self.handlers.discard(task)
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes | None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_S)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError):
            return None
        except (asyncio.LimitOverrunError, ValueError):
            return BAD_REQUEST
        req = parse_head(head[:-4])
        if req is None:
            return BAD_REQUEST
        if not self._allowed(req, writer):
            return FORBIDDEN
        if req.method == "GET":
            if req.path == "/":
                return self._page(req)
            if req.path == "/view":
                return response(200, as_json(await self._view()), "application/json")
            if req.path == "/history":
                return self._history(req)
            if req.path == "/events":
                await self._events(reader, writer)
                return None
        elif req.path == "/act":
            return await self._act(req, reader)
        return FORBIDDEN

    def _allowed(self, req: Request, writer: asyncio.StreamWriter) -> bool:
        """The Host is this listener, the token is right (query or cookie), and the peer is ours."""
        if req.headers.get("host") not in (f"{HOST}:{self.port}", f"localhost:{self.port}"):
            return False
        token = self.token.encode()
        given = [req.query["token"]] if "token" in req.query else [v for k, v in req.cookies() if k == COOKIE]
        if not any(hmac.compare_digest(g.encode("utf-8", "replace"), token) for g in given):
            return False
        return self._peer_is_ours(writer)

    def _peer_is_ours(self, writer: asyncio.StreamWriter) -> bool:
        from reconciler.observed.sockets import TCP_FILE, peer_uid

        peer, ours = writer.get_extra_info("peername"), writer.get_extra_info("sockname")
        if not peer or not ours:
            return False
        uid = peer_uid((ours[0], ours[1]), (peer[0], peer[1]), self.tcp_file or TCP_FILE)
        return uid is not None and uid == self.uid

    # ------------------------------------------------------------ the routes

    def _page(self, req: Request) -> bytes:
        extra = [f"Content-Security-Policy: {PAGE_POLICY}", "X-Frame-Options: DENY"]
        if "token" in req.query:  # the first load: later requests (fetch, EventSource) carry the cookie
            extra.append(f"Set-Cookie: {COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict")
        return response(200, self.page, "text/html; charset=utf-8", tuple(extra))

    async def _view(self) -> dict:
        view = dict(await self.watchers.view())
        view["actions"] = bool(self.policy.web_actions)
        return view

    def _history(self, req: Request) -> bytes:
        try:
            hours = float(req.query.get("hours", "6"))
        except ValueError:
            return response(400, b"hours: not a number")
        if not 0 < hours <= HISTORY_MAX_HOURS:  # NaN fails this too
            return response(400, f"hours: between 0 and {HISTORY_MAX_HOURS:g}".encode())
        return response(200, as_json(self.watchers.history(hours)), "application/json")

    async def _events(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One `data:` line per view the watchers push (the first at once: subscribe() gives it),
        until the browser goes (its end of the connection reads as EOF) or the loop ends (None)."""
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
                     b"X-Content-Type-Options: nosniff\r\nConnection: keep-alive\r\n\r\n")
        queue = self.watchers.subscribe()
        gone = asyncio.ensure_future(reader.read(1))
        got: asyncio.Future | None = None
        try:
            await writer.drain()
            while True:
                got = asyncio.ensure_future(queue.get())
                await asyncio.wait((got, gone), return_when=asyncio.FIRST_COMPLETED)
                if not got.done() or got.result() is None:
                    return
                view = dict(got.result())
                view["actions"] = bool(self.policy.web_actions)
                writer.write(self._event(view))
                await writer.drain()
        finally:
            self.watchers.unsubscribe(queue)
            gone.cancel()
            if got is not None:
                got.cancel()

    @staticmethod
    def _event(view: dict) -> bytes:
        return b"data: " + as_json(view) + b"\n\n"

    async def _act(self, req: Request, reader: asyncio.StreamReader) -> bytes:
        if not self.policy.web_actions or self.engine is None or self.ticker is None:
            return FORBIDDEN
        origin = req.headers.get("origin")
        if origin is not None and origin not in (f"http://{HOST}:{self.port}", f"http://localhost:{self.port}"):
            return FORBIDDEN  # a form posted from another page (the cookie is SameSite=Strict too)
        try:
            length = int(req.headers.get("content-length", ""))
        except ValueError:
            return BAD_REQUEST
        if not 0 < length <= BODY_LIMIT:
            return BAD_REQUEST
        try:
            body = json.loads(await asyncio.wait_for(reader.readexactly(length), HEAD_S))
        except (asyncio.TimeoutError, asyncio.IncompleteReadError):
            return None
        except ValueError:
            return response(400, b"the body is not JSON")
        do = body.get("do") if isinstance(body, dict) else None
        if do not in ACTIONS:
            return response(400, f"do: one of {', '.join(ACTIONS)}".encode())
        if do in ("release", "stop"):
            job_id = body.get("id")
            if not isinstance(job_id, str) or not re.fullmatch(r"[A-Za-z0-9_.:-]{1,100}", job_id):
                return response(400, b"id: a job's id, e.g. r-4")
            code, line = await release(self.engine, self.ticker, job_id, do == "stop")
        else:
            code, line = await set_game(self.engine, self.ticker, do == "game_on")
        return response(200, as_json({"code": code, "line": line}), "application/json")


WHO = "res web (the page)"  # who asked, in the record of changes to queue.toml and game.toml


async def release(engine: "Engine", ticker: "Ticker", job_id: str, stop: bool) -> tuple[int, str]:
    """As the socket's `release` op (loop/answers.py): a queued entry or a note withdrawn, a job stopped."""
    from reconciler.ops import requests as ops

    code, line, _ = await ops.release(engine, ticker.pass_after_now, job_id, stop, who=WHO)
    return code, line


async def set_game(engine: "Engine", ticker: "Ticker", on: bool) -> tuple[int, str]:
    """As `res game on|off` (commands/usercmds.py): the same writer method, then a pass applies it.
    `on` lasts the policy's game_hours; on while on extends, never shortens."""
    import copy

    from reconciler.config.zone import zone_of
    from reconciler.desired.reader import DesiredError
    from reconciler.ops.game import set_game as write_game
    from reconciler.render.text import fmt_clock

    writer = copy.copy(engine.writer)  # its own `who`: edits on other threads keep theirs
    writer.who = WHO
    try:
        until = await asyncio.to_thread(write_game, writer, engine.paths, engine.policy, on, time.time())
    except DesiredError as e:
        return 1, f"res: {e}"
    ticker.kick()
    if on:
        return 0, f"game on until {fmt_clock(until, zone_of(engine.policy))}"
    return 0, "game off; agents get their share back"


async def web_answer(engine: "Engine", ticker: "Ticker", watchers):
    """The socket's `web` (loop/protocol.Web): the listener started if it is not yet (kept with the
    watchers, whose views it serves, and closed with them), and its URL."""
    from reconciler.loop.protocol import Answer

    if watchers.web is None:
        watchers.web = WebServer(engine.paths, watchers, engine, ticker)
    try:
        url = await watchers.web.start()
    except WebRefused as e:
        return Answer(1, f"res: {e}")
    return Answer(0, url, url=url)
