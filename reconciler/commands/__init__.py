"""One module per group of CLI commands (run/note/release, status, hist/game/clean, adopt, doctor,
service, hook): each reads its arguments, calls the shell below and returns a line and an exit code.
`reconciler/cli.py` parses the command line and dispatches here; `res hook` is dispatched by
`reconciler/entry.py` before anything else is imported."""
