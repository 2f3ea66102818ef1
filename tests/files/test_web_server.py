"""The page's server (reconciler/loop/web.py) on a real socket, with a small fake of the watchers
(loop/watch.py's interface) whose view is shaped like docs/watching.md's: who gets in (the token, the
cookie, the Host, the peer's uid: a second user is refused even with the right token), what each route
answers, the token file (0600, made once, never through a planted symlink), and POST /act. The server
runs on an asyncio loop in a thread of its own; the clients are plain blocking sockets, and for the
second user a real process under uid 65534."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from reconciler.config.paths import Paths
from reconciler.loop import web
from reconciler.observed.sockets import owner_uid
from webfake import FakeWatchers, Served, a_view, http, policy

NOBODY = 65534


@pytest.fixture
def served(tmp_path):
    s = Served(Paths(tmp_path / "state"), policy())
    yield s
    s.close()



# ---------------------------------------------------------------- who gets in


def test_no_token_or_a_wrong_one_is_forbidden_and_the_right_one_gets_the_page(served):
    for target in ("/", "/view", "/events", "/history?hours=1", "/?token=", "/?token=" + "x" * 43,
                   "/view?token=" + served.token[:-1]):
        code, _, body = http(served.port, target)
        assert (code, body) == (403, b"forbidden"), target
    code, headers, body = http(served.port, f"/?token={served.token}")
    assert code == 200 and b'id="owners"' in body and b'id="memchart"' in body, body[:200]
    assert headers["content-type"] == ["text/html; charset=utf-8"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"][0]
    # nothing on the page comes from elsewhere: no address but its own
    assert b"http://" not in body.replace(b"http://www.w3.org/2000/svg", b"") and b"https://" not in body


def test_the_first_load_sets_a_strict_cookie_that_then_stands_for_the_token(served):
    _, headers, _ = http(served.port, f"/?token={served.token}")
    (cookie,) = headers["set-cookie"]
    parts = [p.strip() for p in cookie.split(";")]
    assert parts[0] == f"res_token={served.token}"
    assert "HttpOnly" in parts and "SameSite=Strict" in parts and "Path=/" in parts
    code, headers, body = http(served.port, "/view", headers={"Cookie": f"other=1; res_token={served.token}"})
    assert code == 200 and headers["content-type"] == ["application/json"]
    view = json.loads(body)
    assert view["v"] == 1 and view["owners"][0]["key"] == "job:r-4"
    assert view["actions"] is False  # the policy's web_actions, whatever the watchers said
    code, _, body = http(served.port, "/view", headers={"Cookie": "res_token=" + "A" * 43})
    assert (code, body) == (403, b"forbidden")
    # the page is set by the first load only (a later one by cookie sets nothing)
    _, headers, _ = http(served.port, "/", headers={"Cookie": f"res_token={served.token}"})
    assert "set-cookie" not in headers


def test_unknown_paths_methods_and_hosts_are_forbidden_even_with_the_token(served):
    t = served.token
    for target, method in ((f"/nothing?token={t}", "GET"), (f"/../state.db?token={t}", "GET"),
                           (f"/view?token={t}", "POST"), (f"/act?token={t}", "GET")):
        code, _, body = http(served.port, target, method)
        assert (code, body) == (403, b"forbidden"), (method, target)
    # a name rebound to 127.0.0.1 by another site is not this listener
    code, _, body = http(served.port, f"/view?token={t}", host=f"evil.example:{served.port}")
    assert (code, body) == (403, b"forbidden")
    code, _, _ = http(served.port, f"/view?token={t}", host=f"localhost:{served.port}")
    assert code == 200


def test_requests_that_are_not_http_get_400_and_the_server_goes_on(served):
    t = served.token
    for raw in (b"GET\r\n\r\n", b"DELETE / HTTP/1.1\r\n\r\n", b"GET view HTTP/1.1\r\n\r\n",
                b"GET / HTTP/1.1\r\n folded: yes\r\n\r\n", b"\xff\xfe / HTTP/1.1\r\n\r\n",
                f"GET /view?token={t} HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".encode()):
        code, _, body = http(served.port, "", raw=raw)
        assert code == 400 and body == b"bad request", raw
    # a head past 16 KiB is not read on
    code, _, _ = http(served.port, "", raw=f"GET /view?token={t} HTTP/1.1\r\nX: {'a' * (20 << 10)}\r\n\r\n".encode())
    assert code in (0, 400)
    assert http(served.port, f"/view?token={t}")[0] == 200


def test_a_client_that_sends_nothing_is_dropped_after_the_head_timeout(tmp_path, monkeypatch):
    monkeypatch.setattr(web, "HEAD_S", 0.3)
    s = Served(Paths(tmp_path / "state"), policy())
    try:
        with socket.create_connection(("127.0.0.1", s.port), timeout=20) as c:
            c.sendall(b"GET / HT")
            assert c.recv(100) == b""  # closed by the server, nothing answered
        assert s.server.connections == 0
    finally:
        s.close()


def test_a_second_user_with_the_right_token_is_refused_by_the_peer_uid(served, tmp_path):
    """uid 65534 can neither read the token file nor, handed the token, get past the peer check:
    the same request from our own uid gets in."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as a second user (setpriv)")
    token_file = web.token_path(served.server.paths)
    client = ("import sys, socket\n"
              "try:\n"
              "    open(sys.argv[3]).read(); print('READ')\n"
              "except OSError as e:\n"
              "    print('UNREADABLE', type(e).__name__)\n"
              "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=20)\n"
              "s.sendall(('GET /view?token=%s HTTP/1.1\\r\\nHost: 127.0.0.1:%s\\r\\n\\r\\n' % (sys.argv[2], sys.argv[1])).encode())\n"
              "data = b''\n"
              "while True:\n"
              "    c = s.recv(65536)\n"
              "    if not c: break\n"
              "    data += c\n"
              "print(data.split(b'\\r\\n')[0].decode(), data.split(b'\\r\\n\\r\\n', 1)[1][:12])\n")
    argv = [sys.executable, "-I", "-c", client, str(served.port), served.token, str(token_file)]
    other = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv],
                           capture_output=True, text=True, timeout=60, cwd="/")
    assert other.returncode == 0, other.stderr
    first, second = other.stdout.splitlines()
    assert first.startswith("UNREADABLE"), other.stdout
    assert second == "HTTP/1.1 403 Forbidden b'forbidden'", other.stdout
    ours = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert ours.stdout.splitlines() == ["READ", "HTTP/1.1 200 OK b'{\"v\":1,\"at\":'"], ours.stdout + ours.stderr


def test_the_peer_is_read_from_proc_net_tcp_established_sockets_only():
    lines = ["  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
             # a TIME_WAIT mini-socket of the same pair: uid 0, inode 0, never anyone's
             "   0: 0100007F:C6BA 0100007F:BC0B 06 00000000:00000000 03:000002D4 00000000     0        0 0 3 0",
             "   1: 0100007F:BC0B 0100007F:C6BA 01 00000000:00000000 00:00000000 00000000     0        0 7001 1 0",
             "   2: 0100007F:C6BB 0100007F:BC0B 01 00000000:00000000 00:00000000 00000000  1000        0 7002 1 0",
             "   3: garbage"]
    text = "\n".join(lines)
    server = ("127.0.0.1", 0xBC0B)
    assert owner_uid(text, ("127.0.0.1", 0xC6BB), server) == 1000
    assert owner_uid(text, ("127.0.0.1", 0xC6BA), server) is None  # only in TIME_WAIT: unknown, refused
    assert owner_uid(text, ("127.0.0.2", 0xC6BB), server) is None
    assert owner_uid("", ("127.0.0.1", 1), server) is None


# ---------------------------------------------------------------- the token file


def test_the_token_file_is_0600_made_once_and_kept_across_restarts(tmp_path):
    paths = Paths(tmp_path / "state")
    first = Served(paths, policy())
    first.close()
    path = web.token_path(paths)
    st = path.stat()
    assert oct(st.st_mode & 0o777) == "0o600" and st.st_uid == os.geteuid()
    assert path.read_text().strip() == first.token and len(first.token) == 43
    assert (paths.root / "web.port").read_text().strip() == str(first.port)
    second = Served(paths, policy())
    try:
        assert second.token == first.token
    finally:
        second.close()


@pytest.mark.parametrize("target_exists", [True, False])
def test_a_planted_symlink_is_refused_not_followed(tmp_path, target_exists):
    paths = Paths(tmp_path / "state")
    paths.ensure()
    target = tmp_path / "elsewhere"
    if target_exists:
        target.write_text("the attacker's known token\n")
        os.chmod(target, 0o600)
    web.token_path(paths).symlink_to(target)
    loop = asyncio.new_event_loop()
    try:
        server = web.WebServer(paths, FakeWatchers(), policy=policy())
        with pytest.raises(web.WebRefused, match=r"web\.token is a symbolic link, not res's token file; remove it"):
            loop.run_until_complete(server.start())
        assert server.server is None
    finally:
        loop.close()
    assert web.token_path(paths).is_symlink()
    if target_exists:
        assert target.read_text() == "the attacker's known token\n"
    else:
        assert not target.exists()


def test_a_token_file_others_may_read_is_refused_and_an_empty_one_made_anew(tmp_path):
    paths = Paths(tmp_path / "state")
    paths.ensure()
    path = web.token_path(paths)
    path.write_text("A" * 43 + "\n")
    os.chmod(path, 0o644)
    with pytest.raises(web.WebRefused, match=r"is not this user's alone \(mode 0644"):
        web.load_token(path)
    path.unlink()
    path.write_text("")  # a crash between making and writing
    os.chmod(path, 0o600)
    token = web.load_token(path)
    assert len(token) == 43 and path.read_text().strip() == token
    assert web.load_token(path) == token


def test_a_port_in_use_is_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        loop = asyncio.new_event_loop()
        try:
            server = web.WebServer(Paths(tmp_path / "state"), FakeWatchers(), policy=policy(web_port=port))
            with pytest.raises(web.WebRefused, match=rf"cannot listen on 127\.0\.0\.1:{port} \(policy web_port\): "):
                loop.run_until_complete(server.start())
        finally:
            loop.close()


# ---------------------------------------------------------------- the routes


def test_history_passes_the_hours_and_refuses_nonsense(served):
    t = served.token
    code, _, body = http(served.port, f"/history?hours=2&token={t}")
    assert code == 200 and served.watchers.asked_hours == [2.0]
    samples = json.loads(body)
    assert samples and set(samples[0]) == {"t", "gb", "budget", "reserve"}
    for bad in ("abc", "0", "-1", "nan", "1e9", "inf"):
        code, _, body = http(served.port, f"/history?hours={bad}&token={t}")
        assert code == 400 and body.startswith(b"hours: "), bad
    assert served.watchers.asked_hours == [2.0]


def _events(port: int, token: str):
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(f"GET /events?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    f = s.makefile("rb")
    head = []
    while (line := f.readline()) not in (b"\r\n", b""):
        head.append(line.decode().strip())

    def next_view() -> dict:
        while True:
            line = f.readline()
            assert line, "the stream ended"
            if line.startswith(b"data: "):
                assert f.readline() == b"\n"
                return json.loads(line[6:])

    def close() -> None:
        f.close()  # the file holds the socket open too
        s.close()

    return close, head, next_view


def test_events_stream_a_view_at_once_then_each_pushed_one_and_unsubscribe_when_the_browser_goes(served):
    close, head, next_view = _events(served.port, served.token)
    try:
        assert head[0] == "HTTP/1.1 200 OK" and "Content-Type: text/event-stream" in head
        first = next_view()
        assert first["marker"] == "first" and first["actions"] is False
        assert len(served.watchers.queues) == 1
        for marker in ("second", "third"):
            served.soon(served.watchers.push, a_view(marker))
            assert next_view()["marker"] == marker
    finally:
        close()
    deadline = time.monotonic() + 20
    while served.watchers.queues and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not served.watchers.queues, "the stream's queue was not unsubscribed after the client went"
    assert served.server.connections == 0


def test_events_end_when_the_loop_ends(served):
    """The watchers hand None when the loop is ending: the stream closes (the browser then says so)."""
    close, _, next_view = _events(served.port, served.token)
    try:
        assert next_view()["marker"] == "first"
        served.soon(served.watchers.push, None)
        with pytest.raises(AssertionError, match="the stream ended"):
            next_view()
        assert not served.watchers.queues
    finally:
        close()


# ---------------------------------------------------------------- POST /act


def test_act_is_forbidden_unless_the_policy_allows_it(served):
    body = json.dumps({"do": "game_on"}).encode()
    code, _, answer = http(served.port, f"/act?token={served.token}", "POST", {"Content-Type": "application/json"}, body)
    assert (code, answer) == (403, b"forbidden")
    assert not served.server.paths.game.exists()


def test_act_game_on_and_off_write_game_toml_as_res_game_does(tmp_path, res_env):
    from reconciler.desired.reader import read_game
    from reconciler.desired.writer import Writer

    paths = Paths(res_env["state"])
    kicks = []
    pol = policy(web_actions=True)
    engine = SimpleNamespace(paths=paths, writer=Writer(paths), policy=pol)
    ticker = SimpleNamespace(kick=lambda: kicks.append(1))
    s = Served(paths, pol, engine, ticker)
    try:
        post = lambda obj, **h: http(s.port, f"/act?token={s.token}", "POST",  # noqa: E731
                                     {"Content-Type": "application/json", **h}, json.dumps(obj).encode())
        code, _, answer = post({"do": "game_on"})
        assert code == 200 and json.loads(answer)["code"] == 0, answer
        assert json.loads(answer)["line"].startswith("game on until ")
        game, error = read_game(paths)
        assert error is None and game.active(time.time()) and game.until > time.time() + 3.9 * 3600
        assert kicks == [1]
        code, _, answer = post({"do": "game_off"})
        assert code == 200 and json.loads(answer) == {"code": 0, "line": "game off; agents get their share back"}
        assert not read_game(paths)[0].active(time.time()) and kicks == [1, 1]
        # what is not an action is one line, and changes nothing
        for bad, line in (({"do": "rm"}, b"do: one of release, stop, game_on, game_off"),
                          ({"do": "stop", "id": "../x y"}, b"id: a job's id, e.g. r-4"), ([1], b"do: one of")):
            code, _, answer = post(bad)
            assert code == 400 and answer.startswith(line), (bad, answer)
        # a form posted from another page is not the page
        code, _, answer = post({"do": "game_on"}, Origin="http://evil.example")
        assert (code, answer) == (403, b"forbidden")
        assert kicks == [1, 1] and not read_game(paths)[0].active(time.time())
    finally:
        s.close()
