"""The agent kinds whose output res reads (`res run --agent KIND`). Import-free: the command line
checks `--agent` against it without loading the digests."""

AGENTS = ("none", "claude")  # none: a plain command, the exit code decides
