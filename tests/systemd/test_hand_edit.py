"""A `[[job]]` added to queue.toml by hand, and at once a `res run` (DESIGN §5.7, README: entries
added outside the writer are held, never started): whether the writer or a pass meets the hand edit
first, on a real user manager, with and without a running loop, the forged entry is held and never
runs, and the change log shows the hand edit. Nothing asserts on time: the forged command would
leave a file, and passes are counted."""
from __future__ import annotations

import re
import signal

import pytest

from clihelp import res, wait_for  # noqa: F401 - res is the fixture

pytestmark = pytest.mark.systemd


def _forge(res) -> object:
    """Append a forged entry to queue.toml, as an editor would; the file its command would make."""
    ran = res.tmp / "forged-ran"
    res.queue.write_text(res.queue.read_text() + '\n[[job]]\nid = "r-7"\ntitle = "forged"\nmem_gb = 0.1\n'
                         f'est_s = 60\ncreated = 1.0\ncmd = ["/usr/bin/touch", "{ran}"]\n')
    return ran


def _held_and_logged(res, ran, loop: bool, first: bool = False) -> None:
    """Held, never run, shown. `first`: the file no pass had seen before (issue 40): nothing to diff it
    against, so no change line; the dry run shows it held."""
    if loop:
        res.passes(2)  # passes enough to have started it, had it been let go
    else:
        for _ in range(2):
            res.ok("reconcile")
    assert not ran.exists()
    assert res("status", "r-7").code == 1  # never recorded, never started
    assert any(ln.startswith('held: r-7 "forged" added to queue.toml outside res') for ln in res.ok("status").lines)
    if first:
        dry = res("reconcile", "--dry-run")
        assert any(re.match(r"\s+x hold\s+r-7\b", ln) for ln in dry.lines), str(dry)
        return
    changes = res.ok("hist", "--changes").lines
    outside = [ln for ln in changes if ln.startswith("queue.toml changed outside res")]
    assert len(outside) == 1 and outside[0].endswith(": r-7 added"), changes


def test_without_a_loop_a_res_run_right_after_the_hand_edit_never_starts_it(res):
    assert res.started("true") == "r-1"  # a pass has seen queue.toml
    ran = _forge(res)
    assert res.started("true") == "r-8"  # the writer meets the hand edit before any pass
    _held_and_logged(res, ran, loop=False)


def test_with_a_loop_a_res_run_right_after_the_hand_edit_never_starts_it(res):
    res.env["RES_TICK_S"] = "0.5"
    serve = res.spawn("serve")
    wait_for(lambda: (res.state / "serve.sock").exists() or serve.poll() is not None, "the serve socket")
    assert serve.poll() is None, serve.communicate()
    assert res.started("true") == "r-1"
    ran = _forge(res)
    r = res.run_job("true")
    assert r.code == 0 and re.match(r"r-8 (started|done)", r.one_line()), str(r)
    _held_and_logged(res, ran, loop=True)
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(30) == 0


# ---------------------------------------------------------------- no pass ever ran here (issue 40 item 3)


def test_after_init_a_hand_edit_and_res_run_the_forged_entry_never_runs(res):
    res.ok("init")  # no pass has run in this state directory
    ran = _forge(res)
    assert res.started("true") == "r-8"
    _held_and_logged(res, ran, loop=False, first=True)


def test_a_queue_written_wholly_by_hand_runs_nothing(res):
    ran = res.tmp / "forged-ran"
    res.queue.parent.mkdir(parents=True, exist_ok=True)
    res.queue.write_text('next_id = 8\n\n[[job]]\nid = "r-7"\ntitle = "forged"\nmem_gb = 0.1\nest_s = 60\n'
                         f'created = 1.0\ncmd = ["/usr/bin/touch", "{ran}"]\n')
    assert res.started("true") == "r-8"
    _held_and_logged(res, ran, loop=False, first=True)


def test_a_loops_first_pass_after_init_and_a_hand_edit_holds_it(res):
    res.ok("init")
    ran = _forge(res)
    res.env["RES_TICK_S"] = "0.5"
    serve = res.spawn("serve")
    wait_for(lambda: (res.state / "serve.sock").exists() or serve.poll() is not None, "the serve socket")
    assert serve.poll() is None, serve.communicate()
    _held_and_logged(res, ran, loop=True, first=True)
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(30) == 0

