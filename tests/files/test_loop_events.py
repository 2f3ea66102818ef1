"""The kernel's events the idle loop waits on (loop/events.py): inotify on a directory, a pidfd per
note owner. Real files, a real process, a real event loop: on_change must be called by the kernel's
word alone (nothing here looks or polls)."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from reconciler.loop.events import Events


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_a_file_written_or_replaced_in_a_watched_directory_wakes_it(tmp_path):
    async def go():
        woke = asyncio.Event()
        ev = Events([str(tmp_path)], woke.set)
        assert ev.ok
        (tmp_path / "queue.toml.tmp").write_text("x")
        os.replace(tmp_path / "queue.toml.tmp", tmp_path / "queue.toml")  # as the writer does
        await woke.wait()
        woke.clear()
        (tmp_path / "queue.toml").write_text("edited by hand")
        await woke.wait()
        ev.close()
    run(go())


def test_a_watched_owners_end_wakes_it_and_others_do_not_count(tmp_path):
    async def go():
        woke = asyncio.Event()
        ev = Events([str(tmp_path)], woke.set)
        owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            assert ev.owners({owner.pid, other.pid})
            assert ev.owners({owner.pid})  # `other` no longer watched
            other.kill()
            other.wait()
            await asyncio.sleep(0.2)
            assert not woke.is_set()
            owner.kill()  # ours, by pid
            owner.wait()
            await woke.wait()
            assert ev.pidfds == {}
        finally:
            for p in (owner, other):
                if p.poll() is None:
                    p.kill()
                    p.wait()
            ev.close()
    run(go())


def test_a_directory_that_cannot_be_watched_falls_back_to_looking(tmp_path):
    async def go():
        ev = Events([str(tmp_path / "missing")], lambda: None)
        assert not ev.ok and ev.fd is None
    run(go())
