"""`res top` driven by Textual's pilot (App.run_test): what it draws from a machine view, and what its
keys run. The views here are HAND-BUILT dicts shaped like docs/watching.md's contract (the loop side
that makes them is another module's); the loop, where one is needed, is a unix socket server of the
test's own that streams them as `watch` does. The keys' command line is a recorder script that writes
down its argv (the real command line against a real state dir: tests/systemd/test_top_tmux.py)."""
from __future__ import annotations

import asyncio
import html
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import pytest

from reconciler.commands.top import TopApp
from reconciler.config.paths import Paths
from reconciler.core.view import local_date
from reconciler.render import top as draw

UTC = lambda ts: 0  # noqa: E731 - the zone: clock times in UTC, whatever the machine's
SIZE = (160, 45)
HOSTILE_TITLE = "[bold]build[/] \x1b[31mred"


def hand_built_view(now: float | None = None, game_on: bool = False) -> dict:
    """Two agent sessions, one running job (r-4, asked by the first), a queued entry (r-5) waiting
    for r-4's lock, and a note (r-6): a view as the contract shapes it, made by hand."""
    now = time.time() if now is None else now
    return {
        "v": 1, "at": now, "loop": None,
        "memory": {"total_gb": 23.5, "available_gb": 14.2, "free_gb": 3.1, "cache_gb": 9.8,
                   "agents_budget_gb": 8.0, "reserve_gb": 4.0, "pressure_full_pct": 0.0},
        "cpu": {"nproc": 2, "busy_pct": 37.5},
        "owners": [
            {"key": "job:r-4", "kind": "job", "label": 'r-4 "dotnet e2e"', "project": "proj-a", "gb": 7.5,
             "cpu_pct": 180.0, "session": "session:4121"},
            {"key": "session:4121", "kind": "session", "label": "claude pid 4121", "gb": 1.2, "cpu_pct": 3.0,
             "jobs": ["r-4"], "spend_today_usd": 0.52},
            {"key": "session:5555", "kind": "session", "label": "codex pid 5555", "gb": 0.8, "cpu_pct": 1.0,
             "jobs": [], "spend_today_usd": 1.25},
            {"key": "you", "kind": "you", "label": "your programs", "gb": 3.0, "cpu_pct": 12.0},
            {"key": "res", "kind": "res", "label": "res", "gb": 0.05, "cpu_pct": 0.1},
        ],
        "status": {
            "jobs": [
                {"id": "r-4", "kind": "job", "state": "running", "title": "dotnet e2e", "mem_gb": 8.0, "used_gb": 7.5,
                 "eta": now + 600, "log": None, "position": None, "est_start": None, "waits": None},
                {"id": "r-5", "kind": "job", "state": "queued", "title": HOSTILE_TITLE, "mem_gb": 4.0, "used_gb": None,
                 "position": 1, "est_start": now + 600, "log": None,
                 "waits": "position 1; est. start ~10:10; lock 'e2e' held by r-4"},
                {"id": "r-6", "kind": "note", "state": "running", "title": "my build", "mem_gb": 2.0, "used_gb": None,
                 "log": None},
            ],
            "game": {"on": game_on, "until": now + 3600 if game_on else None, "left_s": 3600 if game_on else None},
            "pressure": {"full_avg10_pct": 0.0, "limit_pct": 10.0},
            "budget": {"spend_today_usd": 1.77},
        },
        "locks": [{"lock": "e2e@proj-a", "holder": "r-4", "until": now + 600, "waiting": ["r-5"]}],
        "spend": [{"day": local_date(now, UTC), "session": "claude pid 4121", "usd": 0.52},
                  {"day": local_date(now, UTC), "session": "codex pid 5555", "usd": 1.25},
                  {"day": "2000-01-01", "session": "long ago", "usd": 99.0}],
        "timeline": [], "marks": [], "actions": False,
    }


RECORDER = "import json, sys\nopen(sys.argv[1], 'a').write(json.dumps(sys.argv[2:]) + '\\n')\nprint('recorded')\n"


@pytest.fixture
def recorder(tmp_path):
    """A stand-in for the command line: appends its arguments as one JSON line, says one line."""
    script = tmp_path / "recorder.py"
    script.write_text(RECORDER)
    calls = tmp_path / "calls.jsonl"

    def read() -> list[list[str]]:
        return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []

    return [sys.executable, str(script), str(calls)], read


@pytest.fixture
def short_dir():
    """A state dir whose socket path fits a sockaddr_un (pytest's tmp_path may not)."""
    import shutil

    d = Path(tempfile.mkdtemp(prefix="restop-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


async def screen_text(app, pilot) -> str:
    """The screen as text, once what the last view changed is drawn."""
    await pilot.pause(0.2)
    return html.unescape(re.sub(r"<[^>]+>", "", app.export_screenshot())).replace("\xa0", " ")


def table_rows(app, name: str) -> list[list[str]]:
    table = app.query_one(f"#{name}")
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def until(pilot, pred, what: str, limit_s: float = 20.0):
    """Let the app run until pred() holds (a bound on waiting, not a timing assertion)."""
    deadline = time.monotonic() + limit_s
    while not pred():
        assert time.monotonic() < deadline, f"never {what}"
        await pilot.pause(0.05)


def app_for(paths: Paths, view_fn, cli=None) -> TopApp:
    return TopApp(paths, view_fn, UTC, cli=cli, here_every_s=0.2)


def select(app, table: str, row_id: str) -> None:
    t = app.query_one(f"#{table}")
    t.focus()
    keys = [t.coordinate_to_cell_key((i, 0)).row_key.value for i in range(t.row_count)]
    t.move_cursor(row=keys.index(row_id))


# ---------------------------------------------------------------- what it draws


def test_without_a_loop_it_draws_the_view_made_here_under_the_banner(short_dir):
    view = hand_built_view()

    async def go():
        app = app_for(Paths(short_dir), lambda: view)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.view is not None, "drew a view")
            text = await screen_text(app, pilot)
            assert "no res serve running: showing state.db as of " in text and "start it with res serve" in text
            for seen in ("claude pid 4121", "codex pid 5555", 'r-4 "dotnet e2e"', "your programs", "page cache",
                         "memory 23.5 GB total", "agents' budget 8.0 GB", "your reserve 4.0 GB",
                         "memory pressure (PSI full avg10) 0.0 %", "game mode off", "e2e@proj-a", "held by r-4"):
                assert seen in text, seen
            owners = table_rows(app, "owners")
            labels = [r[0] for r in owners]
            # each session with its job under it, then yours, res, the cache
            assert labels == ["claude pid 4121", '  └ r-4 "dotnet e2e"', "codex pid 5555", "your programs", "res",
                              "page cache (reclaimable)"]
            assert owners[1][2] == "7.5 GB" and owners[1][4] == "180 %" and owners[0][5] == "$0.52"
            entries = {r[0]: r for r in table_rows(app, "entries")}
            assert set(entries) == {"r-4", "r-5", "r-6"}
            assert entries["r-5"][1:4] == ["queued", "1", draw.fmt_clock(view["at"] + 600, UTC)]
            assert entries["r-5"][6] == "position 1; est. start ~10:10; lock 'e2e' held by r-4"
            assert entries["r-6"][1] == "noted" and entries["r-4"][4] == "7.5 GB of 8.0 GB"
            # an agent's title is text, never markup or a terminal escape
            assert entries["r-5"][5] == "[bold]build[/] [31mred"
            spend = str(app.query_one("#spend").render())
            assert "$   1.25  codex pid 5555" in spend and "$   1.77  today in all" in spend and "long ago" not in spend

    asyncio.run(go())


def test_a_view_that_cannot_be_made_is_one_line_on_the_banner(short_dir):
    def broken():
        raise RuntimeError("state.db is\nnot a database")

    async def go():
        app = app_for(Paths(short_dir), broken)
        async with app.run_test(size=SIZE) as pilot:
            banner = app.query_one("#banner")
            await until(pilot, lambda: "cannot be read" in str(banner.render()), "said the view failed")
            assert str(banner.render()) == ("no res serve running, and state.db cannot be read: "
                                            "state.db is not a database")

    asyncio.run(go())


# ---------------------------------------------------------------- the loop's views


class FakeLoop:
    """A unix socket server of the test's own standing for the loop's `watch`: records each request
    line, then sends what the test puts in `lines`; `close()` hangs up on every watcher and stops."""

    def __init__(self, path: Path):
        self.path, self.requests = path, []
        self.lines: asyncio.Queue = asyncio.Queue()
        self.server = None
        self.writers: list = []

    async def start(self):
        self.server = await asyncio.start_unix_server(self._handle, str(self.path))
        return self

    async def _handle(self, reader, writer):
        self.requests.append(json.loads(await reader.readline()))
        self.writers.append(writer)
        try:
            while True:
                line = await self.lines.get()
                writer.write(json.dumps(line).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass

    async def close(self):
        self.server.close()
        for w in self.writers:
            w.close()
        await self.server.wait_closed()
        self.path.unlink(missing_ok=True)


def test_the_loops_views_are_drawn_live_and_its_going_away_is_said(short_dir):
    paths = Paths(short_dir)
    here_view = hand_built_view()
    here_view["owners"] = [o for o in here_view["owners"] if o["key"] != "session:5555"]

    async def go():
        loop = await FakeLoop(paths.socket).start()
        live = hand_built_view()
        live["loop"] = {"pid": 4242, "last_pass_at": live["at"] - 1}
        await loop.lines.put(live)
        app = app_for(paths, lambda: here_view)
        async with app.run_test(size=SIZE) as pilot:
            banner = app.query_one("#banner")
            await until(pilot, lambda: app.mode == "live", "drew the loop's view")
            assert loop.requests == [{"op": "watch"}]
            assert str(banner.render()).startswith("res serve (pid 4242) · view of ")
            assert not banner.has_class("away")
            assert "codex pid 5555" in [r[0] for r in table_rows(app, "owners")]
            # the next view replaces it (a second session gone, say)
            nxt = dict(live, owners=[o for o in live["owners"] if o["key"] != "session:5555"], at=live["at"] + 2)
            await loop.lines.put(nxt)
            await until(pilot, lambda: "codex pid 5555" not in [r[0] for r in table_rows(app, "owners")], "drew the next view")
            await loop.close()
            await until(pilot, lambda: app.mode == "gone", "noticed the loop went away")
            assert str(banner.render()).startswith("the loop went away at ") and banner.has_class("away")
            assert "start it with res serve" in str(banner.render())
            # a loop comes back: its views again
            loop2 = await FakeLoop(paths.socket).start()
            await loop2.lines.put(dict(live, loop={"pid": 4343, "last_pass_at": None}))
            await until(pilot, lambda: app.mode == "live", "reconnected")
            assert str(banner.render()).startswith("res serve (pid 4343)")
            await loop2.close()

    asyncio.run(go())


def test_a_loop_that_does_not_stream_views_is_said_and_state_db_shown(short_dir):
    paths = Paths(short_dir)

    async def go():
        loop = await FakeLoop(paths.socket).start()
        for _ in range(50):  # one answer per connection it makes
            await loop.lines.put({"code": 2, "line": "res: unknown request 'watch'"})
        app = app_for(paths, lambda: hand_built_view())
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.mode == "old", "fell back to the view made here")
            assert "does not stream views" in str(app.query_one("#banner").render())
            assert "r-5" in [r[0] for r in table_rows(app, "entries")]
        await loop.close()

    asyncio.run(go())


# ---------------------------------------------------------------- keys


def _press_and_wait(app, pilot):
    async def run(*keys, calls_before: int):
        await pilot.press(*keys)
        await until(pilot, lambda: len(app.outcomes) > calls_before, f"ran the command for {keys}")
    return run


def test_r_then_y_on_a_queued_row_runs_res_release_and_shows_its_line(short_dir, recorder):
    cli, calls = recorder

    async def go():
        app = app_for(Paths(short_dir), lambda: hand_built_view(), cli=cli)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.view is not None, "drew a view")
            select(app, "entries", "r-5")
            await pilot.press("r")
            await until(pilot, lambda: app.screen.__class__.__name__ == "Confirm", "asked to confirm")
            assert "release r-5?" in str(app.screen.query_one("#question").render())
            await _press_and_wait(app, pilot)("y", calls_before=0)
            assert calls() == [["release", "r-5"]]
            assert app.outcomes[-1][:2] == (["release", "r-5"], 0)
            assert str(app.query_one("#bar").render()) == "res release r-5 → exit 0: recorded"

    asyncio.run(go())


def test_n_cancels_and_runs_nothing(short_dir, recorder):
    cli, calls = recorder

    async def go():
        app = app_for(Paths(short_dir), lambda: hand_built_view(), cli=cli)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.view is not None, "drew a view")
            select(app, "entries", "r-6")  # a note: r releases it
            await pilot.press("r")
            await until(pilot, lambda: app.screen.__class__.__name__ == "Confirm", "asked to confirm")
            await pilot.press("n")
            await until(pilot, lambda: app.screen.__class__.__name__ != "Confirm", "closed the question")
            await pilot.pause(0.3)
            assert calls() == [] and app.outcomes == []
            assert str(app.query_one("#bar").render()) == "res release r-6: not run"

    asyncio.run(go())


def test_s_stops_a_running_job_from_its_owner_row_and_g_toggles_game_mode(short_dir, recorder):
    cli, calls = recorder
    game = {"on": False}

    async def go():
        app = app_for(Paths(short_dir), lambda: hand_built_view(game_on=game["on"]), cli=cli)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.view is not None, "drew a view")
            select(app, "owners", "job:r-4")
            await pilot.press("s")
            await _press_and_wait(app, pilot)("y", calls_before=0)
            select(app, "entries", "r-5")  # s on a queued entry: says what does, runs nothing
            await pilot.press("s")
            assert str(app.query_one("#bar").render()) == "r-5 is queued: r releases it"
            select(app, "entries", "r-4")  # r on a running job: says what does
            await pilot.press("r")
            assert str(app.query_one("#bar").render()) == "r-4 is running: s stops it"
            select(app, "owners", "session:4121")  # a session's row: no entry to act on
            await pilot.press("r")
            assert str(app.query_one("#bar").render()) == "r releases a queued entry or a note: select one first"
            await _press_and_wait(app, pilot)("g", "y", calls_before=1)
            game["on"] = True
            await until(pilot, lambda: (app.view or {}).get("status", {}).get("game", {}).get("on"), "drew game mode on")
            assert "game mode ON until " in await screen_text(app, pilot)
            await _press_and_wait(app, pilot)("g", "y", calls_before=2)
            assert calls() == [["release", "r-4", "--stop"], ["game", "on"], ["game", "off"]]

    asyncio.run(go())


def test_a_failing_command_shows_its_own_line_and_code(short_dir, tmp_path):
    failing = tmp_path / "fails.py"
    failing.write_text("import sys\nprint('res: no such entry: r-5', file=sys.stderr)\nsys.exit(1)\n")

    async def go():
        app = app_for(Paths(short_dir), lambda: hand_built_view(), cli=[sys.executable, str(failing)])
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.view is not None, "drew a view")
            select(app, "entries", "r-5")
            await pilot.press("r")
            await _press_and_wait(app, pilot)("y", calls_before=0)
            assert str(app.query_one("#bar").render()) == "res release r-5 → exit 1: res: no such entry: r-5"

    asyncio.run(go())


def test_l_follows_the_jobs_log_and_escape_closes_it(short_dir, tmp_path):
    log = tmp_path / "r-4.log"
    log.write_text("first line\n\x1b[2Jcleared?\n")
    view = hand_built_view()
    view["status"]["jobs"][0]["log"] = str(log)

    async def go():
        app = app_for(Paths(short_dir), lambda: view)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.view is not None, "drew a view")
            select(app, "entries", "r-4")
            await pilot.press("l")
            panel = app.query_one("#log")
            assert panel.display
            await until(pilot, lambda: "first line" in panel.lines, "showed the log")
            assert "\\x1b[2Jcleared?" in panel.lines  # the escape made visible, not sent to the terminal
            with log.open("a") as f:
                f.write("written later\n")
            await until(pilot, lambda: "written later" in panel.lines, "followed the log")
            await pilot.press("escape")
            assert not panel.display
            select(app, "entries", "r-6")
            await pilot.press("l")
            assert str(app.query_one("#bar").render()) == "r-6 has no log (note)"

    asyncio.run(go())


def test_top_without_a_terminal_says_so_in_one_line(tmp_path):
    import os
    import subprocess

    env = dict(os.environ, RES_STATE_DIR=str(tmp_path / "state"), RES_POLICY_FILE=str(tmp_path / "p.toml"))
    r = subprocess.run([sys.executable, "-m", "reconciler.cli", "top"], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == "res: res top draws in a terminal (res status --json for the entries as data)\n"
