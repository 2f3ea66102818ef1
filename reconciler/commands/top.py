"""`res top`: the live terminal view (Textual) of the machine view the loop streams (docs/watching.md).

It asks the loop's socket for `watch` (loop/protocol.Watch) and draws every view it pushes. With no loop it
draws the view made here from state.db and the machine (ops.view.build_view_here) every HERE_EVERY_S under
a banner that says so, and goes back to the loop's views as soon as one listens. The keys act on the
selected row by running the command line itself (`res release`, `res release --stop`, `res game`),
so a key does exactly what the command does, and its one line and exit code show in the status bar.

The only module that imports Textual: the command line loads it for `res top` alone.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Callable

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Footer, Label, Log, Static

from reconciler.config.paths import Paths
from reconciler.loop.protocol import Watch, request_line
from reconciler.core.quantities import Zone
from reconciler.render import top as draw

HERE_EVERY_S = 3.0         # without a loop: how often the view is made again here (and the loop looked for)
LOG_EVERY_S = 0.5          # how often the log panel reads on
LOG_FIRST_BYTES = 64 << 10  # the log panel opens on the last this many bytes of the log
LINE_LIMIT = 64 << 20      # one view line from the loop may be this long (thousands of entries)
CLI_TIMEOUT_S = 120.0
# The command line, run as a program (the same interpreter and import path as this one).
CLI = [sys.executable, "-c", "from reconciler.entry import main; main()"]

_SEGMENT_STYLE = {"sessions": "bold magenta", "jobs": "bold blue", "you": "bold green", "res": "bold yellow",
                  "cache": "cyan", "free": "grey30"}
_SEGMENT_CHAR = {"free": "░"}


def views_here(paths: Paths, policy) -> Callable[[], dict]:
    """The machine view without a loop, made again on each call; each call's CPU figures are the
    use since the one before (the first has none, as the loop's first view)."""
    previous = None

    def made() -> dict:
        nonlocal previous
        from reconciler.ops.view import build_view_here

        view, previous = build_view_here(paths, policy, previous)
        return view

    return made


class Confirm(ModalScreen[bool]):
    """y / n (or escape) on a question; the answer is the screen's result."""

    BINDINGS = [Binding("y", "answer(True)", "yes"), Binding("n", "answer(False)", "no"),
                Binding("escape", "answer(False)", "no", show=False)]
    DEFAULT_CSS = """
    Confirm { align: center middle; }
    Confirm > Label { width: auto; max-width: 90%; padding: 1 3; border: thick $warning; background: $surface; }
    """

    def __init__(self, question: str):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        yield Label(Text(f"{self.question}  (y / n)"), id="question")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class TopApp(App):
    """The view. `here`: makes the view without a loop; `cli`: the command line the keys run (a
    list, the arguments go after it)."""

    TITLE = "res top"
    BINDINGS = [Binding("q", "quit", "quit"), Binding("r", "release", "release"), Binding("s", "stop", "stop job"),
                Binding("l", "log", "follow log"), Binding("g", "game", "game mode"),
                Binding("escape", "close_log", "close log", show=False)]
    CSS = """
    #banner { background: $boost; color: $text; text-style: bold; height: 1; }
    #banner.away { background: $warning 40%; }
    #totals { height: auto; padding: 0 1; }
    #middle { height: auto; max-height: 50%; }
    #owners { width: 2fr; height: auto; max-height: 100%; }
    #side { width: 1fr; height: auto; padding: 0 1; }
    .title { text-style: bold; padding: 1 1 0 1; }
    #entries { height: 1fr; min-height: 4; }
    #log { height: 12; border-top: solid $accent; display: none; }
    #bar { height: 1; background: $boost; padding: 0 1; }
    """

    def __init__(self, paths: Paths, here: Callable[[], dict], zone: Zone, cli: list[str] | None = None,
                 here_every_s: float = HERE_EVERY_S):
        super().__init__()
        self.paths, self.here, self.zone = paths, here, zone
        self.cli = list(cli or CLI)
        self.here_every_s = here_every_s
        self.view: dict | None = None
        self.mode = "waiting"  # draw.banner's modes
        self.gone_at: float | None = None
        self.entries: dict[str, draw.EntryRow] = {}
        self.owners: dict[str, draw.OwnerRow] = {}
        self.outcomes: list[tuple[list[str], int, str]] = []  # (arguments, exit code, line) of each command run
        self.log_file: str | None = None
        self.log_at = 0
        self._log_timer = None

    def compose(self) -> ComposeResult:
        # Held, not queried: a view drawn while a question is on top must reach the main screen's widgets.
        self.w_banner = Static(Text(draw.banner("waiting", None, self.zone)), id="banner")
        self.w_totals, self.w_locks, self.w_spend, self.w_bar = (Static(id=n) for n in ("totals", "locks", "spend", "bar"))
        self.w_owners = DataTable(id="owners", cursor_type="row", zebra_stripes=True)
        self.w_entries = DataTable(id="entries", cursor_type="row", zebra_stripes=True)
        self.w_log = Log(id="log", max_lines=5000)
        yield self.w_banner
        yield self.w_totals
        with Horizontal(id="middle"):
            yield self.w_owners
            with Vertical(id="side"):
                yield self.w_locks
                yield self.w_spend
        yield Label("the queue and running entries (r release · s stop · l log)", classes="title")
        yield self.w_entries
        yield self.w_log
        yield self.w_bar
        yield Footer()

    def on_mount(self) -> None:
        self.w_owners.add_columns("owner", "memory", "GB", "cpu", "cpu %", "today")
        self.w_entries.add_columns(*draw.ENTRY_COLUMNS)
        self.w_entries.focus()
        self.run_worker(self._follow(), exclusive=True, group="follow")

    # ------------------------------------------------------------ where views come from

    async def _follow(self) -> None:
        """The loop's views while one streams them; the view made here meanwhile."""
        while True:
            streamed = await self._watch()
            if streamed:
                self.gone_at = time.time()
            mode = "old" if streamed is None else "gone" if self.gone_at else "here"
            await self._show_here(mode)
            await asyncio.sleep(self.here_every_s)

    async def _watch(self) -> bool | None:
        """Draw the loop's views until it hangs up. True: it streamed some; False: no loop (or it
        hung up at once); None: a loop that answered `watch` as a request it does not know."""
        try:
            reader, writer = await asyncio.open_unix_connection(str(self.paths.socket), limit=LINE_LIMIT)
        except OSError:
            return False
        streamed = False
        try:
            writer.write(request_line(Watch()))
            await writer.drain()
            while line := await reader.readline():
                try:
                    got = json.loads(line)
                except ValueError:
                    continue  # a torn line: the next view comes in 2 s
                if isinstance(got, dict) and got.get("v") == 1:
                    streamed = True
                    self.gone_at = None
                    self.show(got, "live")
                elif isinstance(got, dict) and "code" in got and not streamed:
                    return None
        except (OSError, ValueError):  # reset, or a line past LINE_LIMIT
            pass
        finally:
            writer.close()
        return streamed

    async def _show_here(self, mode: str) -> None:
        try:
            view = await asyncio.to_thread(self.here)
        except Exception as e:  # noqa: BLE001 - a view that cannot be made is said on the banner, not a crash
            self._banner(f"no res serve running, and state.db cannot be read: {' '.join(str(e).split()) or type(e).__name__}",
                         away=True)
            return
        self.show(view, mode)

    # ------------------------------------------------------------ drawing

    def _banner(self, line: str, away: bool) -> None:
        banner = self.w_banner
        banner.update(Text(line))
        banner.set_class(away, "away")

    def show(self, view: dict, mode: str) -> None:
        self.view, self.mode = view, mode
        self._banner(draw.banner(mode, view, self.zone, self.gone_at), away=mode != "live")
        totals = Text()
        totals.append(draw.memory_line(view) + "\n")
        for name, cells in draw.memory_segments(view, max(self.size.width - 4, 20)):
            totals.append(_SEGMENT_CHAR.get(name, "█") * cells, style=_SEGMENT_STYLE[name])
        totals.append("\n")
        for name in ("sessions", "jobs", "you", "res", "cache"):
            totals.append("■ ", style=_SEGMENT_STYLE[name])
            totals.append(f"{name}  ")
        totals.append(f"\n{draw.cpu_line(view)} · {draw.pressure_line(view)} · ")
        game = draw.game_line(view, self.zone)
        totals.append(game, style="bold red" if game.startswith("game mode ON") else "")
        ladder = draw.ladder_line(view)
        totals.append("\n" + ladder, style="" if ladder.startswith("ladder green") else "bold red")
        self.w_totals.update(totals)
        self.w_locks.update(Text("locks\n", style="bold") + Text("\n".join(draw.lock_lines(view, self.zone))))
        self.w_spend.update(Text("\nagent spend today\n", style="bold")
                                                 + Text("\n".join(draw.spend_lines(view, self.zone))))
        self._fill_owners(view)
        self._fill_entries(view)

    def _fill_owners(self, view: dict) -> None:
        table = self.w_owners
        total = (view.get("memory") or {}).get("total_gb")
        cores = ((view.get("cpu") or {}).get("nproc") or 1) * 100
        rows = draw.owner_rows(view)
        self.owners = {r.key: r for r in rows}
        cells = [(Text(r.label), Text(draw.bar(r.gb, total, 16), style=_SEGMENT_STYLE.get(r.kind + "s", _SEGMENT_STYLE.get(r.kind, ""))),
                  Text(draw.gb_text(r.gb), justify="right"), Text(draw.bar(r.cpu_pct, cores, 8), style="bold"),
                  Text("" if r.cpu_pct is None else draw.pct_text(r.cpu_pct), justify="right"),
                  Text("" if r.spend_usd is None else f"${r.spend_usd:.2f}", justify="right")) for r in rows]
        _refill(table, [r.key for r in rows], cells)

    def _fill_entries(self, view: dict) -> None:
        table = self.w_entries
        rows = draw.entry_rows(view, self.zone)
        self.entries = {r.id: r for r in rows}
        styles = {"queued": "yellow", "running": "green", "starting": "green", "noted": "cyan"}
        _refill(table, [r.id for r in rows],
                [tuple(Text(c, style=styles.get(r.cells[1], "dim") if i == 1 else "") for i, c in enumerate(r.cells))
                 for r in rows])

    # ------------------------------------------------------------ keys

    def _target(self) -> draw.Target | None:
        """The entry of the selected row: in the focused table (the entries when neither has focus)."""
        table = self.focused if isinstance(self.focused, DataTable) else self.w_entries
        key = _selected_key(table)
        if key is None:
            return None
        if table.id == "owners":
            owner = self.owners.get(key)
            if owner is None or owner.job_id is None:
                return None
            key = owner.job_id
        e = self.entries.get(key)
        return draw.Target(e.id, e.kind, e.state, e.log) if e else draw.Target(key, "job", "running", None)

    def say(self, line: str) -> None:
        self.w_bar.update(Text(line))

    def _ask_then_run(self, args: list[str] | None, question: str) -> None:
        if args is None:
            self.say(question)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.say(f"res {' '.join(args)} …")
                self.run_worker(self._run(args), group="cli")
            else:
                self.say(f"res {' '.join(args)}: not run")

        self.push_screen(Confirm(question), answered)

    async def _run(self, args: list[str]) -> None:
        try:
            proc = await asyncio.create_subprocess_exec(*self.cli, *args, stdin=asyncio.subprocess.DEVNULL,
                                                        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        except OSError as e:
            line = f"res {' '.join(args)}: could not run {self.cli[0]}: {e.strerror or e}"
            self.outcomes.append((args, 127, line))
            self.say(line)
            return
        try:
            out, err = await asyncio.wait_for(proc.communicate(), CLI_TIMEOUT_S)
        except asyncio.TimeoutError:
            proc.kill()  # ours, by its pid
            out, err = await proc.communicate()
        code = proc.returncode if proc.returncode is not None else -1
        line = draw.outcome_line(args, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))
        self.outcomes.append((args, code, line))
        self.say(line)

    def action_release(self) -> None:
        self._ask_then_run(*draw.release_args(self._target()))

    def action_stop(self) -> None:
        self._ask_then_run(*draw.stop_args(self._target()))

    def action_game(self) -> None:
        self._ask_then_run(*draw.game_args(self.view))

    def action_log(self) -> None:
        path, line = draw.log_path(self._target())
        self.say(line)
        if path is None:
            return
        log = self.w_log
        log.clear()
        log.display = True
        self.log_file = path
        try:
            self.log_at = max(os.path.getsize(path) - LOG_FIRST_BYTES, 0)
        except OSError:
            self.log_at = 0
        self._read_log()
        if self._log_timer is None:
            self._log_timer = self.set_interval(LOG_EVERY_S, self._read_log)

    def action_close_log(self) -> None:
        if self._log_timer is not None:
            self._log_timer.stop()
            self._log_timer = None
        self.log_file = None
        self.w_log.display = False

    def _read_log(self) -> None:
        if self.log_file is None:
            return
        try:
            with open(self.log_file, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self.log_at:  # truncated, or a new attempt's log: from its start
                    self.log_at = 0
                f.seek(self.log_at)
                chunk = f.read(1 << 20)
        except OSError as e:
            self.say(f"{draw.escaped_path(self.log_file)}: {e.strerror or e}")
            return
        self.log_at += len(chunk)
        if chunk:
            self.w_log.write(draw.log_text(chunk.decode("utf-8", "replace")))


def _selected_key(table: DataTable) -> str | None:
    if table.row_count == 0:
        return None
    try:
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
    except Exception:  # noqa: BLE001 - a cursor past a table that just shrank: nothing selected
        return None


def _refill(table: DataTable, keys: list[str], cells: list[tuple]) -> None:
    """Replace a table's rows, keeping the selected row selected (by its key) across views."""
    selected = _selected_key(table)
    table.clear()
    for key, row in zip(keys, cells):
        table.add_row(*row, key=key)
    if selected in keys:
        table.move_cursor(row=keys.index(selected), animate=False)


def cmd_top(a, paths: Paths) -> int:
    from reconciler.commands.base import Fail, the_policy
    from reconciler.config.zone import zone_of

    if not (sys.stdin.isatty() and sys.stderr.isatty()):  # Textual draws on stderr (stdout may be redirected)
        raise Fail("res: res top draws in a terminal (res status --json for the entries as data)")
    policy = the_policy()
    TopApp(paths, views_here(paths, policy), zone_of(policy)).run()
    return 0
