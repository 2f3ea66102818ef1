"""Files tier: what a command booked in place uses, read from real processes (observed.procs.in_place_use):
the owner's descendants started at or after the booking, each counted to the latest booking before it;
what ran before any booking is not the command's."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from reconciler.observed.procs import in_place_use

HOLD = "import sys, time; b = bytearray(int(sys.argv[1]) << 20); b[::4096] = b'\\1' * len(range(0, len(b), 4096)); print('up', flush=True); time.sleep(600)"
GB = 2 ** 30


def _hold(mb: int) -> subprocess.Popen:
    """A child of this process (under a shell, as an agent CLI runs a command) holding `mb` MB."""
    p = subprocess.Popen(["sh", "-c", f"{sys.executable} -c \"{HOLD}\" {mb}; :"], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "up", "the holder did not start"
    return p


def _end(*procs: subprocess.Popen) -> None:
    for p in procs:  # ours, by pid: the shell's group is only the shell and its child
        for pid in [int(k) for k in open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()] + [p.pid]:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        p.wait()


def test_a_bookings_command_is_what_its_owner_started_after_it_each_to_the_latest_booking():
    before = _hold(120)  # the CLI's own helper, running before any booking: not a command's
    try:
        first = time.time()
        time.sleep(0.2)
        a = _hold(200)
        time.sleep(0.2)
        second = time.time()
        time.sleep(0.2)
        b = _hold(300)
        try:
            use = in_place_use({"r-1": (os.getpid(), first), "r-2": (os.getpid(), second)})
            assert 0.19 < use["r-1"] < 0.25 and 0.29 < use["r-2"] < 0.35, use
            alone = in_place_use({"r-1": (os.getpid(), first)})  # one booking: both commands are its
            assert 0.49 < alone["r-1"] < 0.6, alone
            assert in_place_use({"r-3": (os.getpid(), time.time() + 5)}) == {"r-3": 0.0}
        finally:
            _end(a, b)
        assert in_place_use({"r-1": (os.getpid(), first)})["r-1"] < 0.05  # ended: nothing left of them
    finally:
        _end(before)


def test_a_booking_whose_owner_is_gone_uses_nothing():
    p = subprocess.Popen(["true"])
    p.wait()
    assert in_place_use({"r-1": (p.pid, time.time() - 60)}) == {"r-1": 0.0}
