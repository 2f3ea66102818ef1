"""Memory pressure on a real user manager (issue 25 item 4, DESIGN §5.9): a real `res serve` whose
pressure files (RES_PRESSURE_FILE, RES_SLICE_PRESSURE_FILE) are files the test writes, read by the
same reader as /proc/pressure/memory; and the loop's PSI trigger armed on the real
/proc/pressure/memory. No test makes real memory pressure, and none asserts on time."""
from __future__ import annotations

import asyncio
import json
import re
import signal

import pytest

from clihelp import CLOCK, res, serving, wait_for  # noqa: F401

pytestmark = pytest.mark.systemd

BLOCK = "until [ -e \"$0\" ]; do sleep 0.05; done"  # a job that ends when the test creates its file


def psi(full_avg10: float) -> str:
    """A memory PSI file as the kernel writes it (Documentation/accounting/psi.rst)."""
    return (f"some avg10={min(100.0, full_avg10 * 1.3):.2f} avg60=3.10 avg300=0.80 total=9123456\n"
            f"full avg10={full_avg10:.2f} avg60=2.00 avg300=0.50 total=6123456\n")


def blocker(res, name: str):
    go = res.tmp / f"go-{name}"
    return ["sh", "-c", BLOCK, str(go)], go


def _pressure_files(res, system: float = 0.0, slice_: float = 0.0):
    system_file, slice_file = res.tmp / "pressure-memory", res.tmp / "slice-memory.pressure"
    system_file.write_text(psi(system))
    slice_file.write_text(psi(slice_))
    res.env.update({"RES_PRESSURE_FILE": str(system_file), "RES_SLICE_PRESSURE_FILE": str(slice_file),
                    "RES_PRESSURE_FULL_PCT": "10"})
    return system_file, slice_file



def _replace(path, text: str) -> None:
    """Write the whole file at once (rename), so the loop never reads half of it."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    tmp.replace(path)


def test_pressure_holds_back_new_work_and_lets_it_go_when_it_falls(res):
    res.env["RES_TICK_S"] = "0.5"
    system_file, _ = _pressure_files(res)
    serve = serving(res)

    # a job started before the pressure keeps running through it
    hold, hold_go = blocker(res, "1")
    assert res.started(*hold, mem="128M") == "r-1"

    _replace(system_file, psi(25.0))
    queued_cmd, queued_go = blocker(res, "2")
    r = res.run_job(*queued_cmd, mem="128M", extra=("--queue",))
    assert r.code == 0 and re.fullmatch(r"r-2 queued, position 1; est\. start unknown; waits for memory pressure .*; "
                                        r"cancel: res release r-2", r.one_line()), str(r)
    r = res.run_job("true", mem="128M")
    assert r.code == 3 and r.err == "" and r.one_line() == (
        "busy: memory pressure 25 % (full, 10 s) is over pressure_full_pct (10 %): nothing new starts until it "
        "falls; retry in a few minutes or work on something else"), str(r)
    assert res.status("r-3")["state"] == "refused"

    res.passes(3)  # passes go by (a queued entry is looked at every tick_s): nothing changes
    st = res.status("r-2")
    assert st["state"] == "queued" and st["reason"]["waits_for"] == "pressure", st
    assert res.status("r-1")["state"] == "running" and res.active("r-1") == "active"
    text = res.ok("status").out
    assert "memory pressure 25 % (full, 10 s)" in text, text
    row = next(line for line in text.splitlines() if line.startswith("r-2 "))
    assert "queued" in row and "waits for memory pressure" in row, text
    observed = json.loads(res.ok("observe", "--json").out)
    assert observed["pressure_full_pct"] == 25.0 and observed["slice_pressure_full_pct"] == 0.0, observed

    _replace(system_file, psi(0.0))
    wait_for(lambda: res.status("r-2")["state"] == "running", "saw r-2 started once the pressure fell", step=0.2)
    assert res.status("r-1")["state"] == "running"  # never stopped for it
    text = res.ok("status").out  # only the refusal of r-3 still says it
    assert [line for line in text.splitlines() if "memory pressure" in line and not line.startswith("r-3 ")] == [], text

    hold_go.touch()
    queued_go.touch()
    assert res("wait", "r-1", "--timeout", "1m").code == 0
    assert res("wait", "r-2", "--timeout", "1m").code == 0
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(30) == 0


def test_the_agents_slices_own_pressure_holds_back_new_work_too(res):
    """Without a loop: the CLI's own pass reads the same files."""
    _, slice_file = _pressure_files(res, system=1.0, slice_=40.0)
    r = res.run_job("true", mem="128M")
    assert r.code == 3 and r.one_line() == (
        f"busy: memory pressure 40 % (full, 10 s) in {res.agents_slice} is over pressure_full_pct (10 %): nothing "
        "new starts until it falls; retry in a few minutes or work on something else"), str(r)
    r = res.run_job("true", mem="128M", env={"RES_PRESSURE_FULL_PCT": "0"})  # 0: PSI ignored
    assert r.code == 0 and r.one_line().startswith("r-2 started;"), str(r)
    _replace(slice_file, psi(9.0))
    assert res.run_job("true", mem="128M").one_line().startswith("r-3 started;")


def test_the_trigger_is_armed_on_the_kernels_file_and_never_on_a_stand_in(tmp_path, monkeypatch):
    from reconciler.loop.events import Events, PressureTrigger, trigger_line

    monkeypatch.delenv("RES_PRESSURE_FILE", raising=False)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        try:
            PressureTrigger("/proc/pressure/memory", 10.0, lambda: None, loop).close()
        except OSError as e:
            pytest.skip(f"this kernel refuses a PSI trigger on /proc/pressure/memory: {e}")
        events = Events([str(tmp_path)], lambda: None)
        try:
            assert events.watch_pressure(10.0, lambda: None)
            first = events.trigger
            assert first.line == trigger_line(10.0) == b"full 1000000 10000000\0"
            assert events.watch_pressure(10.0, lambda: None) and events.trigger is first  # the same: not re-armed
            assert events.watch_pressure(20.0, lambda: None) and events.trigger is not first
            assert first.fd is None and events.trigger.line == b"full 2000000 10000000\0"
            # the epoll set holding the trigger's file is one of the event loop's readers
            fd = events.trigger.poller.fileno()
            assert loop.remove_reader(fd)
            loop.add_reader(fd, events.trigger._fired)
            assert not events.watch_pressure(0, lambda: None) and events.trigger is None  # 0: PSI ignored
            stand_in = tmp_path / "pressure"
            stand_in.write_text(psi(25.0))
            assert not events.watch_pressure(10.0, lambda: None, path=str(stand_in))
            assert stand_in.read_text() == psi(25.0)  # nothing was written to it
        finally:
            events.close()

    asyncio.run(main())
