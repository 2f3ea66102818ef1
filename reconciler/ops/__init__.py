"""The operations that both the loop and the command line call, so that neither reaches into the other:
requests (submit, release, the sizes `auto` takes, the lock a request takes, the request hint:
requests.py, the same code in `res serve` answering a call and in a call with no loop), `res clean`'s
operations (collect, select, sweep, reset-failed: clean.py), and status as data (an entry as `--json`
prints it, `res status`'s data and lines, what is wrong with queue.toml, the exit codes of `res wait`:
status.py). May import apply, runtime, desired, observed, recorded, render, config and the core; never
loop, commands or cli (they call it)."""
