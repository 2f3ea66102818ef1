"""`res` as bench/crowd.py runs it: the real command line (`res serve`, `res run --wait --queue …`), with
its view of the machine's memory pinned to the simulated workstation, so that its admission budget
is the container's W GB and never the host's MemAvailable:

    MemTotal     = W                                   (CROWD_RES_MEM_GB)
    MemAvailable = W − (in use − reclaimable cache)    of the container's cgroup (CROWD_RES_CGROUP,
                                                       a directory under /sys/fs/cgroup)

which is what /proc/meminfo says on a machine of W GB running only the container's work. Everything
else (the policy, the planner, the units, the loop) is res's own, unpatched."""
import importlib.abc
import importlib.util
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

W_GB = float(os.environ["CROWD_RES_MEM_GB"])
CG = Path(os.environ["CROWD_RES_CGROUP"])
GIB = 1 << 30


def _used_bytes() -> int:
    try:
        if (CG / "memory.usage_in_bytes").exists():  # cgroup v1
            used = int((CG / "memory.usage_in_bytes").read_text())
            keys = ("total_cache", "total_shmem")
        else:
            used = int((CG / "memory.current").read_text())
            keys = ("file", "shmem")
        stat = dict(line.split() for line in (CG / "memory.stat").read_text().splitlines())
        return used - (int(stat.get(keys[0], 0)) - int(stat.get(keys[1], 0)))
    except (OSError, ValueError):
        return 0  # the container not made yet: nothing in it


def meminfo() -> tuple[float, float]:
    return W_GB, max(0.0, W_GB - _used_bytes() / GIB)


class _PinMemory(importlib.abc.MetaPathFinder):
    """Patches reconciler.observed.machine.meminfo as that module is first imported (the loop's tick
    imports meminfo from there at call time), and only then: `res run`, the agents' hot path, never
    imports it, and must not pay for it here either (it pulls in pydantic: ~0.3 s a call)."""

    def find_spec(self, name, path, target=None):
        if name != "reconciler.observed.machine":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.meminfo = meminfo

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PinMemory())

from reconciler.entry import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
