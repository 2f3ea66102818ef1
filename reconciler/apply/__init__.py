"""Carrying out a plan: the executor (one state.db transaction per action, compare-and-set on the phase,
the runtime called after the record is written) and the streamer that holds attachments (reads each
running job's log from its committed offset into its digest). May import the floors below it
(the table in tests/pure/test_layers.py): runtime, desired, observed, recorded, render, config and the
core."""
