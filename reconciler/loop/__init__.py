"""The pass and the loop around it: `tick` (lock → desired → observed → plan → apply → publish),
`serve` (the APScheduler loop, its socket and what wakes it), `world` (the World a pass reads, assembled
from the machine's readings and the runtime's answers), the socket's protocol (`protocol`: each request
and answer as a record, used by both the client a CLI call talks to a loop with and the loop), the
loop's handler of each request (`answers`), and the loop's answers to `res wait`. May import the floors
below it (the table in tests/pure/test_layers.py): ops, apply, runtime, desired, observed, recorded,
render, config and the core; only the floors above it (commands, cli, entry) import it."""
