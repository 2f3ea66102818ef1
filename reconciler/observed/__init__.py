"""The observed world, read fresh each pass and never written: /proc (processes, their start times and
owners), cgroup files (memory in use, pressure, peaks), and the machine's readings a pass's `World` is
made of (loop/world.py assembles it with the runtime's answers). May import the floors below it
(the table in tests/pure/test_layers.py): config and the core."""
