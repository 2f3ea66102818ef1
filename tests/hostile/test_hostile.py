"""The hostile tier: a careless or hostile agent on the same machine runs as the same user,
can write every file res owns and talks to its socket. One test per class of what it tried; each
failed on the main before. Real units on the real user manager, real processes, real files."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from clihelp import PY, ask_raw, res, unit_props, wait_for  # noqa: F401

pytestmark = pytest.mark.systemd

BLOCK = 'until [ -e "$0" ]; do sleep 0.05; done'


def serve(res, **env):
    e = dict(res.env, **env)
    p = res.popen([PY, "-m", "reconciler.cli", "serve"], env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                  text=True)
    wait_for(lambda: (res.state / "serve.sock").exists() or p.poll() is not None, "the loop answers", 30)
    assert p.poll() is None, p.stderr.read()
    return p


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


# ---------------------------------------------------------------- 1. a job forges its own outcome


def test_a_job_cannot_forge_its_own_or_a_neighbours_exit_record(res):
    res.pin(1.5)
    logs = res.state / "logs"
    forge = ('printf \'{"result":"success","code":"exited","status":"0","at":1,"invocation":"%s"}\' '
             '"$INVOCATION_ID" > "$RES_EXIT_RECORD"; ' + BLOCK)
    assert res.started("sh", "-c", forge, str(res.tmp / "go-1"), mem="768M") == "r-1"
    neighbour = 'printf \'{"result":"success","code":"exited","status":"0","at":1}\' > "$0"; ' + BLOCK
    assert res.started("sh", "-c", neighbour, str(logs / "r-3.exit.json"), mem="256M") == "r-2"
    wait_for(lambda: (logs / "r-1.exit.json").exists(), "the forged record written")
    res.ok("reconcile")
    assert res.status("r-1")["state"] == "running"  # its unit runs: no record counts yet
    # r-1 still holds its 768 MB: a request for a quarter GB more than is free now is refused, and
    # names r-1 (it would fit if the forged record had freed r-1's reservation: no overbooking)
    free = res.status_all()["budget"]["mem_gb"]
    r = res.run_job("true", mem=f"{max(int((free + 0.25) * 1024), 64)}M")
    assert r.code == 3 and "(r-1, by " in r.out, str(r)
    assert res.started("sh", "-c", BLOCK, str(res.tmp / "go-3"), mem="128M") == "r-4"  # r-3 was refused
    # release --stop still stops the forger, and its end is its own
    r = res("release", "--stop", "r-1")
    assert r.code == 0 and r.one_line().startswith("r-1 released (done, rc=143"), str(r)
    # the neighbour's forged record (written before r-4's unit) does not end r-4 either
    (logs / "r-4.exit.json").write_text('{"result":"success","code":"exited","status":"0","at":1}')
    res.ok("reconcile")
    assert res.status("r-4")["state"] == "running"
    for go in ("go-1", "go-3"):
        (res.tmp / go).touch()
    res("release", "--stop", "r-2")
    st = json.loads(res("wait", "r-4", "--json").out)
    assert st["rc"] == 0 and st["reason"]["code"] == "exited", st


# ---------------------------------------------------------------- 2. output without end


def test_endless_output_never_freezes_the_loop_and_is_stopped_at_the_log_limit(res):
    loop = serve(res, RES_MAX_LOG_GB="0.05", RES_TICK_S="0.5")
    r = res("run", "--mem", "256M", "--for", "5m", "--", "yes", "all work and no play")
    assert r.code == 0, str(r)
    answered = []
    for _ in range(5):  # while it writes as fast as it can, the loop answers every time
        t0 = time.monotonic()
        assert res("status", timeout=20).code == 0
        answered.append(time.monotonic() - t0)
        time.sleep(0.2)
    st = json.loads(res("wait", "r-1", "--json", timeout=120).out)
    assert st["reason"]["code"] == "log_limit" and st["why"].startswith("log over 0.05 GB"), st
    size = (res.state / "logs" / "r-1.log").stat().st_size
    assert size < 2**30, size  # stopped a pass or two past the limit (`yes` writes fast), not at 9 GB
    loop.send_signal(signal.SIGTERM)
    assert loop.wait(30) == 0  # a prompt stop: no pass is stuck reading
    print(f"\n[2] status answered in {max(answered):.2f} s at most while the job wrote; log {size >> 20} MB at the stop")


# ---------------------------------------------------------------- 3. secrets


SECRETS = {"ANTHROPIC_API_KEY": "sk-ant-api03-hostileAAAA", "OPENAI_API_KEY": "sk-proj-hostileBBBB",
           "AWS_ACCESS_KEY_ID": "AKIAHOSTILECCCCDDDDE", "DATABASE_URL": "postgres://u:hostile-pw-EEEE@db/x",
           "NPM_AUTH": "hostile-npm-FFFF", "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/hostileGGGG",
           "PGPASS": "hostile-pg-HHHH", "GH_PAT": "hostile-pat-IIII", "INNOCENT": "ghp_hostileJJJJJJJJJJJJJJJJJJJJ"}


def test_no_secret_reaches_anything_res_writes(res):
    r = res.run_job("sh", "-c", 'env > "$0"; ' + BLOCK, str(res.tmp / "job-env"), env=SECRETS)
    assert r.code == 0, str(r)
    wait_for(lambda: (res.tmp / "job-env").exists(), "the job ran")
    props = unit_props(res.unit("r-1"))
    written = [p for p in res.state.rglob("*") if p.is_file()]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    transient = [p for p in (f"{runtime}/systemd/transient/{res.unit('r-1')}",) if runtime and os.path.exists(p)]
    blobs = [p.read_bytes() for p in written] + [open(p, "rb").read() for p in transient]
    blobs.append(json.dumps(props.get("Environment")).encode())
    for name, value in SECRETS.items():
        assert not any(value.encode() in b for b in blobs), f"{name} reached a file res wrote"
    # nor in history, once it is settled and pruned
    (res.tmp / "go").touch()
    # a secret in the command itself is refused before anything is written
    r = res.run_job("curl", "-H", "Authorization: Bearer sk-ant-api03-inline")
    assert r.code == 2 and "looks like a secret" in r.one_line("err"), str(r)


# ---------------------------------------------------------------- 4. one hostile value


def test_one_hostile_value_is_set_aside_and_every_pass_goes_on(res):
    assert res.started("true") == "r-1"
    text = res.queue.read_text()
    res.queue.write_text(text + '\n[[note]]\nid = "r-50"\ntitle = "x"\nmem_gb = 1.0\nest_s = 60\ncreated = 1.0\n'
                                'owner_pid = 99999999999999999999\n')
    (res.state / "desired" / "game.toml").write_text("on = true\nuntil = 1e308\n")
    r = res("reconcile")
    assert r.code == 1 and any("r-50: owner_pid" in ln and "set aside" in ln for ln in r.err_lines), str(r)
    assert any("game.toml" in ln for ln in r.err_lines), str(r)
    assert res("status").code == 0  # no "timestamp out of range"
    r = res.run_job("true")  # the rest goes on
    assert r.code == 0 and r.one_line().startswith("r-51 started"), str(r)
    assert res("release", "r-50").code in (0, 1)
    assert 'id = "r-50"' not in res.queue.read_text()


# ---------------------------------------------------------------- 5. state.db lost


def test_a_replaced_state_db_stops_the_loop_and_never_runs_a_finished_job_twice(res):
    marks = res.tmp / "marks"
    job = ["sh", "-c", 'echo x >> "$0"', str(marks)]
    assert res.started(*job) == "r-1"
    assert res("wait", "r-1").code == 0
    # state.db lost after r-1 settled, before its queue entry was retired
    text = res.queue.read_text()
    for p in res.state.glob("state.db*"):
        p.unlink()
    if 'id = "r-1"' not in text:  # already retired: put it back as it was
        res.queue.write_text(text + '\n' + "")
        pytest.skip("r-1 was retired before the database went")
    r = res("reconcile")
    assert "recover" in r.out and marks.read_text() == "x\n", str(r)  # not run a second time
    st = res.status("r-1")
    assert st["state"] == "done" and st["reason"]["code"] == "lost", st
    # a loop whose database is removed under it stops, loudly
    loop = serve(res)
    for p in res.state.glob("state.db*"):
        p.unlink()
    assert res("reconcile").code in (0, 1)
    assert loop.wait(30) == 1
    assert "removed while res had it open" in loop.stderr.read()


# ---------------------------------------------------------------- 6. files that are not files


@pytest.mark.parametrize("what", ["fifo", "/dev/zero", "non-utf-8", "huge"])
def test_a_policy_that_is_not_a_file_is_one_line_never_a_hang(res, what):
    path = res.tmp / "policy.toml"
    if what == "fifo":
        os.mkfifo(path)
    elif what == "non-utf-8":
        path.write_bytes(b"user_reserve_gb = 3\n\xff\n")
    elif what == "huge":
        path.write_bytes(b"# " + b"x" * (2 << 20) + b"\n")
    env = {"RES_POLICY_FILE": "/dev/zero" if what == "/dev/zero" else str(path)}
    r = res("status", env=env, timeout=20)
    assert r.code == 1 and r.out == "", str(r)
    line = r.one_line("err")
    assert line.startswith("res: ") and ("not a regular file" in line or "UTF-8" in line or "too large" in line), line


def test_a_pricing_override_that_is_a_fifo_starts_no_session_and_hangs_nothing(res):
    fifo = res.tmp / "pricing.toml"
    os.mkfifo(fifo)
    r = res.run_job(PY, "-c", "pass", extra=("--agent", "claude"), env={"RES_PRICING_FILE": str(fifo)}, timeout=30)
    assert r.code == 1 and "not a regular file" in r.err, str(r)
    assert res.run_job("true", env={"RES_PRICING_FILE": str(fifo)}, timeout=30).code == 0  # plain jobs run


# ---------------------------------------------------------------- 7. the socket


def test_a_socket_flood_is_bounded_and_the_loop_still_answers(res):
    loop = serve(res)
    base = rss_mb(loop.pid)
    sock = str(res.state / "serve.sock")
    held = []
    for _ in range(30):  # each sends a long half line and stalls
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(sock)
            s.setblocking(False)
            s.send(b'{"op": "ping", "x": "' + b"a" * (6 << 20))
        except (BlockingIOError, BrokenPipeError, ConnectionResetError):
            pass  # the loop turned it away, or reads it as it can
        held.append(s)
    time.sleep(1)
    peak = rss_mb(loop.pid)
    for s in held:  # early disconnects
        s.close()
    time.sleep(0.5)
    assert res("status", timeout=30).code == 0
    assert peak - base < 400, (base, peak)  # bounded: MAX_READING × REQUEST_LIMIT, not 30 × 6 MB and more
    loop.send_signal(signal.SIGTERM)
    _, err = loop.communicate(timeout=30)
    assert "Traceback" not in err, err
    print(f"\n[7] loop RSS {base:.0f} MB -> {peak:.0f} MB under 30 stalled 6 MB half lines")


# ---------------------------------------------------------------- 8. the queue file removed


@pytest.mark.parametrize("how", ["rm", "init --force"])
def test_removing_the_queue_file_stops_nobodys_work(res, how):
    assert res.started("sh", "-c", BLOCK, str(res.tmp / "go")) == "r-1"
    if how == "rm":
        res.queue.unlink()
    else:
        assert res("init", "--force").code == 0
    r = res("reconcile")
    assert any(re.match(r"\s+~ restore\s+r-1\b", ln) for ln in r.lines), str(r)
    assert res.status("r-1")["state"] == "running" and res.active("r-1") == "active"
    assert 'id = "r-1"' in res.queue.read_text()  # written back from what the reconciler knows
    (res.tmp / "go").touch()
    assert res("wait", "r-1").code == 0
    changes = res.ok("hist", "--changes").lines
    if how == "rm":
        assert any(ln.startswith("queue.toml changed outside res") and ln.endswith("removed (r-1 removed)")
                   for ln in changes), changes
    else:
        assert any(ln.startswith("queue.toml changed by res (") and ln.endswith(": init") for ln in changes), changes
    assert any(ln.startswith("queue.toml changed by res (") and ln.endswith(": restore r-1") for ln in changes), changes


# ---------------------------------------------------------------- 9. what an agent reads


def test_control_characters_never_reach_a_view_raw(res):
    title = "fine\nstate: done\x1b]0;pwned\x07\x1b[2J"
    assert res.started("sh", "-c", BLOCK, str(res.tmp / "go"), extra=("--title", title)) == "r-1"
    views = [res.ok("status", "r-1").out, res.ok("status").out, res.ok("reconcile", "--dry-run").out,
             res.run_job("true", mem="100000G").err]
    (res.tmp / "go").touch()
    views.append(res("wait", "r-1").out)
    views.append(res.ok("hist").out)
    for text in views:
        assert "\x1b" not in text and "\x07" not in text, repr(text)
    by_key = dict(line.split(": ", 1) for line in res.ok("status", "r-1").lines if ": " in line)
    assert by_key["state"] == "done" and by_key["title"] == "fine\\nstate: done\\x1b]0;pwned\\x07\\x1b[2J"
    assert json.loads(res.ok("status", "r-1", "--json").out)["title"] == title  # JSON stays exact


# ---------------------------------------------------------------- 10. smaller ones


def test_smaller_ones_each_a_clear_line_and_the_right_code(res):
    r = res("run", "--mem", "0.0001M", "--for", "1m", "--", "true")
    assert r.code == 2 and "at least 1M" in r.one_line("err"), str(r)
    r = res("run", "--mem", "1G", "--cpus", "1e-300", "--for", "1m", "--", "true")
    assert r.code == 2 and "at least 0.01" in r.one_line("err"), str(r)
    for var in ("RES_USER_RESERVE_GB=inf", "RES_TICK_S=1e-300", "RES_ATTACH_LEASE_S=1e-9", "RES_ANSWER_TIMEOUT_S=inf"):
        name, value = var.split("=")
        r = res("status", env={name: value})
        assert r.code == 1 and r.one_line("err").startswith(f'res: {name}="{value}": '), str(r)
    # `res status | head`: no "Broken pipe" line
    for n in range(40):
        res("note", "--mem", "1M", "--for", "1h", "--until-expiry", f"note {n} " + "x" * 100)
    p = subprocess.run(f"{PY} -m reconciler.cli status --json | head -c 10", shell=True, env=res.env,
                       cwd=str(res.work), capture_output=True, text=True, timeout=60)
    assert "Broken pipe" not in p.stderr and "Traceback" not in p.stderr, p.stderr
    # `res hook` with stdin never closed: game mode off, it does not even wait
    (res.state / "desired").mkdir(parents=True, exist_ok=True)
    hook = subprocess.Popen([PY, "-m", "reconciler.cli", "hook"], stdin=subprocess.PIPE, env=res.env)
    assert hook.wait(15) == 0
    # a corrupt row in state.db does not block other commands
    import sqlite3

    conn = sqlite3.connect(str(res.state / "state.db"))
    conn.execute("INSERT INTO jobs (id, num, phase, record, updated) VALUES ('r-999', 999, 'running', '{not json', 0)")
    conn.commit()
    conn.close()
    assert res("status").code == 0
    r = res("reconcile")
    assert any("r-999" in ln and "set aside" in ln for ln in r.err_lines), str(r)
    r = res("release", "r-999")
    assert r.code == 0 and r.one_line().startswith("r-999 dropped"), str(r)


def test_a_planted_log_symlink_fails_the_start_in_one_line(res):
    assert res.started("true") == "r-1"
    (res.state / "logs" / "r-2.log").symlink_to(res.tmp / "elsewhere")
    r = res.run_job("true")
    assert r.code == 1 and "is a symlink; refusing to write through it" in r.one_line("err"), str(r)
    assert not (res.tmp / "elsewhere").exists()
    st = res.status("r-2")
    assert st["state"] == "done" and st["reason"]["code"] == "start_failed", st


# ---------------------------------------------------------------- 11. the user's own files


def test_changes_to_the_users_files_are_visible(res):
    policy = res.tmp / "policy.toml"
    policy.write_text("user_reserve_gb = 6\n")
    res.ok("reconcile")  # the first look: what the files say now
    policy.write_text("user_reserve_gb = 1\n")  # an agent lowers the user's reserve by hand
    assert res("game", "on", "--for", "1h").code == 0
    assert res("game", "off").code == 0
    res.ok("reconcile")
    lines = res.ok("status").lines
    outside = [ln for ln in lines if ln.startswith("policy.toml changed outside res at ")]
    assert outside and outside[-1].endswith(": user_reserve_gb 6 → 1"), lines
    by_res = [ln for ln in lines if ln.startswith("game.toml changed by res (")]
    assert len(by_res) == 2 and by_res[-1].endswith(": off") and "pid" in by_res[-1], lines
    # an entry added to the queue by hand is held, never started
    text = res.queue.read_text() if res.queue.exists() else "next_id = 1\n"
    res.queue.write_text(text + '\n[[job]]\nid = "r-7"\ntitle = "forged"\nmem_gb = 0.1\nest_s = 60\ncreated = 1.0\n'
                                'cmd = ["/bin/true"]\n')
    r = res("reconcile")
    assert any(re.match(r'\s+x hold\s+r-7\s+"forged"', ln) for ln in r.lines), str(r)
    assert res("status", "r-7").code == 1  # never recorded, never started
    assert any(ln.startswith('held: r-7 "forged" added to queue.toml outside res') for ln in res.ok("status").lines)
    changes = res.ok("hist", "--changes").lines
    assert any("queue.toml changed outside res" in ln and "r-7 added" in ln for ln in changes), changes


# ---------------------------------------------------------------- 2b. a full disk


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MB tmpfs to keep the state directory on (root only: mount)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16M,mode=0700", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_a_full_disk_never_costs_a_job_its_rc_and_is_named_in_one_line(res, small_disk):
    res.env["RES_STATE_DIR"] = str(small_disk / "state")
    res.state = small_disk / "state"
    assert res.started("true") == "r-1"  # the state tree exists, state.db too
    filler = small_disk / "filler"
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    with open(filler, "wb") as f:  # the disk all but full: room for res's own records, not for the job's 1 MB
        f.write(b"\0" * max(free - (512 << 10), 0))
    r = res.run_job("sh", "-c", "head -c 1M /dev/zero; exit 3")
    started = r.code == 0
    print(f"\n[2b] the job {'started, filled the disk and ended' if started else 'was refused: disk full'}")
    if started:  # its log could not hold its output, nor its exit record its outcome: the runtime dir did
        wait_for(lambda: res.active("r-2") not in ("active", "activating", "deactivating"), "the job ended")
    else:
        assert "the disk is full where res keeps" in r.err, str(r)
    r = res("note", "--mem", "1M", "--for", "1m", "--until-expiry", "x")
    assert r.code == 1 and r.one_line("err").startswith("res: the disk is full where res keeps "), str(r)
    filler.unlink()
    if started:
        st = json.loads(res("wait", "r-2", "--json", timeout=60).out)
        assert st["rc"] == 3 and st["reason"]["code"] == "exited", st  # its own rc, not `lost`
        assert os.path.getsize(small_disk / "state" / "logs" / "r-2.log") < 1 << 20  # the disk was full
    assert not [p for p in (small_disk / "state" / "logs").iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("name, size", [("game.toml", 3 << 20), ("queue.toml", 27 << 20)])
def test_an_oversized_desired_file_is_refused_at_once(res, name, size):
    path = res.state / "desired" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"# padding\n" * (size // 10))
    args = ("game", "on", "--for", "1h") if name == "game.toml" else ("run", "--mem", "1G", "--for", "1m", "--", "true")
    t0 = time.monotonic()
    r = res(*args, timeout=60)
    took = time.monotonic() - t0
    assert r.code == 1 and f"{path}: too large" in r.err, str(r)
    print(f"\n[6] {name} of {size >> 20} MB refused in {took:.2f} s")


# ---------------------------------------------------------------- 10. issue 40: the socket, state.db held, lost


HOSTILE_SHAPES = [
    (b"\xff\xfe\x00garbage\x80\n", "not UTF-8 text"),
    (b'[{"op": "ping"}]\n', "a list, not a JSON object"),
    (b'{"op": "wait", "id": {"$gt": ""}}\n', "id is an object, not text"),
    (b'{"op": "release", "id": ["r-1"], "stop": true}\n', "id is a list, not text"),
    (b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested deeper"),
]


def test_hostile_requests_get_one_line_each_and_the_log_one_line(res):
    loop = serve(res)
    sock = str(res.state / "serve.sock")
    for data, words in HOSTILE_SHAPES:
        (line,) = ask_raw(sock, data)
        answer = json.loads(line)
        assert answer["code"] == 2 and answer["line"].startswith("res: ") and words in answer["line"], answer
        assert not re.search(r"codec can't|has no attribute|Error binding|unhashable|recursion", answer["line"]), answer
    assert res("status", timeout=30).code == 0  # it still answers
    loop.send_signal(signal.SIGTERM)
    _, err = loop.communicate(timeout=30)
    assert "Traceback" not in err, err
    refused = [ln for ln in err.splitlines() if "refused" in ln and "on the socket" in ln]
    assert len(refused) <= 1, err


DB_HOLDER = Path(__file__).resolve().parents[1] / "dbholder.py"  # holds state.db until its stdin closes


def test_a_database_held_by_another_process_keeps_every_timeout_and_is_named(res):
    res.env["RES_TICK_S"] = "0.5"
    loop = serve(res)
    assert res.started("sh", "-c", BLOCK, str(res.tmp / "go")) == "r-1"
    holder = res.popen([PY, str(DB_HOLDER), str(res.state / "state.db")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                       text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        r = res("wait", "r-1", "--timeout", "2s", timeout=20)  # (10 s with a loop, 30-34 s without, before)
        assert r.code == 124, str(r)
        line = r.one_line("err")
        assert line.startswith("res: r-1 still running after 2 s") and f"pid {holder.pid}" in line, line
        r = res.run_job("true", env={"RES_ANSWER_WAIT_S": "5"}, timeout=30)
        assert r.code == 1 and f"pid {holder.pid}" in r.one_line("err"), str(r)
        assert "database is locked" not in r.err
        assert res("status", timeout=20).code == 0
    finally:
        holder.stdin.close()
        holder.wait(30)
    (res.tmp / "go").touch()
    assert res("wait", "r-1", timeout=60).code == 0  # once it is let go, everything goes on
    loop.send_signal(signal.SIGTERM)
    _, err = loop.communicate(timeout=30)
    held = [ln for ln in err.splitlines() if f"pid {holder.pid}" in ln]
    assert 1 <= len(held) <= 2, err  # said once (and once more only if its words changed), not every pass
    assert "Traceback" not in err and "database is locked" not in err, err


def test_a_job_released_while_state_db_was_deleted_under_the_loop_says_released(res):
    res.env["RES_TICK_S"] = "0.5"
    loop = serve(res)
    assert res.started("sh", "-c", BLOCK, str(res.tmp / "go")) == "r-1"
    for p in res.state.glob("state.db*"):
        p.unlink()
    r = res("release", "--stop", "r-1", timeout=60)
    assert r.code in (0, 1) and "Traceback" not in r.err, str(r)
    if r.code == 1:  # the loop saw its database gone first: said so, nothing done; it stops
        assert "state.db" in r.one_line("err"), str(r)
        loop.wait(30)
        r = res("release", "--stop", "r-1", timeout=60)  # asked again: here, on a new state.db
        assert r.code == 0, str(r)
    wait_for(lambda: res.active("r-1") not in ("active", "activating", "deactivating"), "r-1 stopped", 60)
    st = res.status("r-1")
    assert st["state"] == "done" and st["reason"]["code"] == "released", st
    assert "lost" not in (st["why"] or ""), st
    if loop.poll() is None:
        loop.send_signal(signal.SIGTERM)
        loop.wait(30)
