"""One writer process of benchmark c: `python3 writer_worker.py STATE_DIR COUNT NAME`.

Imports everything first, says `ready`, waits for one byte on stdin (the start signal, sent to all
writers at once), then adds COUNT jobs through the desired Writer and prints one JSON line: the ids it
was given, the time each add took, its start and end on CLOCK_MONOTONIC (shared by all processes), and
any error."""
import json
import sys
import time
from pathlib import Path

from reconciler.desired.reader import DesiredError
from reconciler.desired.writer import Writer
from reconciler.core.models import Request  # noqa: F401  (imported now, not inside the first add)
from reconciler.config.paths import Paths

state, count, name = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
writer = Writer(Paths(state))
env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/home/agent", "TERM": "xterm-256color"}
print("ready", flush=True)
sys.stdin.buffer.read(1)

ids, each, error = [], [], None
start = time.monotonic()
for i in range(count):
    fields = dict(title=f"{name} request {i}", project="bench", mem_gb=0.5 + (i % 8) * 0.5, cpus=1.0,
                  est_s=600, created=time.time(), queue=True, cmd=["make", f"target-{i}"], cwd="/tmp",
                  env=env)
    t0 = time.perf_counter()
    try:
        ids.append(writer.add(fields, "job").id)
    except DesiredError as e:
        error = str(e)
        break
    each.append(time.perf_counter() - t0)
end = time.monotonic()
print(json.dumps({"ids": ids, "each": each, "start": start, "end": end, "error": error}), flush=True)
