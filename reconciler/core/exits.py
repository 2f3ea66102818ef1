"""res's own exit codes (README: exit codes). `res wait` and `res run --wait` otherwise exit with the
job's own code (128+N when a signal killed it), like `systemd-run --wait`. A module of constants only,
so that the hot paths that return them import nothing else."""

EXIT_TIMEOUT = 124  # --timeout passed first (as timeout(1))
EXIT_NEVER_RAN = 125  # no exit code: refused, cancelled, the start failed, or the outcome was lost
