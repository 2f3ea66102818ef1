"""`res service`, without a manager: the quoting of ExecStart= and Environment=, what the unit carries,
the status lines, which copy of res it runs (the real command: tests/systemd/test_service.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from reconciler.commands.service import (NO_UNIT, UnitState, env_assignment, exec_line, quote_word, render_unit,
                                res_command, service_environment, status_lines, unit_name)

HOSTILE = 'a "b" 100% $HOME ${X} $$ \\ back\nline2\ttab \'single\' ;&|'


def test_unit_name_follows_the_prefix():
    assert unit_name("res") == "res-serve.service"
    assert unit_name("rest1x2") == "rest1x2-serve.service"


def test_environment_words_are_quoted_for_systemd():
    assert env_assignment("A", "plain") == '"A=plain"'
    assert env_assignment("A", "a b") == '"A=a b"'
    assert env_assignment("A", 'say "hi"') == '"A=say \\"hi\\""'
    assert env_assignment("A", "100%") == '"A=100%%"'
    assert env_assignment("A", "$HOME ${X} $$") == '"A=$HOME ${X} $$"'  # Environment= does not expand $
    assert env_assignment("A", "back\\slash\\") == '"A=back\\\\slash\\\\"'
    assert env_assignment("A", "l1\nl2\tt\x01") == '"A=l1\\nl2\\tt\\x01"'
    assert env_assignment("A", "é;x=y") == '"A=é;x=y"'
    with pytest.raises(ValueError):
        env_assignment("NOT-A-NAME", "x")


def test_exec_start_is_verbatim():
    assert exec_line(["/opt/my tools/bin/res", "serve"]) == '"/opt/my tools/bin/res" "serve"'
    assert quote_word("$HOME 50%", dollar=True) == '"$$HOME 50%%"'


def test_rendered_unit_carries_the_environment_quoted_one_word_per_line():
    env = {"PATH": "/usr/bin:/bin", "RES_MARK": HOSTILE, "RES_STATE_DIR": "/home/u/state dir %h"}
    text = render_unit(["/usr/bin/res", "serve"], env, "/home/u/state dir %h")
    lines = text.splitlines()
    assert 'ExecStart="/usr/bin/res" "serve"' in lines
    envs = [line for line in lines if line.startswith("Environment=")]
    assert envs == ['Environment="PATH=/usr/bin:/bin"',
                    'Environment="RES_MARK=a \\"b\\" 100%% $HOME ${X} $$ \\\\ back\\nline2\\ttab \'single\' ;&|"',
                    'Environment="RES_STATE_DIR=/home/u/state dir %%h"']
    assert "WantedBy=default.target" in lines
    assert "Type=exec" in lines
    # the state dir in the header comment is one line whatever it holds
    assert len(render_unit(["/r"], {}, "/a\nb").splitlines()) == len(render_unit(["/r"], {}, "/a").splitlines())


def test_service_environment_pins_state_and_policy_and_keeps_every_res_variable():
    env = {"RES_UNIT_PREFIX": "x", "RES_USER_RESERVE_GB": "8", "RES_STATE_DIR": "relative", "HOME": "/home/u",
           "PATH": "/bin", "RES_API_TOKEN": "s3cret", "RES_EXIT_RECORD": "/x.json", "OTHER": "no",
           "RES_BAD\udcff": "x", "RES_UNDECODABLE": "a\udcffb"}
    out = service_environment(env, "/abs/state", "/abs/policy.toml")
    assert out == {"PATH": "/bin", "RES_POLICY_FILE": "/abs/policy.toml", "RES_STATE_DIR": "/abs/state",
                   "RES_UNIT_PREFIX": "x", "RES_USER_RESERVE_GB": "8"}
    assert list(out) == sorted(out)
    assert service_environment({}, "/s", "/p", pythonpath="/checkout")["PYTHONPATH"] == "/checkout"
    # The cluster the service submits to is the installer's (DESIGN §6b).
    assert service_environment({"SLURM_CONF": "/etc/slurm/other.conf"}, "/s", "/p")["SLURM_CONF"] == "/etc/slurm/other.conf"


def test_status_lines():
    st = UnitState("loaded", "active", "running", "enabled", 4242, "success", 0, False,
                   ("PATH=/bin", "RES_STATE_DIR=/s"))
    assert status_lines("res-serve.service", Path("/u/res-serve.service"), True, st) == [
        "unit       res-serve.service",
        "installed  /u/res-serve.service",
        "enabled    yes",
        "active     active (running), pid 4242",
        "serves     /s",
    ]
    assert status_lines("res-serve.service", Path("/u/res-serve.service"), False, NO_UNIT) == [
        "unit       res-serve.service",
        "installed  no",
        "enabled    no",
        "active     inactive (dead)",
    ]
    linked = st._replace(file_state="linked", active="failed", sub="failed", pid=0)
    assert status_lines("n", Path("/u/n"), True, linked)[2:4] == ["enabled    yes (linked)", "active     failed (failed)"]


def test_the_command_runs_this_copy_of_res(tmp_path):
    here = Path(__import__("reconciler").__file__).resolve().parent
    argv, pythonpath = res_command()
    assert argv[-2:] == ["-m", "reconciler.cli"] or Path(argv[0]).name == "res"
    assert pythonpath in (None, str(here.parent))
    # a copy that this interpreter would not import from / gets its parent on PYTHONPATH
    copy = tmp_path / "checkout" / "reconciler"
    shutil.copytree(here, copy, ignore=shutil.ignore_patterns("__pycache__"))
    argv, pythonpath = res_command(here=copy)
    assert pythonpath == str(copy.parent)
    r = subprocess.run([*argv, "--help"], env=dict(os.environ, PYTHONPATH=pythonpath), cwd="/",
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "serve" in r.stdout, r.stderr


def test_the_state_dir_is_read_back_from_the_unit_file_as_written():
    from reconciler.commands.service import NO_UNIT, quote_word, serves, unquote_word

    for text in ["/home/u/.local/state/res", 'a"b\\c%d$e\nf\tg\x01h', "%%"]:
        assert unquote_word(quote_word(text)[1:-1]) == text
    unit = f'[Service]\nEnvironment={quote_word("RES_STATE_DIR=/srv/odd dir/100%")}\n'
    assert serves(NO_UNIT, unit) == "/srv/odd dir/100%"
    assert serves(NO_UNIT._replace(env=("RES_STATE_DIR=/loaded",)), None) == "/loaded"
    assert serves(NO_UNIT, "[Service]\n") is None
