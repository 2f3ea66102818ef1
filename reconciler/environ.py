"""What a job takes from its caller: the environment it may see, and the program its shell would run.
Import-light (used by `res run`)."""
from __future__ import annotations

import os
import re

# Never passed to a job or written to the desired files (DESIGN §6).
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)


def public_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not SECRET_NAME.search(k)}


def caller_environment(env: dict[str, str], exe_dir: str, parent_env: dict[str, str] | None) -> dict[str, str]:
    """The environment of the shell that called `res`, from ours. When `res` is a pyenv shim, pyenv
    put its own directories first on PATH (`libexec`, each plugin's `bin`, and, by `pyenv exec`, the
    bin directory of the Python this res runs on) and exported PYENV_* variables before running us: a
    `python3` would then resolve to pyenv's, not the caller's venv's. Take back what pyenv added:
    those leading PATH entries, and PYENV_* names the caller (our parent, as it was started) did not
    have."""
    root = env.get("PYENV_ROOT")
    if not root:
        return env
    root = os.path.normpath(root)
    added = {os.path.normpath(exe_dir), os.path.join(root, "libexec")}

    def pyenvs_own(entry: str) -> bool:
        entry = os.path.normpath(entry)
        parent, leaf = os.path.split(entry)
        return entry in added or (leaf == "bin" and os.path.dirname(parent) == os.path.join(root, "plugins"))

    out = dict(env)
    entries = env.get("PATH", "").split(os.pathsep)
    lead = 0
    while lead < len(entries) - 1 and entries[lead] and pyenvs_own(entries[lead]):
        lead += 1
    if lead and os.path.normpath(entries[0]) == os.path.normpath(exe_dir) or lead and any(
            os.path.normpath(e) == os.path.join(root, "libexec") for e in entries[:lead]):
        out["PATH"] = os.pathsep.join(entries[lead:])
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
