"""`res hist`: title kinds, percentiles, suggestions, the hint and the table (pure tier, literals)."""
from __future__ import annotations

import re

import pytest

from reconciler.core import hist
from reconciler.core.hist import (
    HistRow,
    Suggestion,
    for_flag,
    hist_rows,
    median,
    mem_flag,
    percentile,
    round_for_s,
    round_mem_gb,
    suggestion_for,
    title_kind,
)
from reconciler.render.hist import hint_for, render_hist
from reconciler.core.models import JobRecord, Phase, Request, copy

T0 = 1764490000.0
_ids = iter(range(1, 10**6))


def rec(title="build abc123f", project="proj-a", mem=4.0, est=1800, took=180.0, peak=1.0, why="exited 0",
        phase=Phase.done, kind="job", stop_reason=None, rid=None, started=T0) -> JobRecord:
    req = Request(id=rid or f"r-{next(_ids)}", kind=kind, title=title, project=project, mem_gb=mem, est_s=est, created=T0 - 10)
    return JobRecord(request=req, phase=phase, started=started, ended=None if started is None else started + took,
                     rc=0, peak_gb=peak, why=why, stop_reason=stop_reason)


# The group the literals below are worked out from: "build" in proj-a, 7 runs.
#   peaks     0.8 0.9 1.0 1.0 1.1 1.2 0.7  -> sorted 0.7 0.8 0.9 1.0 1.0 1.1 1.2
#             p50: rank ceil(3.5)=4 -> 1.0     p95: rank ceil(6.65)=7 -> 1.2
#   took (s)  120 180 240 200 150 210 160  -> sorted 120 150 160 180 200 210 240
#             p50: rank 4 -> 180 (3 min)       p90: rank ceil(6.3)=7 -> 240 (4 min)
#   suggest   mem 1.2 x 1.15 = 1.38 -> 1.4G;   for 240 x 1.5 = 360 s -> 6m
BUILD = [
    rec("build abc123f", peak=0.8, took=120),
    rec("build 9f8e7d6", peak=0.9, took=180),
    rec("build (retry 2)", peak=1.0, took=240),
    rec("build", peak=1.0, took=200),
    rec("build 1234abcd", peak=1.1, took=150),
    rec("build deadbee1 (attempt 3)", peak=1.2, took=210),
    rec("build  #77aa", peak=0.7, took=160),
]


# ---------------------------------------------------------------- title kinds


@pytest.mark.parametrize("title, kind", [
    ("build abc123f", "build"),
    ("e2e (retry 2)", "e2e"),
    ("test 9f8e7d6 (attempt 3)", "test"),
    ("dotnet e2e (r-4) deadbeef1", "dotnet e2e"),
    ("a (b (c))", "a"),
    ("deploy #1234", "deploy"),
    ("build - abc123f", "build"),
    ("release 2024", "release"),
    ("fix bug 0x1f3a", "fix bug"),
    ("tests\nabc1234  ", "tests"),
    ("make e2e", "make e2e"),  # e2e: too short to be a hash
    ("cafe beef", "cafe beef"),  # words of hex letters without a digit are words
    ("v1.2 build", "v1.2 build"),
    ("foo (bar", "foo (bar"),  # unbalanced: kept
    ("abc1234", "abc1234"),  # nothing would be left: the whole title
    ("(retry 2)", "(retry 2)"),
    ("  make\t e2e  ", "make e2e"),
])
def test_title_kind(title, kind):
    assert title_kind(title) == kind


# ---------------------------------------------------------------- percentiles


def test_nearest_rank_percentiles():
    ten = list(range(1, 11))
    assert (percentile(ten, 50), percentile(ten, 90), percentile(ten, 95), percentile(ten, 100)) == (5, 9, 10, 10)
    # The textbook nearest-rank example: 15 20 35 40 50.
    five = [40, 15, 50, 35, 20]
    assert [percentile(five, p) for p in (5, 30, 40, 50, 100)] == [15, 20, 20, 35, 50]
    # 0.95 x 20 is 18.999...9 in floating point: still rank 19, not 20.
    assert (percentile(range(1, 21), 95), percentile(range(1, 21), 90)) == (19, 18)
    assert median([3, 1]) == 1  # the lower middle value
    assert median([7]) == 7 and percentile([7], 95) == 7
    assert percentile([], 50) is None and median([]) is None


@pytest.mark.parametrize("gb, want, flag", [
    (0.1, 0.25, "256M"), (0.3, 0.5, "512M"), (0.7, 0.75, "768M"), (0.975, 1.0, "1G"), (1.0, 1.0, "1G"),
    (1.2 * 1.15, 1.4, "1.4G"), (2.0 * 1.15, 2.3, "2.3G"), (10.01, 10.1, "10.1G"), (12.0, 12.0, "12G"),
])
def test_memory_rounds_up(gb, want, flag):
    assert round_mem_gb(gb) == want and mem_flag(want) == flag


@pytest.mark.parametrize("seconds, want, flag", [
    (1, 60, "1m"), (60, 60, "1m"), (61, 120, "2m"), (359.9, 360, "6m"), (360, 360, "6m"),
    (3600, 3600, "1h"), (5400, 5400, "90m"), (7199, 7200, "2h"),
])
def test_duration_rounds_up_to_a_minute(seconds, want, flag):
    assert round_for_s(seconds) == want and for_flag(want) == flag


# ---------------------------------------------------------------- rows and suggestions


def test_the_build_row():
    (row,) = hist_rows(BUILD)
    assert row == HistRow(
        project="proj-a", kind="build", n=7, req_gb=4.0, peak_p50_gb=1.0, peak_p95_gb=1.2, est_s=1800,
        dur_p50_s=180.0, dur_p90_s=240.0, killed=0,
        suggestion=Suggestion("proj-a", "build", 7, mem_gb=1.4, est_s=360, peak_p95_gb=1.2, dur_p90_s=240.0, killed=0),
    )


def test_what_does_not_count():
    noise = [
        rec("build x1y2", stop_reason="released", why="released", took=5, peak=0.1),
        rec("build", why="could not execute the command (not found or not executable)", took=0, peak=0.0),
        rec("build", why="stopped from outside res (signal TERM)", took=3, peak=0.2),
        rec("build", why="lost: the unit vanished without an exit record", peak=None),
        rec("build", why="start failed: no such directory", started=None, peak=None),
        rec("build", phase=Phase.running, why=None, peak=None),
        rec("build", phase=Phase.refused, why="busy", started=None, peak=None),
        rec("build", kind="note", peak=None),
        BUILD[0],  # the same record again (live and in history): once
    ]
    (row,) = hist_rows(BUILD + noise)
    assert row == hist_rows(BUILD)[0]


def test_a_job_killed_at_its_limit_counts_its_limit_as_peak():
    # peaks 5.0 6.0 and a kill at 8.0 -> p95 rank ceil(2.85)=3 -> 8.0, a limit it was killed at: mem 8.0 x 1.5 = 12.0
    # took 600 900 300 -> p90 rank ceil(2.7)=3 -> 900; for 900 x 1.5 = 1350 s = 22.5 min -> 23m
    e2e = [
        rec("e2e (retry 1)", project="proj-b", mem=8.0, est=1200, took=600, peak=5.0),
        rec("e2e", project="proj-b", mem=8.0, est=1200, took=900, peak=6.0),
        rec("e2e (retry 2)", project="proj-b", mem=8.0, est=1200, took=300, peak=7.9,
            why="killed at its memory limit (8.0 GB, peak 7.9 GB); raise --mem (try --mem 12G)"),
    ]
    (row,) = hist_rows(e2e)
    assert (row.n, row.peak_p50_gb, row.peak_p95_gb, row.dur_p90_s, row.killed) == (3, 6.0, 8.0, 900.0, 1)
    assert row.suggestion == Suggestion("proj-b", "e2e", 3, mem_gb=12.0, est_s=1380, peak_p95_gb=8.0, dur_p90_s=900.0, killed=1)
    assert hint_for(30.0, 1200, row.suggestion) == (
        'hint: "e2e" in proj-b peaked at 8.0 GB (p95, 3 runs, 1 killed at the limit); --mem 12G would do')


def test_fewer_than_three_runs_or_peaks():
    two = hist_rows(BUILD[:2])[0]
    assert two.n == 2 and two.suggestion is None and two.peak_p95_gb == 0.9
    no_peak = [rec("lint", took=60, peak=None), rec("lint", took=90, peak=0.5), rec("lint", took=30, peak=0.4)]
    s = hist_rows(no_peak)[0].suggestion
    # two known peaks: no --mem; durations 30 60 90 -> p90 rank ceil(2.7)=3 -> 90 x 1.5 = 135 s -> 3m
    assert (s.mem_gb, s.peak_p95_gb, s.est_s) == (None, None, 180)


def test_groups_by_project_and_kind_and_filters_by_project():
    other = [rec("build 1a2b3c4", project="proj-b"), rec("lint", project="proj-a")]
    rows = hist_rows(BUILD + other)
    assert [(r.project, r.kind, r.n) for r in rows] == [("proj-a", "build", 7), ("proj-a", "lint", 1), ("proj-b", "build", 1)]
    assert [(r.project, r.kind) for r in hist_rows(BUILD + other, project="proj-b")] == [("proj-b", "build")]
    assert hist_rows(BUILD, project="nope") == []


def test_suggestion_for_a_new_request():
    s = suggestion_for(BUILD + [rec("build", project="proj-b")], "proj-a", "build f00dfeed1 (retry 9)")
    assert (s.kind, s.n, s.mem_gb, s.est_s) == ("build", 7, 1.4, 360)
    assert suggestion_for(BUILD, "proj-b", "build") is None
    assert suggestion_for(BUILD, "proj-a", "deploy") is None


# ---------------------------------------------------------------- the hint


SUGG = Suggestion("proj-a", "build", 7, mem_gb=1.4, est_s=360, peak_p95_gb=1.2, dur_p90_s=240.0, killed=0)


def test_hint_for_memory():
    assert hint_for(4.0, 600, SUGG) == 'hint: "build" in proj-a peaked at 1.2 GB (p95, 7 runs); --mem 1.4G would do'


def test_hint_for_duration():
    assert hint_for(1.0, 721, SUGG) == 'hint: "build" in proj-a took 4 min (p90, 7 runs); --for 6m would do'


def test_hint_for_both():
    assert hint_for(4.0, 1800, SUGG) == (
        'hint: "build" in proj-a peaked at 1.2 GB (p95) and took 4 min (p90) over 7 runs; --mem 1.4G --for 6m would do')


def test_hint_threshold_is_more_than_twice():
    assert hint_for(2.8, 720, SUGG) is None  # exactly 2 x 1.4 GB and 2 x 6 min
    assert hint_for(2.81, 720, SUGG) is not None
    assert hint_for(2.8, 721, SUGG) is not None
    assert hint_for(100.0, 10**6, None) is None
    assert hint_for(100.0, 600, SUGG._replace(mem_gb=None, peak_p95_gb=None)) is None


def test_hint_small_peaks_and_no_project_and_hostile_kind():
    s = Suggestion("", 'say "hi"\x1b[31m', 4, mem_gb=0.25, est_s=60, peak_p95_gb=0.2, dur_p90_s=30.0, killed=0)
    assert hint_for(1.0, 60, s) == "hint: \"say 'hi' [31m\" peaked at 205 MB (p95, 4 runs); --mem 256M would do"


# ---------------------------------------------------------------- the table


def test_render_hist():
    e2e = [
        rec("e2e", project="proj-b", mem=8.0, est=1200, took=600, peak=5.0),
        rec("e2e", project="proj-b", mem=8.0, est=1200, took=900, peak=6.0),
        rec("e2e", project="proj-b", mem=8.0, est=1200, took=300, peak=7.9, why="killed at its memory limit (8.0 GB)"),
    ]
    rows = hist_rows(BUILD + e2e + [rec("lint", project="proj-b", mem=0.5, est=120, took=45, peak=0.3)])
    assert render_hist(rows) == "\n".join([
        "project  kind     runs     req  peak p50  peak p95     est  took p50  took p90  suggest",
        'proj-a   "build"     7  4.0 GB    1.0 GB    1.2 GB  30 min     3 min     4 min  --mem 1.4G --for 6m',
        'proj-b   "e2e"       3  8.0 GB    6.0 GB    8.0 GB  20 min    10 min    15 min  --mem 12G --for 23m  1 killed at the limit',
        'proj-b   "lint"      1  0.5 GB    0.3 GB    0.3 GB   2 min      45 s      45 s  - (needs 3 runs)',
    ])


def test_render_nothing():
    assert render_hist([]) == "no finished jobs to learn from yet"


def test_render_aligns_every_line():
    text = render_hist(hist_rows(BUILD + [rec("a much longer kind of title", project="p")]))
    lines = text.splitlines()
    kind_at = {len(re.match(r"^\S+ +", line).group()) for line in lines}  # the kind column starts at one place
    runs_end = {len(re.match(r"^\S+ +(\"[^\"]*\"|kind) +\S+", line).group()) for line in lines}  # runs: right-aligned
    assert len(lines) == 3 and len(kind_at) == 1 and len(runs_end) == 1
    assert all(line == line.rstrip() for line in lines)


def test_constants_are_the_documented_ones():
    assert (hist.MIN_RUNS, hist.MEM_FACTOR, hist.FOR_FACTOR, hist.HINT_FACTOR) == (3, 1.15, 1.5, 2.0)


def test_categories_come_from_the_outcome_code_not_from_the_words():
    """Reasons are data: a record's outcome code decides whether it counts and whether it was killed
    at its limit; the words of `why` are read only for records from before the codes."""
    from reconciler.core.hist import counted, killed_at_limit

    coded = copy(rec(why="whatever the wording"), **{"detail": {"code": "memory_limit"}})
    assert killed_at_limit(coded) and counted(coded)
    failed = copy(rec(why="exited 0"), **{"detail": {"code": "start_failed"}})
    assert not counted(failed)
    legacy = rec(why="killed at its memory limit (4.0 GB); raise --mem (try --mem 6G)")
    assert legacy.detail is None and killed_at_limit(legacy)
