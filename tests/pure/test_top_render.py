"""res top's text (reconciler/render/top.py): bars, the stacked memory bar, and which command a key
runs on which entry. Literals in, strings out."""
from __future__ import annotations

from reconciler.render import top as draw

UTC = lambda ts: 0  # noqa: E731


def test_a_bar_fills_eighths_of_cells_and_is_blank_when_unknown():
    assert draw.bar(5, 10, 4) == "██  "
    assert draw.bar(1, 8, 1) == "▏"
    assert draw.bar(1, 2, 1) == "▌"
    assert draw.bar(20, 10, 3) == "███"  # over the scale: full, never longer
    assert draw.bar(None, 10, 3) == draw.bar(3, None, 3) == draw.bar(3, 0, 3) == "   "


def test_the_stacked_memory_bar_sums_to_its_width_in_the_owners_order():
    view = {"at": 0.0, "memory": {"total_gb": 10.0, "cache_gb": 2.0, "agents_budget_gb": 3.0, "reserve_gb": 4.0},
            "owners": [{"kind": "session", "gb": 1.0}, {"kind": "job", "gb": 3.0}, {"kind": "job", "gb": 1.0},
                       {"kind": "you", "gb": 2.0}, {"kind": "res", "gb": 0.0}]}
    assert draw.memory_segments(view, 20) == [("sessions", 2), ("jobs", 8), ("you", 4), ("cache", 4), ("free", 2)]
    assert draw.memory_segments({"memory": {}}, 7) == [("free", 7)]


def test_each_key_runs_what_the_command_line_would_on_that_entry():
    queued = draw.Target("r-5", "job", "queued", None)
    note = draw.Target("r-6", "note", "running", None)
    running = draw.Target("r-4", "job", "running", "/s/logs/r-4.log")
    done = draw.Target("r-3", "job", "done", "/s/logs/r-3.log")
    assert draw.release_args(queued) == (["release", "r-5"], "release r-5?")
    assert draw.release_args(note) == (["release", "r-6"], "release r-6?")
    assert draw.release_args(running) == (None, "r-4 is running: s stops it")
    assert draw.release_args(done) == (None, "r-3 is done: nothing to release")
    assert draw.stop_args(running) == (["release", "r-4", "--stop"], "stop r-4?")
    assert draw.stop_args(note) == (None, "r-6 is a note: r releases it")
    assert draw.stop_args(None)[0] is None and draw.release_args(None)[0] is None
    assert draw.game_args({"status": {"game": {"on": True}}}) == (["game", "off"], "turn game mode off?")
    assert draw.game_args(None) == (["game", "on"], "turn game mode on?")
    assert draw.log_path(done) == ("/s/logs/r-3.log", "following /s/logs/r-3.log")
    assert draw.log_path(note) == (None, "r-6 has no log (note)")


def test_the_outcome_line_is_the_commands_last_line_and_code_on_one_line():
    assert draw.outcome_line(["release", "r-5"], 0, "r-5 released\n", "") == "res release r-5 → exit 0: r-5 released"
    assert draw.outcome_line(["game", "on"], 1, "", "res: a\nres: b\x1b[2J\n") == "res game on → exit 1: res: b [2J"
    assert draw.outcome_line(["game", "on"], 0, "", "") == "res game on → exit 0"


def test_the_banner_says_where_the_view_comes_from():
    view = {"at": 3600.0, "loop": {"pid": 7, "last_pass_at": 3540.0}}
    assert draw.banner("live", view, UTC) == "res serve (pid 7) · view of 01:00 · last pass 00:59"
    assert draw.banner("here", view, UTC) == "no res serve running: showing state.db as of 01:00; start it with res serve"
    assert draw.banner("gone", view, UTC, since=3660.0).startswith("the loop went away at 01:01: ")


def test_log_text_keeps_lines_and_shows_escapes():
    assert draw.log_text("a\tb\n\x1b[31mred\r\n") == "a\tb\n\\x1b[31mred\\r\n"


def test_a_session_row_names_the_notes_it_holds():
    view = {"at": 0.0, "memory": {"total_gb": 10.0},
            "owners": [{"key": "session:4121", "kind": "session", "label": "claude pid 4121", "gb": 1.0,
                        "notes": ["r-6"], "noted_gb": 4.0},
                       {"key": "you", "kind": "you", "label": "your programs", "gb": 2.0}]}
    labels = [row.label for row in draw.owner_rows(view)]
    assert labels[0] == "claude pid 4121 · 4.0 GB noted (r-6)"
    assert labels[1] == "your programs"


def test_a_job_booked_below_its_cap_says_both_and_where_from_and_the_ladder_is_named_off_green():
    view = {"at": 0.0, "memory": {"total_gb": 10.0, "rung": "amber", "rung_why": {"room_gb": 0.3, "guard_gb": 0.5, "because": "room"}},
            "owners": [{"key": "job:r-7", "kind": "job", "label": 'r-7 "e2e"', "project": "web", "gb": 2.0,
                        "book_gb": 2.2, "cap_gb": 3.5, "booked_from": "5 runs of make e2e"}],
            "status": {"jobs": [{"id": "r-7", "kind": "job", "state": "running", "mem_gb": 3.5, "book_gb": 2.2, "cap_gb": 3.5,
                                 "booked_from": "5 runs of make e2e", "used_gb": 2.0, "title": "e2e", "eta": None}]}}
    (row,) = [r for r in draw.owner_rows(view) if r.kind == "job"]
    assert row.label == 'web · r-7 "e2e" · 2.2 GB booked/3.5 GB'  # (where from: the entries table)
    (entry,) = draw.entry_rows(view, None)
    assert entry.cells[4] == "2.0 GB of 2.2 GB booked · 3.5 GB cap (5 runs of make e2e)"
    assert draw.ladder_line(view) == "ladder AMBER: 307 MB free beyond the reserve (guard 512 MB): nothing new starts"
    assert draw.ladder_line({"memory": {"rung": "green"}}) == "ladder green: admitting what fits"
