"""Files tier: what the loop looks at between passes (loop/look.py), on real files and processes."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

from reconciler.config.paths import Paths
from reconciler.loop.look import Look


def look(tmp_path, sessions: bool = False) -> tuple[Look, Paths]:
    paths = Paths(tmp_path / "state")
    paths.ensure()
    policy = tmp_path / "policy.toml"
    return Look(paths, lambda: (policy.stat().st_mtime_ns if policy.exists() else None,), lambda: sessions), paths


def test_nothing_changed_nothing_to_do_and_a_write_is_seen(tmp_path):
    lk, paths = look(tmp_path)
    assert lk.changed() == "first look"  # never marked: a pass
    lk.mark()
    assert lk.changed() is None
    paths.queue.write_text("# res queue\n")
    assert lk.changed() == "a desired or policy file changed"
    lk.mark()
    assert lk.changed() is None
    (tmp_path / "policy.toml").write_text("tick_s = 1\n")
    assert lk.changed() == "a desired or policy file changed"


def test_a_notes_owner_that_ends_is_seen(tmp_path):
    lk, _ = look(tmp_path)
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lk.mark()
        lk.owners = {owner.pid}
        assert lk.changed() is None
    finally:
        owner.kill()  # ours, by pid
        owner.wait()
    assert lk.changed() == f"note owner {owner.pid} ended"


def test_an_agent_session_that_starts_is_seen(tmp_path):
    """A real process named `claude` (a copy of sleep under that name), started after the mark."""
    lk, _ = look(tmp_path, sessions=True)
    claude = tmp_path / "bin" / "claude"
    claude.parent.mkdir()
    shutil.copy(shutil.which("sleep"), claude)
    lk.mark()
    other = subprocess.Popen(["sleep", "30"])
    try:
        assert lk.changed() is None  # a new process, not a session
        session = subprocess.Popen([str(claude), "30"])
        try:
            assert lk.changed() == "an agent session started"
            assert lk.changed() is None  # seen once
        finally:
            session.kill()
            session.wait()
    finally:
        other.kill()
        other.wait()
    assert os.getuid() == lk.uid
