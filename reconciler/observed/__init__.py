"""The observed world, read fresh each pass and never written: /proc (processes, their start times and
owners), cgroup files (memory in use, pressure, peaks), and the assembly of the `World` a plan reads
from those and from the runtime. May import the core, config and runtime."""
