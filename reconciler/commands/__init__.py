"""One module per group of CLI commands (run/note/release/wait, reconcile/observe, hist/game/clean,
adopt, doctor, service, hook): each reads its arguments, calls the operation (reconciler/ops, the loop
through its client, or the shell below) and returns or prints a line and an exit code.
`reconciler/cli.py` parses the command line and dispatches here; `res hook` is dispatched by
`reconciler/entry.py` before anything else is imported. May import the floors below it
(the table in tests/pure/test_layers.py): the loop, ops, apply, runtime, desired, observed, recorded,
render, config and the core."""
