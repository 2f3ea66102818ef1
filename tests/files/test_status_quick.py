"""`res status` as agents poll it (issue 38: its cost): the loop's answer straight from the console
script's entry (reconciler/entry.py → commands/status.py), the whole command line only for other
forms and when no loop answers, and then without asking a loop that already failed to answer.

The loop here is a socket server of the test's own that records what it is asked; the console script
runs as a user runs it, a fresh process."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from reconciler.commands.status import quick, simple_form

ENTRY = "import sys; sys.argv[0] = 'res'; from reconciler.entry import main; main()"
ROOT = Path(__file__).resolve().parents[2]


class FakeLoop:
    """Listens on serve.sock; answers each request with `answer` (None: reads it and says nothing)."""

    def __init__(self, state: Path, answer: dict | None):
        self.answer, self.asked, self.done = answer, [], threading.Event()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(state / "serve.sock"))
        self.server.listen(8)
        self.server.settimeout(0.1)
        self.held: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.done.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                continue
            buf = b""
            conn.settimeout(5)
            while b"\n" not in buf:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                buf += chunk
            self.asked.append(json.loads(buf.split(b"\n")[0]))
            if self.answer is None:
                self.held.append(conn)  # listening, never answering: a stopped loop
                continue
            conn.sendall(json.dumps(self.answer).encode() + b"\n")
            conn.close()

    def close(self) -> None:
        self.done.set()
        self.thread.join(5)
        for c in self.held:
            c.close()
        self.server.close()


@pytest.fixture
def state(tmp_path):
    d = tmp_path / "state"
    d.mkdir()
    return d


def _env(state: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RES_")}
    env.update(RES_STATE_DIR=str(state), RES_LOOP_AUTOSTART="false", PYTHONPATH=str(ROOT), **extra)
    return env


def _res(state: Path, *args: str, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", ENTRY, *args], capture_output=True, text=True, env=_env(state, **extra),
                          cwd="/tmp", timeout=60)


def test_the_simple_forms_are_the_flags_alone():
    assert simple_form([]) == (False, False)
    assert simple_form(["--json"]) == (True, False)
    assert simple_form(["--all", "--json"]) == (True, True)
    for other in (["r-1"], ["--json", "--json"], ["-h"], ["--help"], ["--jso"], ["--json=1"], ["--all", "r-2"]):
        assert simple_form(other) is None, other


def test_the_loops_answer_is_printed_as_the_whole_command_prints_it(state, capsys):
    loop = FakeLoop(state, {"code": 0, "line": "r-1 running 1.0 GB\nagents may use 3 GB", "problem": None})
    try:
        code, asked = quick(["--json"], _env(state))
    finally:
        loop.close()
    out = capsys.readouterr()
    assert (code, asked) == (0, False)
    assert out.out == "r-1 running 1.0 GB\nagents may use 3 GB\n" and out.err == ""
    assert loop.asked == [{"op": "status", "id": None, "json": True, "all": False}]


def test_a_failing_answer_and_its_problem_go_to_stderr(state, capsys):
    loop = FakeLoop(state, {"code": 1, "line": "r-9: no such entry", "problem": "queue.toml: unreadable"})
    try:
        code, _ = quick([], _env(state))
    finally:
        loop.close()
    out = capsys.readouterr()
    assert code == 1 and out.out == ""
    assert out.err == "r-9: no such entry\nres: queue.toml: unreadable\n"


def test_no_loop_means_the_whole_way_and_nothing_printed(state, capsys):
    assert quick([], _env(state)) == (None, False)
    assert capsys.readouterr() == ("", "")


def test_a_loop_that_listens_without_answering_is_not_asked_twice(state):
    """A stopped loop: the quick path waits its answer time (here 1 s), then the whole command reads
    state.db here without asking again, and still answers."""
    loop = FakeLoop(state, None)
    try:
        p = _res(state, "status", RES_ANSWER_WAIT_S="1")
    finally:
        loop.close()
    assert p.returncode == 0, p.stderr
    assert "no entries" in p.stdout
    assert len(loop.asked) == 1, loop.asked


def test_an_entry_id_goes_the_whole_way_and_asks_the_loop_once(state):
    loop = FakeLoop(state, {"code": 0, "line": "r-3 done rc=0"})
    try:
        p = _res(state, "status", "r-3")
    finally:
        loop.close()
    assert (p.returncode, p.stdout) == (0, "r-3 done rc=0\n"), p.stderr
    assert loop.asked == [{"op": "status", "id": "r-3", "json": False, "all": False}]


def test_a_bad_answer_wait_is_said_by_the_whole_command(state):
    loop = FakeLoop(state, {"code": 0, "line": "no entries"})
    try:
        p = _res(state, "status", RES_ANSWER_WAIT_S="soon")
    finally:
        loop.close()
    assert p.returncode == 2 and "RES_ANSWER_WAIT_S='soon'" in p.stderr, p.stderr
    assert loop.asked == []


def test_a_reader_that_went_away_gets_no_traceback(state):
    """`res status | head -1` on a long answer: the shell's code for a closed pipe, no "Broken pipe"."""
    loop = FakeLoop(state, {"code": 0, "line": "\n".join(f"r-{i} running" for i in range(1, 20000))})
    try:
        p = subprocess.run(f"{sys.executable} -c \"{ENTRY}\" status | head -1; echo \"${{PIPESTATUS[0]}}\"",
                           shell=True, executable="/bin/bash", capture_output=True, text=True, env=_env(state),
                           cwd="/tmp", timeout=60)
    finally:
        loop.close()
    assert p.stdout.splitlines() == ["r-1 running", "141"], p.stdout
    assert "Traceback" not in p.stderr and "Broken pipe" not in p.stderr, p.stderr
