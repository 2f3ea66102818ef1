"""The pass and the loop around it: `tick` (lock → desired → observed → plan → apply → publish),
`serve` (the APScheduler loop, its socket and what wakes it), `world` (the World a pass reads, assembled
from the machine's readings and the runtime's answers), the client a CLI call uses to talk to a loop,
and the loop's answers to `res wait`. May import the floors below it (the table in
tests/pure/test_layers.py): ops, apply, runtime, desired, observed, recorded, render, config and the
core; only the floors above it (commands, cli, entry) import it."""
