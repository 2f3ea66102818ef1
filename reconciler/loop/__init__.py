"""The pass and the loop around it: `tick` (lock → desired → observed → plan → apply → publish),
`serve` (the APScheduler loop, its socket and what wakes it), the client a CLI call uses to talk to a
loop, and the loop's answers to `res wait`. May import everything below it; nothing imports it but
commands and cli."""
