"""What a job takes from its caller: the environment it may see, and the program its shell would run.
Import-light (used by `res run`)."""
from __future__ import annotations

import os
import re

# Never written anywhere res writes (queue.toml, state.db, a unit's properties): a name that says it
# holds a secret, or a value that looks like one (docs/decisions.md: secrets). A job still gets the
# secrets of the user manager's own environment, and credentials kept in files (README: secrets).
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|SIGNING_?KEY"
    r"|PASS$|(^|_)PAT$|(^|_)AUTH(_|$)|WEBHOOK|COOKIE|(^|_)DSN$|_KEY$|^KEY$|SESSION_?ID|(^|_)OTP(_|$)",
    re.IGNORECASE)
# Paths, and agent sessions' ids (names a transcript on this machine, no credential), not secrets.
NOT_SECRET = frozenset({"SSH_AUTH_SOCK", "GPG_AGENT_INFO", "XAUTHORITY", "KRB5CCNAME", "CLAUDE_CODE_SESSION_ID",
                        "CODEX_THREAD_ID"})
# Values that are secrets whatever their name: a URL with a password in it, and the shapes of the
# common API keys and tokens (Anthropic, OpenAI, GitHub, GitLab, Slack, AWS, Google, Stripe, npm,
# Hugging Face, JWTs, PEM private keys).
SECRET_VALUE = re.compile(
    r"^[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@"
    r"|\b(sk-ant-|sk-proj-|sk-[A-Za-z0-9]{20}|gh[pousr]_[A-Za-z0-9]{20}|github_pat_|glpat-|xox[abprs]-"
    r"|AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30}|sk_live_|rk_live_|npm_[A-Za-z0-9]{30}|hf_[A-Za-z0-9]{30})"
    r"|\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.|-----BEGIN [A-Z ]*PRIVATE KEY-----")


def is_secret(name: str, value: str) -> bool:
    if name in NOT_SECRET:
        return False
    return bool(SECRET_NAME.search(name) or SECRET_VALUE.search(value))


def public_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not is_secret(k, v)}


def caller_environment(env: dict[str, str], parent_env: dict[str, str] | None) -> dict[str, str]:
    """The environment of the shell that called `res`, from ours. When `res` is reached through pyenv
    (its shim, or `pyenv exec`), pyenv put its own directories first on PATH (its `libexec`, each
    plugin's `bin`, and the bin directory of the Python version it runs) and exported PYENV_*
    variables before running us: a `python3` would then resolve to pyenv's, not the caller's venv's.
    Take back only what pyenv itself put there: the leading run of pyenv's own directories, when it
    holds pyenv's `libexec` (which pyenv always adds; without it pyenv did not run us, and the PATH is
    the caller's however it looks), and PYENV_* names the caller (our parent, as it was started)
    did not have. A directory the parent's own PATH starts with was the caller's, not pyenv's."""
    root = env.get("PYENV_ROOT")
    if not root:
        return env
    root = os.path.normpath(root)
    # pyenv exports where it is installed: a packaged pyenv (Homebrew) is not under PYENV_ROOT.
    prefix = os.path.normpath(env.get("_PYENV_INSTALL_PREFIX") or root)
    libexec = os.path.join(prefix, "libexec")
    plugins = {os.path.join(prefix, "plugins"), os.path.join(root, "plugins")}
    versions = os.path.join(root, "versions")

    def pyenvs_own(entry: str) -> bool:
        if not entry:
            return False
        entry = os.path.normpath(entry)
        parent, leaf = os.path.split(entry)
        return entry == libexec or (leaf == "bin" and os.path.dirname(parent) in (*plugins, versions))

    entries = [os.path.normpath(e) if e else e for e in env.get("PATH", "").split(os.pathsep)]
    run = 0
    while run < len(entries) - 1 and pyenvs_own(entries[run]):
        run += 1
    if libexec not in entries[:run]:
        return env
    take = run
    if parent_env is not None:
        theirs = [os.path.normpath(e) if e else e for e in parent_env.get("PATH", "").split(os.pathsep)]
        own = []
        for e in theirs:
            if not pyenvs_own(e):
                break
            own.append(e)
        # The caller's PATH began with pyenv's directories itself (started under `pyenv exec`): those
        # are the caller's; pyenv's own additions end where they begin.
        if own:
            take = next((k for k in range(run + 1) if entries[k:k + len(own)] == own), run)
    out = dict(env)
    if take:
        out["PATH"] = os.pathsep.join(env["PATH"].split(os.pathsep)[take:])
    if parent_env is not None:
        for name in list(out):
            if name.lstrip("_").startswith("PYENV_") and name not in parent_env and name != "PYENV_ROOT":
                del out[name]
    return out


def resolve_program(program: str, cwd: str, search_path: str) -> str | None:
    """The absolute path of the program the caller's shell would run for argv[0] (`./x` against the
    caller's directory, a bare name on the caller's PATH), or None if there is none. systemd would
    otherwise look a bare name up on its own PATH and run another program (a venv's python3 is not
    systemd's)."""
    def runnable(path: str) -> bool:
        return os.path.isfile(path) and os.access(path, os.X_OK)

    if "/" in program:
        full = os.path.normpath(os.path.join(cwd, program))
        return full if runnable(full) else None
    for d in search_path.split(os.pathsep):
        # An empty entry means the current directory, as in the shell.
        full = os.path.normpath(os.path.join(cwd, d or ".", program))
        if runnable(full):
            return full
    return None
