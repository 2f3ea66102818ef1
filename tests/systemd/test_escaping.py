"""A job that escapes with `systemd-run --user` (issue 40 item 7, docs/escaping.md): its service runs in
app.slice, outside every budget. res stops nothing of it; it names it, says which job started it,
and counts its memory in the view as that job's project's (never as the owner's programs). Real
units on the real user manager; the service is stopped by the test (and by the fixture's cleanup:
its name has the test's unit prefix)."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

import pytest

from clihelp import res, serving, wait_for  # noqa: F401

pytestmark = pytest.mark.systemd


def _view(res) -> dict:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    try:
        s.connect(str(res.state / "serve.sock"))
        s.sendall(b'{"op": "watch"}\n')
        buf = b""
        while b"\n" not in buf:
            chunk = s.recv(1 << 20)
            assert chunk, "the loop closed the watch"
            buf += chunk
        return json.loads(buf.split(b"\n", 1)[0])
    finally:
        s.close()


def test_a_service_a_job_starts_outside_res_is_named_with_its_job_and_counted_as_its_project(res):
    res.env["RES_TICK_S"] = "0.5"
    unit = f"{res.prefix}-escaped.service"
    loop = serving(res)
    try:
        hold = res.tmp / "hold.py"  # 64 MB, every page touched (a zeroed bytearray alone costs no RSS)
        hold.write_text("import time\nb = bytearray(64 << 20)\nb[::4096] = b'\\1' * (len(b) // 4096)\ntime.sleep(600)\n")
        line = f"systemd-run --user --quiet --unit={unit} {sys.executable} {hold}; sleep 600"
        assert res.started("sh", "-c", line, extra=("--project", "proj-esc")) == "r-1"
        wait_for(lambda: res.active("r-1") == "active" and subprocess.run(
            ["systemctl", "--user", "is-active", unit], env=res.env, capture_output=True, text=True).stdout.strip()
            == "active", "the escaped service runs", 60)
        props = subprocess.run(["systemctl", "--user", "show", unit, "-p", "Slice,Environment"], env=res.env,
                               capture_output=True, text=True, timeout=30).stdout
        assert "Slice=app.slice" in props and "RES_ESCAPED_FROM=r-1" in props, props
        res.passes(2)
        warnings = [ln for ln in res.ok("status").lines if "outside the agents slices" in ln]
        assert warnings and f"{unit} (from r-1" in warnings[0] and "res stops none of them" in warnings[0], warnings

        def escaped_row():
            rows = [o for o in _view(res)["owners"] if o.get("kind") == "escaped" and o["key"] == f"stray:{unit}"]
            return rows[0] if rows and rows[0]["gb"] > 0.05 else None

        row = wait_for(escaped_row, "the view counts the escaped service", 60, step=0.5)
        assert row["project"] == "proj-esc" and row["job"] == "r-1", row
        assert res.active("r-1") == "active"  # nothing of it was stopped
    finally:
        subprocess.run(["systemctl", "--user", "stop", unit], env=res.env, capture_output=True, timeout=60)
        res("release", "--stop", "r-1")
        loop.send_signal(signal.SIGTERM)
        loop.wait(30)
