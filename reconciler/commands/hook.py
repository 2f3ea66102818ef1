"""`res hook`: the gate (DESIGN §5.8) and game mode's display guard (§5.6), as a shell-command hook of
Claude Code (PreToolUse, Bash), Codex (PreToolUse, Bash) and Gemini CLI (BeforeTool,
run_shell_command). One JSON event on stdin; the CLI is told by `--agent` or by the event's shape
(core/hooks.py).

- A heavy command (core/gate.py: the table in gate.json, which the loop writes, else
  policies/heavy.toml; what history learned) is rewritten to `res run --wait --queue --start-within
  … --gated … -- bash -c LINE` when the loop says it can start within gate_wait_s (or no loop
  answers), and only where the session would have run it unasked (core/hookrules.py); refused with
  the busy line when it would wait longer.
- In game mode every shell command is prefixed with `unset DISPLAY WAYLAND_DISPLAY; ` and the agent
  is told why GUI programs fail.
- A SessionStart event tells the loop a session started (it adopts it at once).
Anything else, and any error at all: no output and exit 0, so the CLI runs the command unchanged.

HOT PATH: this runs before every agent shell command. A light command costs json, shlex, the gate's
own small modules and one read of gate.json (bench r: 0.95× `python3 -c pass`); no pydantic,
tomlkit, D-Bus, pathlib or state.db. The game file is read by `_parse_game` in the shape the writer
leaves it, tomllib only for anything else. A heavy command adds one question to the loop over its
socket and a read of the CLI's rules files.

What each CLI's protocol does, with sources: docs/agent-hooks.md and docs/agent-output.md.

A game file that is a symlink (or whose `desired/` directory or state directory is one) is not
followed: it counts as broken (no game mode). Nor is a gate.json that is a symlink (the shipped table).
"""
from __future__ import annotations

import os
import sys
import time

PREFIX = "unset DISPLAY WAYLAND_DISPLAY; "
_PREFIX_SEEN = "unset DISPLAY WAYLAND_DISPLAY;"  # an already rewritten command starts with this
MAX_GAME_BYTES = 1 << 20  # game.toml is two keys and comments; anything bigger is not read
MAX_STDIN_CHARS = 16 << 20  # a hook input bigger than this is not parsed
_KEYS = ("on", "until")


# ---------------------------------------------------------------- where the game file is


def state_dir(environ) -> str:
    """The state directory (config/stateroot.py: os.path only, pathlib is not worth importing here)."""
    from reconciler.config.stateroot import state_root

    return state_root(environ)


def game_path(environ) -> str:
    """`desired/game.toml` under the state directory."""
    return os.path.join(state_dir(environ), "desired", "game.toml")


def _read_game_bytes(path: str) -> bytes | None:
    """The game file's bytes, or None if it is missing or unusable: a symlink at the state dir, at
    desired/ or at the file; not a regular file; too large; unreadable. Never blocks on a FIFO."""
    desired = os.path.dirname(path)
    root = os.path.dirname(desired)
    flags_dir = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fds: list[int] = []
    try:
        rfd = os.open(root, flags_dir)
        fds.append(rfd)
        dfd = os.open(os.path.basename(desired), flags_dir, dir_fd=rfd)
        fds.append(dfd)
        fd = os.open(os.path.basename(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        fds.append(fd)
        st = os.fstat(fd)
        if (st.st_mode & 0o170000) != 0o100000 or st.st_size > MAX_GAME_BYTES:  # S_ISREG, sane size
            return None
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, MAX_GAME_BYTES + 1 - total)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_GAME_BYTES:  # grew while we read it
                return None
    except OSError:
        return None
    finally:
        for fd in fds:
            os.close(fd)


# ---------------------------------------------------------------- reading game.toml

_DIGITS = frozenset("0123456789")


class _Slow(Exception):
    """Outside the simple shape `_fast_parse` reads: let tomllib decide."""


def _fast_number(tok: str) -> float | int:
    """A TOML decimal integer or float in the plain form `123` or `123.45` (no sign, exponent or
    underscores; no leading zero except `0` / `0.x`). Anything else: _Slow."""
    whole, dot, frac = tok.partition(".")
    if not whole or not set(whole) <= _DIGITS or (len(whole) > 1 and whole[0] == "0"):
        raise _Slow
    if not dot:
        return int(whole)
    if not frac or not set(frac) <= _DIGITS:
        raise _Slow
    return float(tok)


def _fast_parse(text: str) -> dict:
    """The keys of game.toml in the shape the writer leaves it: blank lines, `# comments`, and
    `on = true|false` / `until = <number>` (bare keys, optional trailing comment). Anything else
    (quoted or dotted keys, tables, other keys, exponents, duplicate keys, control characters, CR)
    raises _Slow, so tomllib makes the call: on the lines this accepts it gives tomllib's result."""
    if "\r" in text or "\x7f" in text:
        raise _Slow
    data: dict = {}
    for line in text.split("\n"):
        for c in line:
            if c < " " and c != "\t":  # control characters: tomllib's call (usually an error)
                raise _Slow
        s = line.strip(" \t")
        if not s or s[0] == "#":
            continue
        key, eq, rest = s.partition("=")
        key = key.rstrip(" \t")
        if not eq or key not in _KEYS or key in data:
            raise _Slow
        value = rest.partition("#")[0]
        value = value.strip(" \t")
        if key == "on":
            if value == "true":
                data[key] = True
            elif value == "false":
                data[key] = False
            else:
                raise _Slow
        else:
            data[key] = _fast_number(value)
    return data


def _parse_game(text: str) -> dict:
    """game.toml's data as tomllib reads it; raises ValueError (tomllib.TOMLDecodeError) if invalid."""
    try:
        return _fast_parse(text)
    except _Slow:
        import tomllib

        return tomllib.loads(text)


MAX_EPOCH = 32_503_680_000.0  # models.MAX_EPOCH (the hook does not import the models)


def game_until(data: dict, now: float) -> tuple[bool, float | None]:
    """(active, until) of game.toml's data, by the reconciler's rules (models.Game, strict, and
    desired._parse_game): only the keys `on` (a boolean) and `until` (a finite number; an int counts)
    are allowed, else the file is broken (ValueError). Active: on, and `until` absent or in the
    future."""
    for key in data:
        if key not in _KEYS:
            raise ValueError(f"unknown key {key!r}")
    on = data.get("on", False)
    if type(on) is not bool:
        raise ValueError("on: must be true or false")
    until = data.get("until")
    if until is not None:
        if type(until) not in (int, float) or until != until or until in (float("inf"), float("-inf")):
            raise ValueError("until: must be a finite number")
        try:
            until = float(until)
        except OverflowError:
            raise ValueError("until: must be a finite number") from None
        if not 0 <= until <= MAX_EPOCH:
            raise ValueError("until: out of range")
    return (on and (until is None or now < until)), until


def read_game(environ, now: float) -> tuple[bool, float | None]:
    """(active, until) from the game file; (False, None) if it is missing or broken in any way."""
    raw = _read_game_bytes(game_path(environ))
    if not raw:  # missing, unusable, or empty (the writer never writes an empty file)
        return False, None
    try:
        return game_until(_parse_game(raw.decode("utf-8")), now)
    except ValueError:  # UnicodeDecodeError and TOMLDecodeError are ValueErrors
        return False, None


# ---------------------------------------------------------------- the hook


def context(until: float | None) -> str:
    """What the agent is told: why GUI programs fail and what to do instead."""
    when = "until the user turns it off"
    if until is not None:
        try:
            when = f"until {time.strftime('%H:%M', time.localtime(until))}"
        except (OverflowError, OSError, ValueError):  # a far-off `until`: no clock time for it
            when = "for now"
    return (
        f"res: game mode is on {when}: the person at this machine is using the display, so `res hook` "
        f"prefixed this Bash command with `{PREFIX.strip()}` and GUI programs (browsers, Electron apps, "
        "headed test runners, anything that opens a window) will fail to start. Run them headless "
        "(--headless, xvfb-run, a CI/headless setting) or leave that step until game mode ends "
        "(`res game status` shows when); everything else works as usual."
    )


def session_rules(call, environ):
    """The rules of the session that sent `call` (config/agentsettings.py), read once per hook call."""
    from reconciler.config.agentsettings import rules_for

    return rules_for(call, environ)


def gate(call, environ, now: float, ask=None, res_path: str | None = None, rules=None) -> tuple | None:
    """The gate's decision for one shell command (DESIGN §5.8): ("rewrite", command, context, grant),
    ("deny", reason), ("note", context) (the command runs as it is, and the agent is told something),
    or None (the command runs as it is). `ask(environ, size)`: the loop's answer to "would a job of
    this size start now, or when?" (None: no loop answered; STUCK: one is there and did not answer).
    `rules()`: the session's rules (read only for a heavy line)."""
    if environ.get("RES_ID"):
        return None  # the agent itself runs inside a res job: its commands are that job's work
    from reconciler.config import gatefile
    from reconciler.config.gitrepo import checkout, project_name
    from reconciler.core.gate import judge, make_table, rewritten, verdict

    view = gatefile.load(state_dir(environ))
    project = project_name(call.cwd, checkout(call.cwd)) if call.cwd else ""  # learned sizes are filed by it
    learned = view["learned"].get(project) if project else None
    heavy = judge(call.command, make_table(view["table"]), learned if isinstance(learned, dict) else None)
    if heavy is None:
        return None
    wait_s = float(view["wait_s"])
    size = {"mem_gb": heavy.mem_gb, "cpus": heavy.cpus, "est_s": heavy.est_s, "guessed": heavy.guessed,
            "title": heavy.fingerprint, "project": project, "cwd": call.cwd or "/"}
    asker = ask or _would_fit
    answer = asker(environ, size)
    if answer is STUCK:  # a loop is there and did not answer: the command runs as it is, said once
        said = _once(environ, call.session, "stuck")
        return ("note", STUCK_CONTEXT) if said else None
    kind, line = verdict(answer, wait_s, now)
    if kind == "deny":
        return "deny", (f"res: not run: `{_short(call.command)}` is heavy work ({heavy.source}) and would wait "
                        f"more than {wait_s:g} s for memory or CPUs; {line}")
    if kind != "rewrite":
        return None
    # The CLI judges the command we hand back by its rules: rewrite only what the session would have
    # run unasked anyway, answered as the CLI lets a hook (core/hookrules.py), else leave it to the CLI.
    from reconciler.core.gate import simple_commands
    from reconciler.core.hookrules import ADMIT, GRANT, decide

    decided = decide(call.cli, call.permission_mode, call.command, simple_commands(call.command),
                     (rules or (lambda: session_rules(call, environ)))())
    if decided is None:
        return None
    if answer and type(answer.get("mem_gb")) in (int, float) and type(answer.get("cpus")) in (int, float):
        heavy = heavy._replace(mem_gb=float(answer["mem_gb"]), cpus=float(answer["cpus"]))  # clamped to what there is
    if decided == ADMIT:
        return _admit(call, environ, heavy, project, wait_s, answer, lambda: asker(environ, size))
    command = rewritten([res_path] if res_path else res_program(), heavy, call.command, wait_s, max_duration_s=call.timeout_s)
    booked = f"{heavy.mem_gb:g} GB and {heavy.cpus:g} cpus booked" + (", not a limit" if heavy.guessed else "")
    return "rewrite", command, (
        f"res: this is heavy work ({heavy.source}), so res runs it as a job (res run --wait; {booked}) in this "
        f"directory, with its own output and exit code; res's own lines (the job's id first) are on stderr. "
        f"If it cannot start within {wait_s:g} s it is withdrawn with exit code 3 and a busy line."), decided == GRANT


def _game_rewrite(call, rules) -> str | None:
    """How game mode's prefix goes on a line the gate left alone: "grant" where the session's rules
    let the line run unasked (core/hookrules.decide), "rewrite" where its prompt, if any, simply shows
    the prefix (Claude Code asks about the line either way; a shim's line runs anyway), None where the
    prefix would make the CLI ask about a line it would have run (Gemini outside YOLO; Codex takes a
    rewrite only with its allow)."""
    from reconciler.core.gate import Unreadable, simple_commands
    from reconciler.core.hookrules import ADMIT, GRANT, decide

    try:
        commands = simple_commands(call.command)
    except Unreadable:
        commands = None
    decided = decide(call.cli, call.permission_mode, call.command, commands, rules()) if commands is not None else None
    if decided is not None and decided != ADMIT:  # (admitted in place: the line is the CLI's to judge)
        return "grant" if decided == GRANT else "rewrite"
    return "rewrite" if call.cli in ("claude", "shell") else None


def _short(command: str) -> str:
    text = " ".join(command.split())
    return text if len(text) <= 80 else text[:79] + "…"


def res_program() -> list[str]:
    """How to run the `res` this process is: its console script (absolute), else the one on PATH, else
    this interpreter with the package (`python -m reconciler.cli`)."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "res" and os.path.isabs(argv0):
        return [argv0]
    import shutil

    found = shutil.which("res")
    return [found] if found else [sys.executable, "-m", "reconciler.cli"]


# The loop answers in a pass (tens of ms). One that has not in this long is stopped or stuck: the
# command runs as it is (every heavy command of every agent would pay the wait), and the agent is told
# once per session.
ASK_TIMEOUT_S = 1.0
ANNOUNCE_TIMEOUT_S = 1.0
STUCK = object()  # _would_fit's answer when a loop is there and did not answer in time
STUCK_CONTEXT = ("res: the reconciler loop (res serve) did not answer within 1 s, so heavy commands run as "
                 "they are, outside res, until it answers again (`res status` says what holds it)")


def _once(environ, session: str | None, what: str) -> bool:
    """True the first time this session is told `what` (a marker file in the state directory, made
    exclusively: two hooks at once tell it once); False after, or when it cannot be told apart."""
    if not session:
        return True
    import hashlib

    d = os.path.join(state_dir(environ), "hook-said")
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        name = hashlib.sha256(f"{what}\0{session}".encode()).hexdigest()[:32]
        fd = os.open(os.path.join(d, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.close(fd)
        return True
    except FileExistsError:
        return False
    except OSError:
        return True


def _ask_loop(environ, request: dict, timeout: float) -> dict | None:
    """The loop's answer, or None: no loop, an old one, an error, no answer in time (the gate then
    leaves it to `res run --start-within`; a session is found by the loop's own look)."""
    from reconciler.loop.client import ask

    try:
        answer = ask(os.path.join(state_dir(environ), "serve.sock"), request, timeout=timeout)
    except Exception:  # noqa: BLE001 - the hook never gets in the way
        return None
    return answer if isinstance(answer, dict) and answer.get("code") == 0 else None


ADMIT_ASK_S = 2.0  # one booking's answer from the loop
ADMIT_RETRY_S = 1.0  # between tries while it would start within the gate's wait
ADMIT_MARGIN_S = 5.0  # the hook's own start and its last answers, before the CLI's timeout for it


def _admit(call, environ, heavy, project: str, wait_s: float, answer: dict | None, ask_again) -> tuple | None:
    """Admission in place (docs/agent-hooks.md): the line passes unchanged, its size booked before it
    runs under the call's request id (a gated note owned by the agent's session, held for twice its
    estimate at most), released by its post-tool event. The booking waits its turn in the queue, as a
    rewritten job does (--queue --start-within): granted within the gate's wait, the line runs; not by
    then, it is withdrawn and the busy line comes back as a deny (its start_by keeps a pass from
    granting it later, whatever becomes of this hook). ("admit", context), ("deny", reason), or None
    (nothing to book it under, or no loop to book it with: it runs as it is)."""
    from reconciler.core.agentclis import GATE_HOOK_TIMEOUT_S
    from reconciler.core.hooks import hold_id

    held = hold_id(call)
    if held is None or not isinstance(answer, dict):
        return None
    from reconciler.loop.client import ask
    from reconciler.loop.protocol import Submit
    from reconciler.observed.procs import note_owner

    owner, name = note_owner(os.getppid())
    sock = os.path.join(state_dir(environ), "serve.sock")
    within = min(wait_s, GATE_HOOK_TIMEOUT_S - ADMIT_MARGIN_S)
    give_up = time.monotonic() + within
    now = time.time()
    # gated: its size and time are the gate's guess, as a gated job's are: others are told its end is
    # a guess (not a promise to plan on), and it is held until twice its estimate (Record.expires).
    # Its command as the gate's rewrite would run it: asked again after a refusal, it keeps its place.
    fields = {"title": f"{heavy.fingerprint} (in place)", "project": project, "mem_gb": heavy.mem_gb,
              "cpus": heavy.cpus, "est_s": max(int(heavy.est_s), 30), "gated": True, "queue": True,
              "created": now, "start_by": now + within, "owner_pid": owner, "owner_name": name, "request_id": held,
              "cmd": ["bash", "-c", call.command]}
    try:
        got = ask(sock, Submit("note", fields), timeout=ADMIT_ASK_S + 0.5)
    except Exception:  # noqa: BLE001 - no loop, or none that answers: the command runs as it is
        return None
    if not isinstance(got, dict):
        return None
    data = got.get("data") if isinstance(got.get("data"), dict) else {}
    entry, state = data.get("id"), data.get("state")
    while got.get("code") == 0 and state == "queued" and isinstance(entry, str):
        if time.monotonic() + ADMIT_RETRY_S > give_up:
            state = _withdraw_booking(sock, entry)
            break
        time.sleep(ADMIT_RETRY_S)
        state = _entry_state(sock, entry) or state
    if got.get("code") == 0 and state == "running":
        _mark_held(environ, held)
        booked = f"{heavy.mem_gb:g} GB and {heavy.cpus:g} cpus"
        return "admit", (f"res: this is heavy work ({heavy.source}); res booked {booked} for it while it "
                         "runs (it runs as it is, in this session)")
    if got.get("code") == 0:  # withdrawn unstarted: who holds what now, as the gate says it
        now_said = ask_again()
        line = str((now_said or {}).get("line") or answer.get("line") or "busy")
    else:
        line = str(got.get("line") or answer.get("line") or "busy")
    return "deny", (f"res: not run: `{_short(call.command)}` is heavy work ({heavy.source}) and would wait "
                    f"more than {within:g} s for memory or CPUs; {line}")


def _entry_state(sock: str, entry: str) -> str | None:
    """The entry's state as the loop has it now (None: no answer)."""
    import json

    from reconciler.loop.client import ask
    from reconciler.loop.protocol import Status

    try:
        got = ask(sock, Status(entry, json=True), timeout=ADMIT_ASK_S)
        return json.loads(got["line"]).get("state") if isinstance(got, dict) and got.get("code") == 0 else None
    except Exception:  # noqa: BLE001 - asked again a moment later, or given up on at the deadline
        return None


def _withdraw_booking(sock: str, entry: str) -> str | None:
    """A booking not granted within the wait is withdrawn (its start_by ends it even if this is not
    heard): None; "running" if it was granted by now (it stays, and the line runs)."""
    from reconciler.loop.client import ask
    from reconciler.loop.protocol import Release

    if _entry_state(sock, entry) == "running":
        return "running"
    try:  # (a grant in the moment between: released with it, and refused; the agent asks again)
        ask(sock, Release(entry, stop=False), timeout=ADMIT_ASK_S)
    except Exception:  # noqa: BLE001
        pass
    return None


def _held_marker(environ, held: str) -> str:
    """The file that says this hook booked `held` (`<state>/hook-held/<request id>`): the post-tool
    event of every other command (nearly all: light ones) asks the loop nothing."""
    return os.path.join(state_dir(environ), "hook-held", held)


def _mark_held(environ, held: str) -> None:
    try:
        os.makedirs(os.path.dirname(_held_marker(environ, held)), mode=0o700, exist_ok=True)
        os.close(os.open(_held_marker(environ, held), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
    except OSError:
        pass  # not marked: the booking ends at its estimate's end, or its session's


def _release_booking(environ, ran) -> None:
    """The post-tool event of a command admitted in place (docs/agent-hooks.md): the booking its
    pre-tool event made under its request id (core.hooks.hold_id) is released; none there (a command
    that was not booked, or was released already): nothing, not even a question to the loop. Answered
    or not, the hook says nothing."""
    if not os.path.isdir(os.path.join(state_dir(environ), "hook-held")):
        return  # nothing was ever booked in place here (no hashing, no question to the loop)
    from reconciler.core.hooks import hold_id
    from reconciler.loop.protocol import ReleaseRequest

    held = hold_id(ran)
    if held is None:
        return
    try:
        os.unlink(_held_marker(environ, held))
    except OSError:
        return  # not booked by this hook (a light command), or released already
    _ask_loop(environ, ReleaseRequest(held).to_wire(), ANNOUNCE_TIMEOUT_S)


def _would_fit(environ, size: dict):
    """The loop's answer to "would a job of this size start now, or when?" (loop op `gate`): a dict;
    None when no loop listens (or an old or broken one answered nothing usable); STUCK when one took
    the question and did not answer within ASK_TIMEOUT_S."""
    from reconciler.loop.client import NoDaemon, Unanswered, ask
    from reconciler.loop.protocol import Gate

    try:
        answer = ask(os.path.join(state_dir(environ), "serve.sock"), Gate(size), timeout=ASK_TIMEOUT_S)
    except (Unanswered, TimeoutError):
        return STUCK
    except NoDaemon:
        return None
    except Exception:  # noqa: BLE001 - the hook never gets in the way
        return None
    got = answer.get("answer") if isinstance(answer, dict) and answer.get("code") == 0 else None
    return got if isinstance(got, dict) else None


def main(stdin_text: str, environ, now: float | None = None, told: str | None = None, ask=None,
         res_path: str | None = None) -> tuple[str, int]:
    """(what to print on stdout, exit code) for one hook call. The exit code is always 0; the text is
    "" (no output: the command runs unchanged) unless the gate or game mode has something to say.
    `told`: the CLI (--agent), else the input's shape says."""
    try:
        now = time.time() if now is None else now
        if not isinstance(stdin_text, str) or len(stdin_text) > MAX_STDIN_CHARS:
            return "", 0
        import json

        try:
            event = json.loads(stdin_text)
        except ValueError:
            return "", 0
        from reconciler.core.hooks import deny_output, note_output, read_call, rewrite_output

        if isinstance(event, dict) and event.get("hook_event_name") == "SessionStart":
            # a new agent session: the loop adopts it in a pass now (its own look runs once a minute)
            from reconciler.loop.protocol import Session

            _ask_loop(environ, Session().to_wire(), ANNOUNCE_TIMEOUT_S)
            return "", 0
        call = read_call(event, told)
        if call is None:
            ran = read_call(event, told, post=True)
            if ran is not None:  # a command ran: what its pre-tool event booked in place is let go
                _release_booking(environ, ran)
            return "", 0
        rules_read: list = []

        def rules():  # the session's rules, read at most once, and only when a rewrite needs them
            if not rules_read:
                rules_read.append(session_rules(call, environ))
            return rules_read[0]

        command, notes, grant = call.command, [], False
        decided = gate(call, environ, now, ask, res_path, rules)
        if decided is not None and decided[0] == "deny":
            return json.dumps(deny_output(call, decided[1]), separators=(",", ":")), 0
        if decided is not None and decided[0] == "note":
            out = note_output(call, decided[1])
            return (json.dumps(out, separators=(",", ":")), 0) if out else ("", 0)
        admitted = decided is not None and decided[0] == "admit"  # unchanged, booked while it runs
        if admitted:
            notes = [decided[1]]
        elif decided is not None:
            command, notes, grant = decided[1], [decided[2]], decided[3]
        active, until = read_game(environ, now)
        if active and not call.command.lstrip().startswith(_PREFIX_SEEN):
            # The prefix is a command of its own in the line the CLI judges: where the line would have
            # run unasked by a rule, it is answered as the gate's rewrite is (never a grant it lacked).
            how = _game_rewrite(call, rules) if decided is None or admitted else ("grant" if grant else "rewrite")
            if how is not None:
                command, notes, grant = PREFIX + command, [*notes, context(until)], how == "grant"
        if command == call.command:
            out = note_output(call, " ".join(notes)) if notes else None
            return (json.dumps(out, separators=(",", ":")), 0) if out else ("", 0)
        return json.dumps(rewrite_output(call, command, " ".join(notes), grant), separators=(",", ":")), 0  # ASCII
    except Exception:  # the hook must never get in the way: any error is "no opinion"
        return "", 0


STDIN_WAIT_S = 5.0  # Claude Code writes the whole event and closes stdin at once


def _read_input(limit: int, wait_s: float) -> str:
    """stdin up to EOF, `limit` bytes or `wait_s` seconds, whichever comes first: a caller that never
    closes stdin costs the agent a few seconds, never its command."""
    import select

    deadline = time.monotonic() + wait_s
    chunks, total = [], 0
    while total < limit:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([0], [], [], left)[0]:
            break
        chunk = os.read(0, min(65536, limit - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def run(told: str | None = None) -> int:
    """The process: read stdin, print what `main` says; returns the exit code, always 0. Never
    raises: a closed stdout or any other failure is "no opinion" (and nothing is left half-written
    in a buffer for the interpreter to trip over at exit)."""
    try:
        stdin = sys.stdin
        text = "" if stdin is None or stdin.isatty() else _read_input(MAX_STDIN_CHARS * 4 + 1, STDIN_WAIT_S)
        out, _ = main(text, os.environ, told=told)
        if out:
            sys.stdout.write(out + "\n")
            sys.stdout.flush()
    except BaseException:  # noqa: BLE001 - a broken pipe, a closed stdout, ^C: no opinion
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        except BaseException:  # noqa: BLE001
            pass
    return 0


def print_config() -> str:
    """The settings.json snippet (~/.claude/settings.json, or a project's .claude/settings.json) that
    runs `res hook` before every Bash command. `res` never edits dotfiles: the user adds it."""
    return (
        "{\n"
        '  "hooks": {\n'
        '    "PreToolUse": [\n'
        "      {\n"
        '        "matcher": "Bash",\n'
        '        "hooks": [{"type": "command", "command": "res hook", "timeout": 10}]\n'
        "      }\n"
        "    ]\n"
        "  }\n"
        "}\n"
    )


if __name__ == "__main__":
    sys.exit(run())
