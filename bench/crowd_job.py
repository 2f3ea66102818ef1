"""One job of bench/crowd.py (or its owner's probe), as a process of its own.

    crowd_job.py test  STAMP DIR PYTEST_ARGS...      a real test suite: `python -m pytest -q` in DIR
    crowd_job.py build STAMP PEAK_MB CPU_S           ramps to PEAK_MB over the first half of CPU_S
                                                     CPU-seconds of work, holds it, burns the rest
    crowd_job.py e2e   STAMP PEAK_MB HOLD_S DUTY     ramps to PEAK_MB, then holds it HOLD_S seconds
                                                     busy DUTY of the time (DUTY 1: HOLD_S CPU-seconds
                                                     of work, however long that takes), asleep the rest
    crowd_job.py alloc MB                            touches MB and says "survived" (the cap check)
    crowd_job.py probe MB PERIOD_S                   the owner's probe: every PERIOD_S allocates and
                                                     touches MB, prints the ms it took, until SIGTERM

STAMP: the job appends its start (CLOCK_MONOTONIC, shared by every process here) to that file first
thing, and its end last, so that the harness knows when it really ran, whoever started it (a scope, a
slot, res); STAMP.pid names its process, whose cgroup the harness samples for the job's memory. A test suite runs as a child of this process (its peak is measured on it alone)."""
import os
import signal
import sys
import time

MB = 1 << 20
PAGE = 4096


def stamp(path: str) -> None:
    if path != os.devnull and not os.path.exists(path + ".pid"):  # first thing: the harness samples this process's cgroup
        with open(path + ".pid", "w") as f:
            f.write(str(os.getpid()))
    with open(path, "a") as f:
        f.write(f"{time.monotonic():.6f}\n")


def touch(nbytes: int) -> bytearray:
    b = bytearray(nbytes)
    b[::PAGE] = b"\x01" * len(range(0, nbytes, PAGE))  # every page written: resident, charged
    return b


def burn_until(cpu_s: float) -> None:
    while time.process_time() < cpu_s:
        sum(range(20000))


def main() -> None:
    mode = sys.argv[1]
    if mode == "test":
        stamp(sys.argv[2])
        import subprocess

        rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *sys.argv[4:]],
                             cwd=sys.argv[3])
        stamp(sys.argv[2])
        sys.exit(rc if rc >= 0 else 128 - rc)  # killed (the OOM killer): 137, as a shell says
    if mode == "build":
        stamp(sys.argv[2])
        peak, cpu_s = int(sys.argv[3]), float(sys.argv[4])
        held, steps = [], 20
        for i in range(1, steps + 1):  # the ramp: compile units piling up
            held.append(touch(peak * MB // steps))
            burn_until(cpu_s * 0.5 * i / steps)
        burn_until(cpu_s)
        stamp(sys.argv[2])
        return
    if mode == "e2e":
        stamp(sys.argv[2])
        peak, hold_s, duty = int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
        held = [touch(peak * MB // 8) for _ in range(8)]  # the browser and the server come up
        if duty >= 1:
            burn_until(time.process_time() + hold_s)
            stamp(sys.argv[2])
            return
        end = time.monotonic() + hold_s
        while (now := time.monotonic()) < end:
            period = min(0.5, end - now)
            t0 = time.process_time()
            burn_until(t0 + period * duty)
            time.sleep(max(0.0, period - (time.process_time() - t0)))
        del held
        stamp(sys.argv[2])
        return
    if mode == "alloc":
        touch(int(sys.argv[2]) * MB)
        print("survived", flush=True)
        return
    if mode == "probe":
        size, period = int(sys.argv[2]) * MB, float(sys.argv[3])
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        nxt = time.monotonic()
        while True:
            t0 = time.perf_counter()
            b = touch(size)
            dt = time.perf_counter() - t0
            del b
            print(f"{time.monotonic():.3f} {dt * 1000:.3f}", flush=True)
            nxt += period
            time.sleep(max(0.0, nxt - time.monotonic()))
    raise SystemExit(f"crowd_job.py: unknown mode {mode!r}")


if __name__ == "__main__":
    main()
