"""The agent kinds whose output res reads (`res run --agent KIND`: none, and each CLI of
core/agentclis.py), what an agent process is, and what an agent's command line says about the
session: the model it runs, for the agents whose output does not name it. Pure and import-light
(tomllib only): the command line checks `--agent` against it, and `res run` reads a Codex session's
configuration with it (config/agentmodel.py), without loading the digests.

Codex (measured with the real CLIs, 0.120.0 … 0.171.0, against a Responses API on loopback:
tests/agentcli/test_codex_cli.py; docs/codex-gemini-formats.md §1.5): the model a `codex exec` asks
for is, first to last,
  1. `-m X` / `--model X` / `--model=X` / `-mX` (given twice, the CLI refuses to start);
  2. up to 0.130: the model of the legacy profile `[profiles.P]` in config.toml, P from `--profile P`,
     `-c profile=P` or a top-level `profile = "P"` (0.140 and later refuse to start with either);
  3. `-c model=X` / `--config model=X` / `--config=model=X` (the last one given; X a TOML value, or a
     bare string where it does not parse as TOML);
  4. `model` in the `.codex/config.toml` of a trusted project (the nearest one from the working
     directory, `-C DIR`, up to the repository's root);
  5. from 0.140: `model` in the profile file `$CODEX_HOME/P.config.toml` of `--profile P`;
  6. `model` at the top of `$CODEX_HOME/config.toml` (not read with `--ignore-user-config`);
  7. the CLI's own default: the first listed model of the catalogue bundled with that release
     (CODEX_DEFAULT_MODELS; ChatGPT-plan logins may be offered another, and are billed in credits).
"""
from __future__ import annotations

import posixpath
import re
from typing import Any, NamedTuple

from reconciler.core.agentclis import CLIS, behaviour


def agent_kinds() -> tuple[str, ...]:
    """`res run --agent`'s kinds: none (a plain command, the exit code decides) and every agent CLI."""
    return ("none", *CLIS)


MODEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@\[\]+-]{0,199}$")  # what res records as a model id
VERSION = re.compile(r"^(\d{1,6})\.(\d{1,6})\.(\d{1,6})(?:[-+][0-9A-Za-z.-]{1,40})?$")


def unread_output(agent: str, cmd: list[str]) -> str | None:
    """Why a session's command line keeps its spend from res until it ends (a cost budget then cannot
    stop it mid-run), if it does: the format res reads is not the one asked for (the CLI's module says,
    core/clis/). Only where the program is the agent's own CLI: a wrapper's arguments say nothing of
    what it runs."""
    program = cmd[0].rsplit("/", 1)[-1] if cmd else ""
    if agent not in CLIS or program not in CLIS[agent].programs:
        return None
    return behaviour(agent).unread_output(cmd)


def model_from_command(cmd: list[str]) -> str | None:
    """The model an agent's command line asks for (`-m X`, `--model X`, `--model=X`), if it says:
    Gemini's output names an alias. (Codex: codex_call / codex_model, which read its config too.)"""
    for i, arg in enumerate(cmd):
        if arg in ("-m", "--model") and i + 1 < len(cmd):
            return cmd[i + 1]
        if arg.startswith("--model="):
            return arg.split("=", 1)[1]
    return None


# ---------------------------------------------------------------- agent processes
# What an agent process is, the one rule: /proc (observed/procs.py), the loop's look, the sessions it
# adopts and `res clean` all ask here.

# Agent command-line programs: a `res note` made under one of them lives as long as that session. The
# CLIs of core/agentclis.py, and these, whose hooks res does not serve:
OTHER_AGENTS = frozenset({"cursor-agent", "aider", "goose", "amp", "qwen", "crush", "cline",
                          "kiro-cli", "droid"})
# Interpreters an agent CLI may run under (`node …/gemini`): its name is then its script's.
INTERPRETERS = frozenset({"node", "nodejs", "bun", "deno", "python", "python3"})
# The agent whose sessions res keeps in the agents slice (adopts, sizes, starts by the shell-init
# alias) and whose scratch `res clean` keeps while they run: Claude Code.
SESSION_NAME = "claude"


def agent_name(comm: str, cmdline: list[str] | tuple[str, ...] = ()) -> str | None:
    """The agent CLI a process is, from its name (comm) and argv, or None."""
    if comm in CLIS or comm in OTHER_AGENTS:
        return comm
    if comm in INTERPRETERS or comm.startswith("python3."):
        for arg in cmdline[1:3]:
            if arg.startswith("-"):
                continue
            base = posixpath.basename(arg)
            for suffix in (".js", ".mjs", ".cjs", ".py"):
                base = base.removesuffix(suffix)
            return base if base in CLIS or base in OTHER_AGENTS else None
    return None


def is_session(comm: str, argv: list[str] | tuple[str, ...] = ()) -> bool:
    """Whether a process is an agent session res keeps (SESSION_NAME): by its name, or by the program
    its argv names first (where the caller read it)."""
    return agent_name(comm) == SESSION_NAME or (bool(argv) and agent_name(posixpath.basename(argv[0])) == SESSION_NAME)


# ---------------------------------------------------------------- Codex

# The default model of each Codex CLI release: (first, last, model) for the releases measured (`codex
# exec` run without any model named, the model of the request it sent, tests/agentcli), each range
# from its first measured release to its last; a release between two ranges with the same model has it
# too. Elsewhere (0.121–0.129, before 0.120, after 0.171) the default is not known: None.
CODEX_DEFAULT_MODELS: tuple[tuple[str, str, str], ...] = (
    ("0.120.0", "0.120.0", "gpt-5.3-codex"),
    ("0.130.0", "0.143.0", "gpt-5.5"),        # measured 0.130.0 0.140.0 0.142.5 0.143.0
    ("0.144.0", "0.153.3", "gpt-5.6-sol"),    # 0.144.0 0.145.0 0.146.1 0.147.0 0.150.1 0.152.0 0.153.0 .2 .3
    ("0.153.4", "0.159.0", "gpt-6-astra"),    # 0.153.4 0.154.0 0.155.0 0.157.0 0.158.0 0.159.0
    ("0.159.1", "0.169.0", "gpt-6.1-sol"),    # 0.159.1 .2 .3 0.160.0 0.161.0 0.162.0 0.165.0 0.168.0 0.169.0
    ("0.171.0", "0.171.0", "gpt-6.2-sol"),    # (0.170.0 was never published)
)
# Legacy `[profiles.P]` tables: read up to 0.130.0 (measured 0.120.0, 0.130.0), refused from 0.140.0.
CODEX_LEGACY_PROFILES_UNTIL = "0.130.0"
CODEX_PROFILE_FILES_FROM = "0.140.0"


def version_key(version: str | None) -> tuple[int, int, int] | None:
    m = VERSION.match(version or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def codex_default_model(version: str | None) -> str | None:
    """The model a Codex CLI release uses when nothing names one; None where res does not know it."""
    v = version_key(version)
    if v is None:
        return None
    ranges = [(version_key(a), version_key(b), m) for a, b, m in CODEX_DEFAULT_MODELS]
    for lo, hi, model in ranges:
        if lo <= v <= hi:
            return model
    for (_, hi, model), (lo, _, after) in zip(ranges, ranges[1:]):
        if hi < v < lo and model == after:
            return model
    return None


class CodexCall(NamedTuple):
    """What a `codex …` command line says about its session. (A NamedTuple, not a dataclass: the
    command line imports this module, and dataclasses costs it ~7 ms of imports, inspect with it.)"""

    index: int  # where the codex program is in the command
    model: str | None = None  # -m / --model
    config_model: str | None = None  # the last -c model=…
    config_profile: str | None = None  # the last -c profile=… (legacy)
    profile: str | None = None  # --profile / -p
    cd: str | None = None  # -C / --cd
    subcommand: str | None = None  # exec, resume, fork, review, … (`codex exec resume`: resume)
    session: str | None = None  # the thread resumed or forked
    last: bool = False  # resume --last
    all_dirs: bool = False  # resume --all
    ephemeral: bool = False
    ignore_user_config: bool = False
    trust: bool = False  # --trust: the project is trusted for this run
    oss: bool = False  # --oss: a local model provider


# Options of `codex` / `codex exec` that take a value (the next argument, or joined with `=`).
_CODEX_VALUED = {"-c", "--config", "-m", "--model", "-p", "--profile", "-s", "--sandbox", "-a",
                 "--ask-for-approval", "-C", "--cd", "-i", "--image", "--add-dir", "--output-schema",
                 "--color", "-o", "--output-last-message", "--enable", "--disable", "--local-provider",
                 "--remote", "--remote-auth-token-env", "--thread-source", "--cyber-access-program"}


def codex_program_index(cmd: list[str]) -> int | None:
    """Where the Codex CLI is in a command (`codex …`, `/path/codex.js …`, `node …/codex.js …`,
    `npx @openai/codex …`); None for a command that is no Codex session res can read."""
    programs = CLIS["codex"].programs  # (its module imported only when a command is looked at)
    for i, arg in enumerate(cmd[:4]):
        base = posixpath.basename(arg)
        if base in programs or re.fullmatch(r"@openai/codex(@[\w.+-]+)?", arg):
            return i
    return None


# Codex's switches that change where the model or the thread comes from, and the CodexCall field each sets.
_CODEX_SWITCHES = {"--last": "last", "--all": "all_dirs", "--ephemeral": "ephemeral",
                   "--ignore-user-config": "ignore_user_config", "--trust": "trust", "--oss": "oss"}


def codex_call(cmd: list[str]) -> CodexCall | None:
    """The session a Codex command line asks for (None: not a Codex command)."""
    start = codex_program_index(cmd)
    if start is None:
        return None
    got: dict[str, Any] = {"index": start}
    positionals: list[str] = []
    args = cmd[start + 1:]
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            positionals.extend(args[i:])
            break
        if not arg.startswith("-") or arg == "-":
            positionals.append(arg)
            continue
        name, value = arg, None
        if arg.startswith("--") and "=" in arg:
            name, value = arg.split("=", 1)
        elif not arg.startswith("--") and len(arg) > 2 and arg[:2] in _CODEX_VALUED:
            name, value = arg[:2], arg[2:]  # -mgpt-5, -cmodel=x
        if name in _CODEX_VALUED and value is None:
            if i >= len(args):
                break
            value = args[i]
            i += 1
        if name in ("-m", "--model"):
            got["model"] = value
        elif name in ("-c", "--config") and value is not None:
            key, eq, raw = value.partition("=")
            key = key.strip().strip('"')
            if eq and key == "model":
                got["config_model"] = toml_value(raw)
            elif eq and key == "profile":
                got["config_profile"] = toml_value(raw)
        elif name in ("-p", "--profile"):
            got["profile"] = value
        elif name in ("-C", "--cd"):
            got["cd"] = value
        elif name in _CODEX_SWITCHES:
            got[_CODEX_SWITCHES[name]] = True
    words = list(positionals)
    if words and words[0] in ("exec", "e"):
        words = words[1:]
        got["subcommand"] = "exec"
    if words and words[0] in ("resume", "fork", "review"):
        got["subcommand"] = words[0]
        if words[0] in ("resume", "fork") and len(words) > 1 and not got.get("last"):
            got["session"] = words[1]
    elif positionals and "subcommand" not in got:
        got["subcommand"] = positionals[0] if positionals[0] in ("exec", "e") else None
    return CodexCall(**got)


def toml_value(raw: str) -> Any:
    """A `-c key=value` value as Codex reads it: TOML, else the text itself."""
    import tomllib

    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except (tomllib.TOMLDecodeError, ValueError, RecursionError):
        return raw.strip()


def _model_of(table: Any) -> str | None:
    m = table.get("model") if isinstance(table, dict) else None
    return m if isinstance(m, str) and MODEL_ID.match(m) else None


def codex_model(call: CodexCall, version: str | None, user: dict | None, profile: dict | None = None,
                project: dict | None = None) -> tuple[str | None, str]:
    """(the model a Codex session runs, where that comes from): from its command line (`call`), the
    user's config.toml (`user`, None when not read), the profile file of `--profile` (`profile`), a
    trusted project's .codex/config.toml (`project`) and the CLI's release (`version`). The model is
    None where nothing says it (then `where` says why, for the note beside a spend priced at the
    dearest rates)."""
    if call.model:
        return _checked(call.model, "-m")
    v = version_key(version)
    legacy_ok = v is None or v <= version_key(CODEX_LEGACY_PROFILES_UNTIL)
    user = user or {}
    name = call.profile or (call.config_profile if isinstance(call.config_profile, str) else None)
    if name is None and isinstance(user.get("profile"), str):
        name = user["profile"]
    if legacy_ok and name:
        legacy = user.get("profiles")
        m = _model_of(legacy.get(name)) if isinstance(legacy, dict) else None
        if m:
            return m, f"[profiles.{name}] in config.toml"
    if isinstance(call.config_model, str) and call.config_model:
        return _checked(call.config_model, "-c model=")
    m = _model_of(project)
    if m:
        return m, "the project's .codex/config.toml"
    files_ok = v is None or v >= version_key(CODEX_PROFILE_FILES_FROM)
    if files_ok and call.profile:
        m = _model_of(profile)
        if m:
            return m, f"profile {call.profile} ({call.profile}.config.toml)"
    m = _model_of(user)
    if m:
        return m, "config.toml"
    if call.oss:
        return None, "codex --oss: a local model provider"
    default = codex_default_model(version)
    if default:
        return default, f"codex {version}'s default"
    if version is None:
        return None, "no model named, and the Codex CLI's version is not known (give -m)"
    return None, f"no model named, and codex {version}'s default model is not known to res (give -m)"


def _checked(model: str, where: str) -> tuple[str | None, str]:
    model = model.strip()
    if MODEL_ID.match(model):
        return model, where
    return None, f"{where} names no model id res can price ({model[:40]!r})"
