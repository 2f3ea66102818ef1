"""One agent of benchmark c through the loop: `python3 loop_worker.py SOCKET COUNT NAME`.

Imports first, says `ready`, waits for one byte on stdin (the start signal, sent to all agents at
once), then sends COUNT `res run --queue` requests to the running `res serve` over its socket, one
after another as an agent does, each answered only once the loop has written it and decided it. Prints
one JSON line: the ids it was given, the time each request took, its start and end on CLOCK_MONOTONIC,
and any error (an answer other than "queued", or none)."""
import json
import sys
import time
from pathlib import Path

from reconciler.loop.client import ask

sock, count, name = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/home/agent", "TERM": "xterm-256color"}
print("ready", flush=True)
sys.stdin.buffer.read(1)

ids, each, error = [], [], None
start = time.monotonic()
for i in range(count):
    fields = dict(title=f"{name} request {i}", project="bench", mem_gb=0.5 + (i % 8) * 0.5, cpus=1.0,
                  est_s=600, created=time.time(), queue=True, lock="bench-c", cmd=["/bin/true", f"target-{i}"],
                  cwd="/tmp", env=env)
    t0 = time.perf_counter()
    try:
        answer = ask(sock, {"op": "submit", "kind": "job", "fields": fields, "who": name}, 120)
    except Exception as e:  # noqa: BLE001 - reported as the bench's failure
        error = f"{type(e).__name__}: {e}"
        break
    each.append(time.perf_counter() - t0)
    data = answer.get("data") or {}
    if answer.get("code") != 0 or data.get("state") != "queued":
        error = f"not queued: {answer.get('line')}"
        break
    ids.append(data["id"])
end = time.monotonic()
print(json.dumps({"ids": ids, "each": each, "start": start, "end": end, "error": error}), flush=True)
