"""Every line a person or an agent reads: busy, lock and queued lines, plan lines, status warnings, and
the text of unit files (jinja2 templates). Pure like the core (no I/O beyond reading the shipped
templates); it may import the floors below it (the table in tests/pure/test_layers.py): config (the
shipped files) and the core, never the shell above it."""
