"""What a job takes from its caller: the environment it may see, and the program its shell would run.
Import-light (used by `res run`)."""
from __future__ import annotations

import os
import re

# Never passed to a job or written to the desired files (DESIGN §6).
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)


def public_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not SECRET_NAME.search(k)}


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
