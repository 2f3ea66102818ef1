"""Which of the caller's environment a job may see. Import-light (used by `res run`)."""
from __future__ import annotations

import re

# Never passed to a job or written to the desired files (DESIGN §6).
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)


def public_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not SECRET_NAME.search(k)}
