"""No library's words reach a user or an agent (issue 40): every policy key, every game key and
every queue entry key given a wrong type, a negative, inf, nan and an absurd size answers with one
line in res's words, naming the key, the value, what is wrong and what is allowed. Real files; the
command line on a few of them (exit codes)."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.config.paths import Paths
from reconciler.config.policy import Policy, PolicyError, load_policy
from reconciler.core.invalid import fields_of
from reconciler.core.models import Game, Request
from reconciler.desired.disk import Bad
from reconciler.desired.reader import read_desired
from reconciler.desired.toml_in import parse_game

ROOT = Path(__file__).resolve().parents[2]
# What pydantic, SQLite and Python say in their own words: none of it may reach a line res prints.
LIBRARY = re.compile(r"Input should|String should|Value error|Extra inputs|Unexpected keyword|validation error|"
                     r"pydantic|sqlite3|object has no attribute|codec can't|unhashable|recursion|"
                     r"Error binding|Traceback|NoneType|\bdict\b|\blist\b object|database is locked")

# A wrong type, a negative, inf, nan and an absurd size, as TOML writes them.
BAD = {"wrong type": None, "negative": "-1", "inf": "inf", "nan": "nan", "absurd": "1e300"}


def _wrong_type(field) -> str:
    """A TOML value of another type than the field's."""
    kind = getattr(field, "annotation", None)
    return '"8G"' if kind in (int, float) else "[1, 2]" if kind is str else "-3.5"


def words_ok(line: str, *must: str) -> None:
    assert "\n" not in line, line
    assert not LIBRARY.search(line), line
    for word in must:
        assert word in line, (word, line)


POLICY_KEYS = sorted(Policy.model_fields)


@pytest.mark.parametrize("key", POLICY_KEYS)
@pytest.mark.parametrize("what", sorted(BAD))
def test_every_policy_key_given_a_bad_value_is_one_line_in_our_words(tmp_path, monkeypatch, key, what):
    path = tmp_path / "policy.toml"
    monkeypatch.setenv("RES_POLICY_FILE", str(path))
    monkeypatch.delenv(f"RES_{key.upper()}", raising=False)  # (the tests' own RES_LOOP_AUTOSTART would win)
    value = BAD[what] if BAD[what] is not None else _wrong_type(Policy.model_fields[key])
    path.write_text(f"{key} = {value}\n")
    try:
        load_policy()
    except PolicyError as e:
        line = str(e)
        words_ok(line, str(path), key)
        assert line.startswith(f"{path}: {key}"), line
        if "allowed: " in line:  # what is allowed, when the model says it
            assert line.split("allowed: ", 1)[1].strip(), line
    else:  # no key takes any of them: a wrong type, a negative, inf, nan, 1e300
        pytest.fail(f"{key} = {value} was taken")


@pytest.mark.parametrize("key", [k for k in POLICY_KEYS if k != "cluster"])
@pytest.mark.parametrize("value", ["abc", "-1", "inf", "nan", "1e300", "\u00e9" * 300],
                         ids=["abc", "-1", "inf", "nan", "1e300", "long"])
def test_every_policy_variable_given_a_bad_value_names_the_variable(monkeypatch, tmp_path, key, value):
    monkeypatch.setenv("RES_POLICY_FILE", str(tmp_path / "none.toml"))
    var = f"RES_{key.upper()}"
    monkeypatch.setenv(var, value)
    try:
        load_policy()
    except PolicyError as e:
        words_ok(str(e), var)
        assert str(e).startswith(f"{var}="), str(e)


def test_the_cases_of_issue_40_read_as_res_says_them(tmp_path, monkeypatch):
    path = tmp_path / "policy.toml"
    monkeypatch.setenv("RES_POLICY_FILE", str(path))
    cases = {
        "user_reserve_gb = -1": "user_reserve_gb = -1: negative; allowed: a number of GB from 0 to 65536",
        "user_reserve_gb = inf": "user_reserve_gb = inf: not a finite number; allowed: a number of GB from 0 to 65536",
        'user_reserve_gb = "8G"': 'user_reserve_gb = "8G": not a number; allowed: a number of GB from 0 to 65536',
        "user_reserve_gb = true": "user_reserve_gb = true: not a number; allowed: a number of GB from 0 to 65536",
        "tick_s = 1e-300": "tick_s = 1e-300: too small; allowed: a number of seconds from 0.05 to 3600",
        'unit_prefix = "../x"': 'unit_prefix = "../x": not of the allowed form; allowed: letters, digits and _ only '
                                "(at most 64 characters)",
        'private_manager = "sometimes"': 'private_manager = "sometimes": not one of the allowed values; allowed: one '
                                         'of "auto", "never"',
        "bogus = 1": "bogus: not a key of the policy (a typo? policies/default.toml lists every key)",
    }
    for text, said in cases.items():
        path.write_text(text + "\n")
        with pytest.raises(PolicyError) as got:
            load_policy()
        assert str(got.value) == f"{path}: {said}"
    path.write_text("")
    monkeypatch.setenv("RES_USER_RESERVE_GB", "abc")
    with pytest.raises(PolicyError) as got:
        load_policy()
    assert str(got.value) == 'RES_USER_RESERVE_GB="abc": not a number; allowed: a number of GB from 0 to 65536'


GAME_KEYS = sorted(fields_of(Game))


@pytest.mark.parametrize("key", GAME_KEYS + ["nonsense"])
@pytest.mark.parametrize("what", sorted(BAD))
def test_every_game_key_given_a_bad_value_is_one_line_in_our_words(key, what):
    field = fields_of(Game).get(key)
    value = BAD[what] if BAD[what] is not None else ('"yes"' if key == "on" else '"8G"')
    text = f"{key} = {value}\n"
    try:
        parse_game(text)
    except Bad as b:
        line = b.at(Path("/state/desired/game.toml"))
        words_ok(line, "game.toml", key)
        if field is None:
            assert "not a key res knows (its keys: on, until)" in line, line
    else:
        pytest.fail(f"game.toml took {text!r}")


REQUEST_KEYS = [k for k in fields_of(Request) if k not in ("id", "kind")]
ENTRY = {"title": '"t"', "mem_gb": "0.5", "est_s": "60", "created": "1.0", "cmd": '["true"]'}


@pytest.mark.parametrize("key", REQUEST_KEYS)
@pytest.mark.parametrize("what", sorted(BAD))
def test_every_queue_entry_key_given_a_bad_value_is_set_aside_in_our_words(tmp_path, key, what):
    paths = Paths(tmp_path / "state")
    paths.ensure()
    field = fields_of(Request)[key]
    entry = dict(ENTRY)
    entry[key] = BAD[what] if BAD[what] is not None else _wrong_type(field) if key not in ("cmd", "auto") else '"x"'
    body = "".join(f"{k} = {v}\n" for k, v in entry.items())
    paths.queue.write_text(f'next_id = 2\n\n[[job]]\nid = "r-1"\n{body}')
    got = read_desired(paths).desired
    if not got.queue_ok:
        words_ok(got.queue_error or "", "queue.toml")
        return
    for line in got.set_aside:
        words_ok(line, "queue.toml", "r-1", key)
    if not got.set_aside:  # taken: only a value the key holds
        (req,) = got.requests
        v = getattr(req, key)
        assert not (isinstance(v, float) and not math.isfinite(v)), (key, v)


def res_cli(args: list, tmp_path: Path, **env) -> subprocess.CompletedProcess:
    e = {**os.environ, "PYTHONPATH": str(ROOT), "RES_STATE_DIR": str(tmp_path / "state"),
         "RES_POLICY_FILE": str(tmp_path / "policy.toml"), **env}
    return subprocess.run([sys.executable, "-m", "reconciler.cli", *args], env=e, capture_output=True, timeout=60,
                          cwd=str(tmp_path))


def test_a_bad_policy_through_the_command_line_is_one_line_and_exit_1(tmp_path):
    (tmp_path / "policy.toml").write_text("user_reserve_gb = -1\n")
    r = res_cli(["status"], tmp_path)
    assert r.returncode == 1 and r.stdout == b"", r
    (line,) = r.stderr.decode().splitlines()
    assert line == f"res: {tmp_path / 'policy.toml'}: user_reserve_gb = -1: negative; allowed: a number of GB from 0 to 65536"


NON_UTF8 = b"bad\xff\xfe"
LONG = b"x" * 100_000

# Every flag that takes a value, per command, with the rest of a valid call around it.
FLAGS = {
    "run": (["--mem", "1G", "--for", "1m"], ["--mem", "--cpus", "--for", "--title", "--project", "--lock", "--by",
                                            "--task", "--on", "--agent", "--max-cost-usd", "--max-duration",
                                            "--max-iterations", "--start-within", "--tail", "--request-id"], ["--", "true"]),
    "note": (["--mem", "1G", "--for", "1m"], ["--mem", "--cpus", "--for", "--project", "--by", "--task", "--owner"],
             ["title"]),
    "wait": (["r-1"], ["--timeout"], []),
    "game": (["on"], ["--for"], []),
    "hist": ([], ["--project"], []),
    "hook": ([], ["--agent"], []),
    "reconcile": (["--dry-run"], ["--world"], []),
}


def _flag_cases():
    for cmd, (before, flags, after) in FLAGS.items():
        for flag in flags:
            for name, value in (("non-utf8", NON_UTF8), ("long", LONG)):
                yield pytest.param(cmd, before, flag, value, after, id=f"{cmd} {flag} {name}")
    for cmd in ("status", "wait", "release"):  # the id
        for name, value in (("non-utf8", b"r-" + NON_UTF8), ("long", b"r-" + b"1" * 100_000), ("not an id", b"x")):
            yield pytest.param(cmd, [], None, value, [], id=f"{cmd} ID {name}")
    yield pytest.param("note", ["--mem", "1G", "--for", "1m"], None, NON_UTF8, [], id="note title non-utf8")
    yield pytest.param("note", ["--mem", "1G", "--for", "1m"], None, LONG, [], id="note title long")
    yield pytest.param("run", ["--mem", "1G", "--for", "1m", "--"], None, NON_UTF8, [], id="run command non-utf8")


@pytest.mark.parametrize("cmd,before,flag,value,after", list(_flag_cases()))
def test_every_flag_given_bytes_that_are_not_text_or_too_many_is_a_usage_line(tmp_path, cmd, before, flag, value, after):
    args = [cmd, *before, *([flag, value] if flag else ([] if cmd == "run" else [value])), *after]
    if cmd == "run" and flag is None:
        args = [cmd, *before, "echo", value]
    r = res_cli(args, tmp_path)
    err = r.stderr.decode("utf-8", "replace")
    # (a path may be any bytes: --world names a file that is not there, an error, not a usage error)
    assert r.returncode == (1 if flag == "--world" and value == NON_UTF8 else 2), (r.returncode, err[:300])
    assert r.stdout == b"", r.stdout[:300]
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("res: ") and len(lines[0]) < 400, err[:500]
    words_ok(lines[0])
    assert not (tmp_path / "state" / "desired" / "queue.toml").exists() or b"bad" not in \
        (tmp_path / "state" / "desired" / "queue.toml").read_bytes()


def test_a_201_character_title_and_a_300_character_project_are_said_alike(tmp_path):
    r = res_cli(["run", "--mem", "1G", "--for", "1m", "--title", "t" * 201, "--", "true"], tmp_path)
    assert r.returncode == 2 and r.stderr.decode().splitlines() == ["res: --title is 201 characters; at most 200"]
    r = res_cli(["run", "--mem", "1G", "--for", "1m", "--project", "p" * 300, "--", "true"], tmp_path)
    assert r.returncode == 2 and r.stderr.decode().splitlines() == ["res: --project is 300 characters; at most 200"]
    r = res_cli(["run", "--mem", "1G", "--for", "1m", "--title", b"caf\xe9", "--", "true"], tmp_path)
    assert r.returncode == 2 and r.stderr.decode().splitlines() == [
        'res: --title "caf\\xe9": not UTF-8 text; give text (res keeps it in files that hold text only)']
    r = res_cli(["run", "--mem", "1G", "--for", "1m", "--", "printf", b"\xff"], tmp_path)
    assert r.returncode == 2 and r.stderr.decode().splitlines() == [
        'res: argument 1 of the command, "\\xff", is not UTF-8 text; res keeps the command in queue.toml, which '
        "holds text only: pass such bytes in a file or the environment"]
