"""One agent of benchmark c: `python3 crowd_worker.py writer STATE_DIR COUNT NAME` adds through the
desired Writer (its file lock, no loop); `python3 crowd_worker.py loop SOCKET COUNT NAME` sends `res
run --queue` requests to a running `res serve`, one after another as an agent does, each answered
only once the loop has written and decided it (all on lock `bench-c@/res-bench`, scoped by hand: the crowd and its holder have different cwds).

Imports everything first, says `ready`, waits for one byte on stdin (the start signal, sent to all
agents at once), then makes COUNT requests and prints one JSON line: the ids it was given, the time
each request took, its start and end on CLOCK_MONOTONIC (shared by all processes), and any error
(for the loop: also an answer other than "queued")."""
import json
import sys
import time
from pathlib import Path

mode, target, count, name = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if mode == "writer":
    from reconciler.core.models import Request  # noqa: F401  (imported now, not inside the first add)
    from reconciler.config.paths import Paths
    from reconciler.desired.reader import DesiredError
    from reconciler.desired.writer import Writer

    writer = Writer(Paths(target))

    def request(fields: dict) -> str:
        return writer.add(fields, "job").id
else:
    from reconciler.loop.client import ask

    class DesiredError(Exception):
        pass

    def request(fields: dict) -> str:
        answer = ask(target, {"op": "submit", "kind": "job", "fields": dict(fields, lock="bench-c@/res-bench"), "who": name}, 120)
        data = answer.get("data") or {}
        if answer.get("code") != 0 or data.get("state") != "queued":
            raise DesiredError(f"not queued: {answer.get('line')}")
        return data["id"]

env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/home/agent", "TERM": "xterm-256color"}
print("ready", flush=True)
sys.stdin.buffer.read(1)

ids, each, error = [], [], None
start = time.monotonic()
for i in range(count):
    fields = dict(title=f"{name} request {i}", project="bench", mem_gb=0.5 + (i % 8) * 0.5, cpus=1.0,
                  est_s=600, created=time.time(), queue=True, cmd=["/bin/true", f"target-{i}"], cwd="/tmp",
                  env=env)
    t0 = time.perf_counter()
    try:
        ids.append(request(fields))
    except DesiredError as e:
        error = str(e)
        break
    except Exception as e:  # noqa: BLE001 - the loop unreachable: reported as the bench's failure
        error = f"{type(e).__name__}: {e}"
        break
    each.append(time.perf_counter() - t0)
end = time.monotonic()
print(json.dumps({"ids": ids, "each": each, "start": start, "end": end, "error": error}), flush=True)
