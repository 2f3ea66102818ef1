"""A loop started as a detached process (no user manager answers: a container, CI): of several calls
at once, one starts it and the others start nothing while it runs (loop/start._detached). Real
processes in a temporary state directory; each started one ended by its pid."""
from __future__ import annotations

import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor

from reconciler.config.paths import Paths
from reconciler.loop.start import BY_ANOTHER, _detached

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]  # stands in for `res serve`


def _end(how: str) -> None:
    pid = int(how.split()[1].rstrip(","))
    os.kill(pid, signal.SIGTERM)
    os.waitpid(pid, 0)


def test_of_calls_at_once_one_starts_the_detached_loop_and_after_it_ends_the_next_call_does(tmp_path):
    paths = Paths(tmp_path / "state")
    paths.ensure()
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: _detached(paths, SLEEPER), range(8)))
    started = [how for how in got if how != BY_ANOTHER]
    try:
        assert len(started) == 1 and started[0].startswith("pid "), got
        assert _detached(paths, SLEEPER) == BY_ANOTHER  # while it runs, a later call starts nothing
    finally:
        for how in started:
            _end(how)
    again = _detached(paths, SLEEPER)  # it ended: its lock went with it
    try:
        assert again.startswith("pid "), again
    finally:
        _end(again)
