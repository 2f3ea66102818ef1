"""The agent kinds whose output res reads (`res run --agent KIND`). Import-free: the command line
checks `--agent` against it without loading the digests."""

AGENTS = ("none", "claude", "codex", "gemini")  # none: a plain command, the exit code decides


def model_from_command(cmd: list[str]) -> str | None:
    """The model an agent's command line asks for (`-m X`, `--model X`, `--model=X`), if it says:
    Codex's stream never names it, and Gemini's names an alias."""
    for i, arg in enumerate(cmd):
        if arg in ("-m", "--model") and i + 1 < len(cmd):
            return cmd[i + 1]
        if arg.startswith("--model="):
            return arg.split("=", 1)[1]
    return None
