"""Bad input through the real command line (DESIGN §9): each gets one clear line
on stderr starting `res: ` and exit 1 or 2, and changes nothing (queue.toml byte-identical, no unit);
or, where the input is merely unusual (hostile titles and commands), a faithful job."""
from __future__ import annotations

import json
import re
import subprocess
import tomllib

import pytest

from clihelp import PY, nproc, res  # noqa: F401

pytestmark = pytest.mark.systemd


@pytest.fixture
def ready(res):
    """A state directory with a queue.toml in it (laid down by `res init`) to compare bytes against."""
    res.ok("init")
    assert res.queue.exists()
    return res


def refused(res, r, codes=(1, 2), has: str | tuple = ()) -> str:
    """The call failed the way a user should see it; nothing was written or started."""
    assert r.code in codes, str(r)
    assert r.out == "", str(r)
    line = r.one_line("err")
    assert line.startswith("res: "), line
    for word in (has,) if isinstance(has, str) else has:
        assert word in line, (word, line)
    return line


def unchanged(res, before: bytes) -> None:
    assert res.queue.read_bytes() == before
    assert res.units() == []


@pytest.mark.parametrize("args,has", [
    (["--mem", "0", "--for", "1m"], ("--mem", "more than 0")),
    (["--mem", "-1G", "--for", "1m"], ("--mem", "-1G", "more than 0")),
    (["--mem=-1G", "--for", "1m"], ("--mem", "more than 0")),
    (["--mem", "99999G", "--for", "1m"], ("--mem", "99999G")),
    (["--mem", "lots", "--for", "1m"], ("--mem", "not a size")),
    (["--mem", "1G", "--for", "0"], ("--for", "at least 1s")),
    (["--mem", "1G", "--for", "banana"], ("--for", "banana", "not a duration")),
    (["--mem", "1G", "--for", "-5m"], ("--for",)),
    (["--mem", "1G", "--for", "1m", "--cpus", "0"], ("--cpus",)),
    (["--mem", "1G", "--for", "1m", "--cpus", "nan"], ("--cpus",)),
    (["--for", "1m"], ("--mem",)),
    (["--mem", "1G"], ("--for",)),
    (["--mem", "1G", "--for", "1m", "--title", ""], ("--title", "empty")),
    (["--mem", "1G", "--for", "1m", "--title", " \n "], ("--title", "empty")),
])
def test_bad_sizes_and_durations_are_usage_errors(ready, args, has):
    before = ready.queue.read_bytes()
    refused(ready, ready("run", *args, "--", "true"), codes=(2,), has=has)
    unchanged(ready, before)


@pytest.mark.parametrize("args,has", [
    (["--mem", "0", "--for", "1m", "x"], "--mem"),
    (["--mem", "1G", "--for", "banana", "x"], "--for"),
    (["--mem", "1G", "--for", "1m", ""], "title"),
    (["--mem", "1G", "--for", "1m", "x" * 10240], ("title", "10240", "200")),
])
def test_bad_notes_are_usage_errors(ready, args, has):
    before = ready.queue.read_bytes()
    refused(ready, ready("note", *args), codes=(2,), has=has)
    unchanged(ready, before)


def test_a_10kb_title_is_refused_whole(ready):
    before = ready.queue.read_bytes()
    line = refused(ready, ready.run_job("true", extra=("--title", "é" * 10240)), codes=(2,), has="--title")
    assert "10240" in line and "200" in line and len(line) < 200
    unchanged(ready, before)


@pytest.mark.parametrize("tail", [[], ["--"]])
def test_a_missing_command(ready, tail):
    before = ready.queue.read_bytes()
    refused(ready, ready("run", "--mem", "1G", "--for", "1m", *tail), codes=(2,), has="no command")
    unchanged(ready, before)


@pytest.mark.parametrize("cmd", ["no-such-command-res-test", "./not-here.sh", "/"])
def test_a_command_that_cannot_be_run(ready, cmd):
    before = ready.queue.read_bytes()
    refused(ready, ready.run_job(cmd), codes=(1,), has=cmd)
    unchanged(ready, before)


def test_a_command_that_is_not_executable(ready):
    script = ready.work / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")  # mode 0644: not executable
    before = ready.queue.read_bytes()
    refused(ready, ready.run_job("./script.sh"), codes=(1,), has="script.sh")
    unchanged(ready, before)


def test_a_cwd_that_no_longer_exists(ready):
    gone = ready.tmp / "gone"
    gone.mkdir()
    before = ready.queue.read_bytes()
    # the caller's cwd is deleted under it, as when an agent's worktree is removed
    p = subprocess.run(["sh", "-c", 'cd "$1" && rmdir "$1" && exec "$0" -m reconciler.cli run --mem 1G --for 1m -- true',
                        PY, str(gone)], env=ready.env, capture_output=True, text=True, timeout=60)
    from clihelp import Out

    r = Out(p.returncode, p.stdout, p.stderr, ("run", "(in a deleted directory)"))
    refused(ready, r, codes=(1,), has="directory")
    unchanged(ready, before)


def test_other_commands_with_bad_input(ready):
    before = ready.queue.read_bytes()
    refused(ready, ready("wait", "r-1", "--timeout", "banana"), codes=(2,), has="--timeout")
    refused(ready, ready("wait", "r-1"), codes=(1,), has="no such entry")
    refused(ready, ready("status", "r-1"), codes=(1,), has="no such entry")
    refused(ready, ready("release", "r-1"), codes=(1,), has="no such entry")
    refused(ready, ready("release", "nonsense"), codes=(2,), has=("nonsense", "not an entry id"))
    refused(ready, ready("nosuchcommand"), codes=(2,))
    refused(ready, ready("run", "--mem", "1G", "--for", "1m", "--agent", "gpt", "--", "true"), codes=(2,), has="--agent")
    unchanged(ready, before)


# ---------------------------------------------------------------- faithful, not refused

HOSTILE_TITLE = 'say "hi" it\'s \\ 100% $HOME; rm -rf /\nsecond line\r\n\tthird \x1b[31mred\x1b[0m'
ARGV_PROBE = "import sys, json; print(json.dumps(sys.argv[1:]))"
HOSTILE_ARGS = ["%h", "%%", "$HOME", "${HOME}", "$$", "a;b", ";", "'q'", '"dq"', "new\nline", "back\\slash", " sp "]


def test_a_hostile_title_is_kept_and_status_stays_one_line_per_job(ready):
    r = ready.run_job("true", extra=("--title", HOSTILE_TITLE))
    assert r.code == 0 and re.fullmatch(r"r-1 started; log \S+; ETA ~\d\d:\d\d", r.one_line()), str(r)
    assert ready.started("true", extra=("--title", "plain")) == "r-2"
    assert ready.status("r-1")["title"] == HOSTILE_TITLE
    assert ready("wait", "r-1").code == 0 and ready("wait", "r-2").code == 0
    lines = ready.ok("status").lines
    jobs = [line for line in lines if re.match(r"r-\d+ ", line)]
    assert lines[0].startswith("ID ") and "TITLE" in lines[0], lines  # the header names the columns
    assert len(jobs) == 2 and lines[1].startswith("r-1 ") and lines[2].startswith("r-2 "), lines
    assert lines[3].startswith("agents may use "), lines  # the totals line follows the jobs at once
    assert "\x1b" not in lines[1] and "\r" not in lines[1] and "\t" not in lines[1]
    assert "second line" in lines[1] or "…" in lines[1]
    tomllib.loads(ready.queue.read_text())  # the desired file still parses
    for line in ready.ok("reconcile", "--dry-run").lines:
        assert "\x1b" not in line


def test_a_hostile_title_is_written_exactly_and_named_in_one_busy_line(ready):
    cmd = ["sh", "-c", 'until [ -e "$0" ]; do sleep 0.05; done', str(ready.tmp / "go")]
    assert ready.started(*cmd, cpus="1", extra=("--title", HOSTILE_TITLE)) == "r-1"
    (entry,) = tomllib.loads(ready.queue.read_text())["job"]
    assert entry["title"] == HOSTILE_TITLE
    ready.env["RES_USER_RESERVE_CPUS"] = str(max(0, nproc() - 1))
    ready.env["RES_CPU_OVERCOMMIT"] = "1"  # every CPU promised once
    r = ready.run_job("true", cpus="1")  # no CPU left: the busy line names r-1 by its title
    line = r.one_line()
    assert r.code == 3 and "(r-1, by " in line and "\x1b" not in line and "\r" not in line, str(r)
    (ready.tmp / "go").touch()


def test_a_hostile_command_arrives_verbatim(ready):
    r = ready.run_job(PY, "-c", ARGV_PROBE, *HOSTILE_ARGS)
    assert r.code == 0, str(r)
    assert ready("wait", "r-1").code == 0
    got = (ready.state / "logs" / "r-1.log").read_text()
    assert json.loads(got) == HOSTILE_ARGS
    st = ready.status("r-1")
    assert st["cmd"][3:] == HOSTILE_ARGS and st["rc"] == 0
    # the title made from such a command is one line
    assert "\n" not in ready.ok("status").lines[0]


def test_sh_c_with_specifiers_runs_as_written(ready):
    out = ready.tmp / "out"
    r = ready.run_job("sh", "-c", 'printf "%s|%s|%s\\n" "$1" "$HOME" "%h" > "$0"; echo done', str(out), "$HOME;x")
    assert r.code == 0, str(r)
    assert ready("wait", "r-1").code == 0
    home = ready.env.get("HOME", "")
    assert out.read_text() == f"$HOME;x|{home}|%h\n"


# ---------------------------------------------------------------- a bad environment


def test_no_reachable_systemd_is_one_line_and_nothing_starts_by_surprise(ready):
    nobus = {"DBUS_SESSION_BUS_ADDRESS": f"unix:path={ready.tmp}/no-bus", "XDG_RUNTIME_DIR": str(ready.tmp / "none")}
    before = ready.queue.read_bytes()
    r = ready.run_job("true", env=nobus)
    line = refused(ready, r, codes=(1,), has=("r-1 not started", "unreachable", "no-bus"))
    assert line.startswith("res: r-1 not started: ")
    r = ready("note", "--mem", "256M", "--for", "1m", "x", env=nobus)
    refused(ready, r, codes=(1,), has=("r-2 not noted", "unreachable"))
    assert tomllib.loads(ready.queue.read_text()).get("job", []) == []  # withdrawn, not left to start later
    assert tomllib.loads(ready.queue.read_text()).get("note", []) == []
    assert ready.queue.read_bytes() != before  # (only next_id moved on: ids are never reused)
    r = ready("reconcile", env=nobus)
    assert r.code == 1 and "unreachable" in r.one_line("err"), str(r)

    # --queue: kept, and decided once the user manager can be reached
    r = ready.run_job("true", env=nobus, extra=("--queue",))
    assert r.code == 0 and r.one_line().startswith("r-3 queued, not decided yet: ") and "unreachable" in r.out, str(r)
    ready.ok("reconcile")
    st = ready.status("r-3")
    assert st["state"] in ("running", "exited", "done"), st  # exited: ended, not settled by a pass yet
    assert ready("wait", "r-3").code == 0
    assert ready("status", "r-1").code == 1  # never recorded


def test_a_long_command_line_through_the_loop(ready):
    """A request is one JSON line to `res serve`; a long command line (or a big environment) must
    not be cut off by the socket reader's line limit."""
    serve = ready.spawn("serve")
    sock = ready.state / "serve.sock"
    from clihelp import wait_for

    wait_for(lambda: sock.exists() or serve.poll() is not None, "saw the serve socket")
    assert serve.poll() is None
    big = ["x" * 100_000] * 3  # (one argument may be at most 128 KiB)
    # (it lingers, so that the loop's attachment is there to be seen before the job is settled)
    r = ready.run_job(PY, "-c", "import sys, time; print(sum(map(len, sys.argv[1:])), flush=True); time.sleep(3)", *big,
                      env={"RES_BIG_VAR": "y" * 100_000})
    assert r.code == 0 and r.one_line().startswith("r-1 started;"), str(r)[:500]
    wait_for(lambda: ready.status("r-1")["attached_by"], "the loop attached r-1")
    assert ready.status("r-1")["attached_by"].split("/")[1] == str(serve.pid)
    assert ready("wait", "r-1").code == 0
    assert (ready.state / "logs" / "r-1.log").read_text() == "300000\n"


def test_a_corrupted_state_db_is_one_line_for_every_command(res):
    res.state.mkdir(parents=True)
    db = res.state / "state.db"
    db.write_bytes(b"this is not sqlite" * 300)
    for args in (("run", "--mem", "1G", "--for", "1m", "--", "true"), ("note", "--mem", "1G", "--for", "1m", "x"),
                 ("status",), ("status", "r-1"), ("reconcile",), ("reconcile", "--dry-run"), ("release", "r-1"),
                 ("wait", "r-1"), ("observe",)):
        refused(res, res(*args), codes=(1,), has=str(db))
    assert not res.queue.exists()  # nothing half-written
    assert db.read_bytes() == b"this is not sqlite" * 300
    assert res.units() == []


def test_a_symlinked_state_dir_is_refused_in_one_line(res):
    real = res.tmp / "real-state"
    real.mkdir()
    res.state.symlink_to(real)
    for args in (("run", "--mem", "1G", "--for", "1m", "--", "true"), ("note", "--mem", "1G", "--for", "1m", "x"),
                 ("init",), ("release", "r-1")):
        refused(res, res(*args), codes=(1,), has="symlink")
    r = res("reconcile")
    assert r.code == 1 and all(ln.startswith("res: ") and "symlink" in ln for ln in r.err_lines), str(r)
    assert list(real.iterdir()) == []  # nothing created through the link
    assert res.units() == []
