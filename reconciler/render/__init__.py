"""Every line a person or an agent reads: busy, lock and queued lines, plan lines, status warnings, and
the text of unit files (jinja2 templates). Pure like the core (no I/O beyond reading the shipped
templates); it may import the core, never the shell."""
