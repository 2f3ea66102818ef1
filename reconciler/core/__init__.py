"""The pure core: every rule of res (DESIGN §5) and nothing else.

The model (requests, job records, the observed world, actions), quantities (sizes, durations, money),
capacity and admission, the job lifecycle, the plan, when the next pass is due, game mode, sessions, history and its suggestions,
pricing and the agents' output digests. Modules here do no I/O and read no clock or time zone: all they
need comes in as arguments, so any decision can be replayed from literals (`res reconcile --dry-run
--world FILE`). They may import the standard library's pure parts and each other, nothing else of
res (the bottom floor of the table in tests/pure/test_layers.py); tests/pure/test_purity.py holds them
to it."""
