"""Sizes res chooses (DESIGN §5.9, core/sizing.py) and the command fingerprint history files them under
(core/shellline.py), on real command lines from public projects' CI files (tests/fixtures/ci_commands:
lines.toml, SOURCES.md), and the numbers history learns (core/hist.learned). Pure tier.

A fixture line marked `wrong` is one whose fingerprint the spec (program + target words; paths, files,
option values, numbers and hashes dropped) and the code disagree on today: its test expects what the
spec says and is a strict xfail, the reason saying what the code gives."""
from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from reconciler.core import hist
from reconciler.core.gate import judge, line_fingerprint, make_table
from reconciler.core.models import JobRecord, Phase, Request
from reconciler.core.shellline import Unreadable, fingerprint
from reconciler.core.sizing import (
    MAX_EST_S,
    Seen,
    Size,
    combined,
    command_size,
    commands_of,
    policy_default,
    seen_entry,
    size_for,
)
from ruleset import rules

ROOT = Path(__file__).resolve().parents[2]
TABLE = make_table(tomllib.loads((ROOT / "policies" / "heavy.toml").read_text())["heavy"])
FIXTURES = ROOT / "tests" / "fixtures" / "ci_commands"
LINES = tomllib.loads((FIXTURES / "lines.toml").read_text())["line"]
BY_ID = {line["id"]: line for line in LINES}
DEFAULT = Size(1.0, 1.0, 900, "the policy's default")  # as policy_default makes it from auto_* 1 GB, 1 CPU, 15 min
TOOL = {t.key: t for t in TABLE}


def bash(line: str) -> list[str]:
    return ["bash", "-c", line]


def fp(line_id: str) -> str | None:
    return line_fingerprint(bash(BY_ID[line_id]["text"]))


def wrong_is_xfail(line: dict):
    marks = [pytest.mark.xfail(strict=True, reason=line["wrong"])] if "wrong" in line else []
    return pytest.param(line, id=line["id"], marks=marks)


# ---------------------------------------------------------------- the fixture


def test_every_line_is_cited_or_marked_hand_made():
    sources = (FIXTURES / "SOURCES.md").read_text()
    assert len(BY_ID) == len(LINES) >= 60
    real = [line for line in LINES if not line.get("made")]
    assert len(real) >= 40
    for line in LINES:
        assert f"**{line['id']}**" in sources, line["id"]
        assert (line["source"] == "hand-made") == bool(line.get("made")), line["id"]
        if not line.get("made"):
            assert f"| {line['source']} |" in sources, line["source"]
        assert ("commands" in line) != bool(line.get("unreadable")), line["id"]
        assert line["sized_from"] == "default" or line["sized_from"] in TOOL, line["id"]


# ---------------------------------------------------------------- fingerprints of real lines


@pytest.mark.parametrize("line", [wrong_is_xfail(line) for line in LINES])
def test_a_real_lines_fingerprint_is_what_a_person_calls_it(line):
    cmd = bash(line["text"])
    if line.get("unreadable"):
        with pytest.raises(Unreadable):
            commands_of(cmd)
    else:
        assert [fingerprint(c) for c in commands_of(cmd)] == line["commands"]
    assert line_fingerprint(cmd) == line.get("fingerprint")


SAME = [  # differ only in paths, options, option values, numbers or hashes
    ("poetry-pytest-integration", "poetry-pytest"),
    ("pydantic-uv-pytest-path", "pydantic-uv-pytest-options"),
    ("rich-env-pytest", "api-recorder-pytest-x"),
    ("amphimixis-uv-pytest-m", "made-pytest-k"),
    ("pytest-files-numbers", "pydantic-uv-pytest-path"),
    ("panda-pytest-n5", "panda-pytest-n2"),
    ("robotics-pytest-n-auto", "robotics-pytest"),
    ("okhttp-gradlew-prop", "okhttp-gradlew"),
    ("testify-go-test", "gox-go-test"),
    ("ripgrep-cargo-build", "nextest-cd-cargo-build"),
    ("redis-make-vars", "redis-make-comment"),
    ("redis-make-vars", "mypy-make-j4"),
    ("pydantic-make-test", "typechef-timeout-make-test"),
    ("made-script-hash-a", "made-script-hash-b"),
    ("robotics-pytest", "rich-env-pytest"),  # pytest and go test take no target words
    ("requests-python-m-pytest", "api-recorder-pytest-x"),  # pytest and go test take no target words
    ("panda-pytest-n5", "api-recorder-pytest-x"),  # pytest and go test take no target words
    ("rich-env-pytest-cov", "rich-env-pytest"),  # pytest and go test take no target words
    ("gox-go-test-timeout", "gox-go-test"),  # pytest and go test take no target words
]
SAME_BY_SPEC = [  # the same by the spec, not today
    ("nextest-build-package", "ripgrep-cargo-build", "--package's value is kept: 'cargo build cargo-nextest'"),
    ("mypy-make-j-subst", "mypy-make-j4", "`$(nproc)` in an argument is read as a command: no line fingerprint"),
]
DIFFERENT = [  # different targets
    ("pydantic-make-test", "redis-make-valgrind"),
    ("pydantic-make-test", "pydantic-make-pyright"),
    ("typechef-timeout-make-test", "typechef-timeout-make-depend"),
    ("cobra-env-make", "requests-cd-make-html"),
    ("pydantic-make-test", "redis-make-vars"),
    ("flask-tox", "flask-tox-typing"),
    ("pip-nox-docs", "pip-nox-release"),
    ("vite-pnpm-test-unit", "vite-pnpm-build"),
    ("pydantic-cargo-test", "pydantic-cargo-bench"),
    ("pydantic-cargo-test", "ripgrep-cargo-build"),
    ("pydantic-cargo-test", "nextest-run"),
    ("okhttp-gradlew", "okhttp-mvnw"),
    ("portfolio-cd-npm-build", "express-npm-run"),
    ("black-script-target", "pip-build-script"),
    ("mypy-runtests", "black-script-target"),
]
DIFFERENT_BY_SPEC = [
    ("fmt-cmake-configure", "fmt-cmake-build-dir", "`cmake --build` loses --build: both 'cmake'"),
    ("fmt-codeql-configure", "fmt-codeql-build", "both 'cmake build': --build dropped, the directory kept"),
]


@pytest.mark.parametrize("a, b", SAME)
def test_lines_that_differ_only_in_paths_options_and_hashes_share_a_fingerprint(a, b):
    assert fp(a) is not None and fp(a) == fp(b)


@pytest.mark.parametrize("a, b", [pytest.param(a, b, marks=pytest.mark.xfail(strict=True, reason=why)) for a, b, why in SAME_BY_SPEC])
def test_lines_the_spec_calls_the_same_share_a_fingerprint(a, b):
    assert fp(a) is not None and fp(a) == fp(b)


@pytest.mark.parametrize("a, b", DIFFERENT)
def test_different_targets_get_different_fingerprints(a, b):
    assert fp(a) and fp(b) and fp(a) != fp(b)


@pytest.mark.parametrize("a, b", [pytest.param(a, b, marks=pytest.mark.xfail(strict=True, reason=why)) for a, b, why in DIFFERENT_BY_SPEC])
def test_building_is_not_filed_with_configuring(a, b):
    assert fp(a) and fp(b) and fp(a) != fp(b)


# ---------------------------------------------------------------- sizes of real lines, no history


@pytest.mark.parametrize("line", LINES, ids=[line["id"] for line in LINES])
def test_a_real_line_without_history_is_sized_by_the_table_else_the_default(line):
    size = size_for(bash(line["text"]), None, TABLE, DEFAULT)
    key = line["sized_from"]
    if key == "default":
        assert size == DEFAULT
    else:
        t = TOOL[key]
        assert size == Size(t.mem_gb, t.cpus, t.est_s, f"the table's entry for {key}", 0, key)


GATE_WRONG: dict[str, str] = {}  # (`pytest -v` was taken for a question to the tool until -v left gate._ASKS_ONLY)


@pytest.mark.parametrize("line", [
    pytest.param(line, id=line["id"], marks=[pytest.mark.xfail(strict=True, reason=GATE_WRONG[line["id"]])] if line["id"] in GATE_WRONG else [])
    for line in LINES])
def test_the_gate_books_a_real_line_when_the_table_sizes_it(line):
    assert (judge(line["text"], TABLE) is not None) == (line["sized_from"] != "default")


# ---------------------------------------------------------------- the sizing order

MAKE = TOOL["make"]


def test_history_wins_over_the_table():
    learned = {"make test": [6.5, 1800, True, 4, 3.0]}
    assert size_for(bash("timeout 600 make test 2>&1"), learned, TABLE, DEFAULT) == \
        Size(6.5, 3.0, 1800, "4 earlier runs of make test", 4, "make test")
    # another target of the same tool: the table's entry for it
    assert size_for(bash("timeout 600 make depend"), learned, TABLE, DEFAULT) == \
        Size(MAKE.mem_gb, MAKE.cpus, MAKE.est_s, "the table's entry for make", 0, "make")
    # the same command written otherwise is the same history
    for argv in (["make", "-j8", "test"], bash("cd web && make test"), ["timeout", "600", "make", "test"],
                 bash("RICHGO_FORCE_COLOR=1 PATH=$HOME/go/bin/:$PATH make test")):
        assert size_for(argv, learned, TABLE, DEFAULT).source == "4 earlier runs of make test"


def test_the_table_wins_over_the_default_and_the_default_is_last():
    nextest = TOOL["cargo nextest"]
    assert size_for(bash("cargo nextest run --profile ci"), {}, TABLE, DEFAULT) == \
        Size(nextest.mem_gb, nextest.cpus, nextest.est_s, "the table's entry for cargo nextest", 0, "cargo nextest")
    assert size_for(bash("python scripts/diff_shades_gha_helper.py config"), {}, TABLE, DEFAULT) is DEFAULT
    assert size_for(bash("pytest -x"), None, TABLE, DEFAULT).source == "the table's entry for pytest"
    assert size_for(bash("pytest -x"), None, (), DEFAULT) is DEFAULT  # an empty table (the policy removed all)


def test_history_sizes_a_command_the_table_does_not_know():
    fp_ = "python diff_shades_gha_helper.py config"
    size = size_for(bash("python scripts/diff_shades_gha_helper.py config"), {fp_: [0.5, 120, False, 3, 1.5]}, TABLE, DEFAULT)
    assert size == Size(0.5, 1.5, 120, f"3 earlier runs of {fp_}", 3, fp_)


def test_cpus_history_did_not_learn_come_from_the_table_else_the_default():
    # learned cpus None, in the table: the table's cpus; memory and time still history's
    size = size_for(bash("cargo test"), {"cargo test": [5.0, 900, True, 2, None]}, TABLE, DEFAULT)
    assert size == Size(5.0, TOOL["cargo test"].cpus, 900, "2 earlier runs of cargo test", 2, "cargo test")
    # an older gate.json's 4-element entry: the same
    size = size_for(bash("make test"), {"make test": [6.5, 1800, True, 4]}, TABLE, DEFAULT)
    assert (size.mem_gb, size.cpus, size.est_s) == (6.5, MAKE.cpus, 1800)
    # not in the table: the default's cpus (and one run is "1 earlier run")
    size = size_for(bash("python runtests.py self"), {"python runtests.py self": [0.75, 300, False, 1, None]}, TABLE, DEFAULT)
    assert size == Size(0.75, DEFAULT.cpus, 300, "1 earlier run of python runtests.py self", 1, "python runtests.py self")


def test_a_bad_learned_entry_is_ignored():
    for bad in (["6.5", 1800, True, 4], [6.5, 1800, True], "6.5G", None, {"mem_gb": 6.5}):
        assert size_for(bash("make test"), {"make test": bad}, TABLE, DEFAULT).source == "the table's entry for make"


def test_a_compound_line_takes_the_most_memory_and_cpus_and_all_the_time():
    learned = {"make test": [6.0, 1200, True, 5, 1.5]}
    size = size_for(bash("cd web && npm run build && timeout 600 make test"), learned, TABLE, DEFAULT)
    npm = TOOL["npm run build*"]
    assert size == Size(6.0, max(npm.cpus, 1.5), npm.est_s + 1200, "5 earlier runs of make test", 5, "make test")
    # memory from one command, CPUs from another (vite's typecheck script, with a learned pnpm run)
    size = size_for(bash(BY_ID["vite-tsc-pnpm"]["text"]), {"pnpm run typecheck": [0.5, 60, False, 3, 3.0]}, TABLE, DEFAULT)
    tsc = TOOL["tsc"]
    assert size == Size(tsc.mem_gb, 3.0, tsc.est_s + 60, "the table's entry for tsc", 0, "tsc")
    # commands nobody knows add nothing; none known at all: the default
    assert size_for(bash("npm ci && npm run build && git diff --exit-code"), None, TABLE, DEFAULT)[:3] == \
        (npm.mem_gb, npm.cpus, npm.est_s)
    assert size_for(bash(BY_ID["vite-pnpm-format-git"]["text"]), None, TABLE, DEFAULT) is DEFAULT
    # the durations in a row are capped at a year
    learned = {"make test": [1, MAX_EST_S, True, 1, 1], "make depend": [1, MAX_EST_S - 1, True, 1, 1]}
    assert size_for(bash("make depend && make test"), learned, TABLE, DEFAULT).est_s == MAX_EST_S


def test_combined_of_nothing_is_the_default_and_no_cpus_are_the_defaults():
    assert combined([], DEFAULT) is DEFAULT
    a = Size(2.0, 0.0, 60, "3 earlier runs of a", 3, "a")  # history without cpus, not in the table
    b = Size(1.0, 0.0, 30, "2 earlier runs of b", 2, "b")
    assert combined([a, b], DEFAULT) == Size(2.0, DEFAULT.cpus, 90, "3 earlier runs of a", 3, "a")


@pytest.mark.parametrize("line", [
    "cat <<EOF | pytest\nx\nEOF",  # here-document
    "$(which pytest) -x",  # the program is a substitution
    "`which make` test",  # backticks
    "make test &",  # the background
    "sudo make test",
    "pytest 'unclosed",
    BY_ID["ripgrep-expression-program"]["text"],
    BY_ID["uutils-timeout-subst-program"]["text"],
    BY_ID["fmt-ctest-backticks"]["text"],
])
def test_an_unreadable_line_takes_the_default_whatever_history_knows(line):
    learned = {"pytest": [9.0, 60, True, 5, 8.0], "make test": [9.0, 60, True, 5, 8.0], "make": [9.0, 60, True, 5, 8.0],
               "cargo build": [9.0, 60, True, 5, 8.0], "ctest": [9.0, 60, True, 5, 8.0]}
    assert size_for(bash(line), learned, TABLE, DEFAULT) is DEFAULT
    assert line_fingerprint(bash(line)) is None


def test_only_the_work_of_a_line_is_sized():
    assert commands_of(bash("export CI=1; cd web && echo start && make test || true")) == [["make", "test"]]
    assert commands_of(bash("cd web && echo hi")) == []
    assert size_for(bash("cd web && echo hi"), {"cd web": [9.0, 60, True, 5, 8.0]}, TABLE, DEFAULT) is DEFAULT
    assert commands_of(["/bin/sh", "-c", "timeout 600 make test 2>&1"]) == [["make", "test"]]
    assert commands_of(["bash", "ci/run.sh"]) == [["bash", "ci/run.sh"]]  # a script, not a line
    assert commands_of(["/usr/bin/env", "CI=1", "pytest", "-n", "auto"]) == [["pytest", "-n", "auto"]]
    assert commands_of(["X=1"]) == []


def test_heavy_for_the_gate_is_the_table_or_what_history_saw():
    light = {"pytest": [0.5, 60, False, 9, 1.0], "run.sh": [0.2, 30, False, 5, 0.5], "e2e.sh": [6.0, 1800, True, 2, 1.0]}
    assert command_size(["pytest", "-x"], light, TABLE)[1] is True  # in the table: heavy however light its runs
    assert command_size(["pytest", "-x"], light, TABLE)[0].mem_gb == 0.5  # … at its learned size
    assert command_size(["./run.sh"], light, TABLE)[1] is False
    assert command_size(["./e2e.sh", "--all"], light, TABLE)[1] is True
    assert command_size(["./unknown.sh"], light, TABLE) is None


# ---------------------------------------------------------------- learned entries (gate.json)


@pytest.mark.parametrize("value, seen", [
    ([6.5, 1800, True, 4], Seen(6.5, 1800, True, 4, None)),  # an older gate.json
    ([6.5, 1800, True, 4, 2.5], Seen(6.5, 1800, True, 4, 2.5)),
    ([6.5, 1800, False, 4, None], Seen(6.5, 1800, False, 4, None)),
    ((2, 60, False, 0, 1), Seen(2.0, 60, False, 0, 1.0)),  # a tuple, ints, no runs
    ([0.25, 1800.9, True, 1, 0.5], Seen(0.25, 1800, True, 1, 0.5)),
    ([65536, MAX_EST_S, True, 10**6, 4096], Seen(65536.0, MAX_EST_S, True, 10**6, 4096.0)),
])
def test_a_learned_entry_is_read_in_both_shapes(value, seen):
    got = seen_entry(value)
    assert got == seen
    assert type(got.mem_gb) is float and type(got.est_s) is int and (got.cpus is None or type(got.cpus) is float)


@pytest.mark.parametrize("value", [
    None, "6.5", 6.5, {"mem_gb": 6.5}, [], [6.5], [6.5, 1800, True], [6.5, 1800, True, 4, 2.0, 1, 7],  # shapes
    [6.5, 1800, True, 4, 2.0, "1"], [6.5, 1800, True, 4, 2.0, 0], [6.5, 1800, True, 4, 2.0, math.nan],  # the peak
    ["6.5", 1800, True, 4], [6.5, "1800", True, 4], [6.5, 1800, "yes", 4], [6.5, 1800, True, "4"],
    [6.5, 1800, True, 4, "2"],  # strings
    [True, 1800, True, 4], [6.5, True, True, 4], [6.5, 1800, 1, 4], [6.5, 1800, True, True],
    [6.5, 1800, True, 4, True], [6.5, 1800, True, 4.0],  # bool where a number, int where a bool, float runs
    [0, 1800, True, 4], [-1, 1800, True, 4], [6.5, 0, True, 4], [6.5, -60, True, 4], [6.5, 1800, True, -1],
    [6.5, 1800, True, 4, 0], [6.5, 1800, True, 4, -2],  # zero or negative
    [65537, 1800, True, 4], [6.5, MAX_EST_S + 1, True, 4], [6.5, 1800, True, 4, 4097],  # too big
    [math.nan, 1800, True, 4], [6.5, math.nan, True, 4], [6.5, 1800, True, 4, math.nan],
    [math.inf, 1800, True, 4], [6.5, math.inf, True, 4], [6.5, 1800, True, 4, math.inf],
])
def test_a_bad_learned_entry_is_not_one(value):
    assert seen_entry(value) is None


# ---------------------------------------------------------------- what history learns (hist.learned)

T0 = 1764490000.0
_ids = iter(range(1, 10**6))


def run(cmd, project="web", peak=1.0, took=100.0, cpu_s=None, mem=4.0, code="exited", phase=Phase.done,
        stop_reason=None, kind="job") -> JobRecord:
    req = Request(id=f"r-{next(_ids)}", kind=kind, title="t", project=project, mem_gb=mem, est_s=600,
                  created=T0 - 10, cmd=list(cmd))
    ended = None if phase != Phase.done else T0 + took
    return JobRecord(request=req, phase=phase, started=T0, ended=ended, rc=0, peak_gb=peak, cpu_s=cpu_s,
                     why="exited 0", stop_reason=stop_reason, detail={"code": code})


def learn(records, heavy_mem_gb=4.0, heavy_minutes=10.0):
    return hist.learned(records, heavy_mem_gb, heavy_minutes, line_fingerprint)


# Three runs of `make test` in project web, written three ways:
#   peaks 1.0 1.2 0.8 -> p95 (nearest rank 3 of 3) 1.2 -> x 1.15 = 1.38 -> 1.4 GB
#   took  100 200 300 -> p90 (rank 3) 300 -> x 1.5 = 450 s -> 480 s (up to a minute)
#   cpu/s 1.5 3.2 0.9 -> p90 (rank 3) 3.2 -> up to half a CPU: 3.5
MAKE_TEST = [
    run(bash("cd web && make test"), peak=1.0, took=100, cpu_s=150),
    run(["make", "-j8", "test"], peak=1.2, took=200, cpu_s=640),
    run(bash("timeout 600 make test 2>&1"), peak=0.8, took=300, cpu_s=270),
]
SAYS_NOTHING = [  # huge, and not counted
    run(["make", "test"], peak=30.0, took=9000, cpu_s=90000, stop_reason="released", code="released"),
    run(["make", "test"], peak=30.0, took=9000, cpu_s=90000, code="lost"),
    run(["make", "test"], peak=30.0, took=9000, cpu_s=90000, code="exec_failed"),
    run(["make", "test"], peak=30.0, took=9000, cpu_s=90000, code="start_failed"),
    run(["make", "test"], peak=30.0, took=9000, cpu_s=90000, code="stopped_outside"),
    run(["make", "test"], peak=30.0, phase=Phase.running),
    run(["make", "test"], peak=30.0, took=9000, kind="note"),
]


def test_history_learns_p95_peak_p90_duration_and_the_cpus_kept_busy():
    got = learn(MAKE_TEST + SAYS_NOTHING + [
        run(bash("make build && make test"), peak=20.0, took=5000),  # two commands: which one is not known
        run(["pytest", "-x"], project="api", peak=0.3, took=10, cpu_s=None),
    ])
    assert got["web"] == {"make test": [1.4, 450, False, 3, 3.5, 1.2]}  # (the p95 peak itself, last: what a book takes)
    assert got["api"] == {"pytest": [0.5, 20, False, 1, None, 0.3]}  # 0.3 x 1.15 -> up to 256 MB steps; 15 s -> 20 s
    # what sizing then takes
    assert size_for(bash("timeout 600 make test 2>&1"), got["web"], TABLE, DEFAULT) == \
        Size(1.4, 3.5, 450, "3 earlier runs of make test", 3, "make test")
    assert seen_entry(got["web"]["make test"]) == Seen(1.4, 450, False, 3, 3.5, 1.2)


def test_heavy_is_a_peak_or_a_duration_past_the_policys_line():
    assert learn(MAKE_TEST, heavy_mem_gb=1.1)["web"]["make test"][2] is True  # peaked 1.2
    assert learn(MAKE_TEST, heavy_mem_gb=1.2)["web"]["make test"][2] is False  # not past it
    assert learn(MAKE_TEST, heavy_minutes=4.9)["web"]["make test"][2] is True  # ran 300 s
    assert learn(MAKE_TEST, heavy_minutes=5)["web"]["make test"][2] is False


def test_the_p95_peak_is_not_the_largest_and_memory_rounds_by_256_mb_then_by_a_tenth():
    twenty = [run(["pytest"], peak=round(0.1 * i, 1)) for i in range(1, 21)]  # 0.1 … 2.0
    assert learn(twenty)["web"]["pytest"][0] == 2.2  # p95: rank 19 = 1.9 -> 2.185 -> 2.2
    small = [run(["pytest"], peak=p) for p in (0.3, 0.4, 0.5)]
    assert learn(small)["web"]["pytest"][0] == 0.75  # 0.575 -> the next 256 MB
    assert learn([run(["pytest"], peak=0.86)])["web"]["pytest"][0] == 1.0  # 0.989 -> 1 GB (256 MB steps)
    assert learn([run(["pytest"], peak=0.87)])["web"]["pytest"][0] == 1.1  # 1.0005 -> a tenth above 1 GB


def test_a_run_killed_at_its_limit_counts_its_limit_times_one_and_a_half():
    whole = [run(["cargo", "test"], peak=1.0), run(["cargo", "test"], peak=1.0), run(["cargo", "test"], peak=2.0)]
    killed = whole[:2] + [run(["cargo", "test"], peak=1.9, mem=2.0, code="memory_limit")]  # its peak: the limit
    assert learn(whole)["web"]["cargo test"][0] == 2.3  # 2.0 x 1.15
    assert learn(killed)["web"]["cargo test"][0] == 3.0  # 2.0 x 1.5
    assert learn(killed)["web"]["cargo test"][3] == 3  # counted


def test_the_duration_is_p90_times_one_and_a_half_up_to_ten_seconds():
    ten = [run(["make", "test"], took=60.0 * i) for i in range(1, 11)]  # 1 … 10 minutes
    assert learn(ten)["web"]["make test"][1] == 810  # p90: rank 9 = 540 s -> 810 s
    assert learn([run(["make", "test"], took=2.0)])["web"]["make test"][1] == 10  # at least ten seconds
    assert learn([run(["make", "test"], took=80.0)])["web"]["make test"][1] == 120  # 120 s exactly
    assert learn([run(["make", "test"], took=81.0)])["web"]["make test"][1] == 130  # 121.5 s -> 130 s
    # what a person is told to type (res hist's --for) stays in whole minutes
    assert hist.round_for_s(121.5) == 180 and hist.round_for_s(3) == 60


def test_cpus_used_is_the_p90_rate_over_runs_of_a_second_or_more():
    recs = [run(["make"], took=100, cpu_s=150), run(["make"], took=200, cpu_s=640), run(["make"], took=300, cpu_s=270)]
    assert hist.cpus_used(recs) == 3.5
    assert hist.cpus_used(recs + [run(["make"], took=0.5, cpu_s=50)]) == 3.5  # 100 CPUs for half a second: start-up noise
    assert hist.cpus_used(recs + [run(["make"], took=1.0, cpu_s=50)]) == 50.0  # a second is enough
    assert hist.cpus_used(recs + [run(["make"], took=100, cpu_s=None)]) == 3.5  # a run that did not record it
    assert hist.cpus_used([run(["make"], took=100, cpu_s=1)]) == 0.5  # at least half a CPU
    assert hist.cpus_used([run(["make"], took=100, cpu_s=100)]) == 1.0  # a whole CPU is not rounded up
    assert hist.cpus_used([run(["make"], took=100, cpu_s=101)]) == 1.5
    assert hist.cpus_used([run(["make"], took=100, cpu_s=None), run(["make"], took=0.5, cpu_s=1)]) is None
    assert hist.cpus_used([]) is None
    assert learn([run(["make"], cpu_s=None)])["web"]["make"][4] is None


def test_the_rules_numbers():
    assert hist.percentile(range(1, 11), 90) == 9 and hist.percentile(range(1, 11), 95) == 10
    assert hist.percentile([5.0], 95) == 5.0 and hist.percentile([], 90) is None
    assert (hist.MEM_FACTOR, hist.KILLED_FACTOR, hist.FOR_FACTOR) == (1.15, 1.5, 1.5)
    assert hist.suggest_mem_gb(0.2, False) == 0.25
    assert hist.suggest_mem_gb(0.5, False) == 0.75
    assert hist.suggest_mem_gb(1.0, False) == 1.2
    assert hist.suggest_mem_gb(4.0, False) == 4.6
    assert hist.suggest_mem_gb(2.0, True) == 3.0
    assert hist.suggest_mem_gb(0.5, True) == 0.75


# ---------------------------------------------------------------- the policy's default


def test_the_policys_default_is_its_auto_keys():
    size = policy_default(rules(auto_mem_gb=2, auto_cpus=1, auto_minutes=10))
    assert size == Size(2.0, 1.0, 600, "the policy's default", 0, "")
    assert type(size.mem_gb) is float and type(size.cpus) is float and type(size.est_s) is int
    assert policy_default(rules(auto_mem_gb=0.5, auto_cpus=0.5, auto_minutes=2.5)).est_s == 150
    assert policy_default(rules(auto_mem_gb=1, auto_cpus=1, auto_minutes=0.001)).est_s == 1  # at least a second
    assert policy_default(rules(auto_mem_gb=1, auto_cpus=1, auto_minutes=15)) == DEFAULT
    default = policy_default(rules(auto_mem_gb=3, auto_cpus=2, auto_minutes=20))
    assert size_for(bash("./run-it.sh"), None, TABLE, default) is default
