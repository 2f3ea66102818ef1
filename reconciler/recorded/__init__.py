"""Recorded state: state.db (SQLite, WAL), written only by the reconciler that runs the pass. Job
records, history, changes and meta, each write a compare-and-set where a lease is involved. May import
the floors below it (the table in tests/pure/test_layers.py): config and the core."""
