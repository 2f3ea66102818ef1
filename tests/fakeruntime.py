"""An in-memory runtime that implements the Runtime protocol (reconciler/runtime/__init__.py) and runs
nothing: a test says when a job ends and how. With it the planner and the executor run whole passes
without systemd (tests/files/test_executor_fake.py); it is the seam a second runtime plugs into.
Hand-built, as a fake: no real sample of a runtime's behaviour is involved."""
from __future__ import annotations

import itertools
import time

from reconciler.core.models import ExitObs, JobObs, copy
from reconciler.runtime import JobSpec, RuntimeUnavailable


class FakeRuntime:
    name = "fake"
    address: str | None = None  # talks to nothing

    def __init__(self, reachable: bool = True):
        self.reachable = reachable
        self.units: dict[str, JobObs] = {}
        self.invocations: dict[str, str] = {}
        self.specs: list[JobSpec] = []  # every start asked for, in order
        self.stopped: list[str] = []
        self.forgotten: list[str] = []
        self.refuse_start: str | None = None  # the next start fails with this error
        self._watch = None
        self._ids = itertools.count(1)

    async def connect(self) -> None:
        if not self.reachable:
            raise RuntimeUnavailable("the fake runtime is unreachable")

    async def close(self) -> None:
        pass

    def unit_name(self, job_id: str) -> str:
        return f"fake-{job_id}"

    async def start(self, spec: JobSpec) -> str | None:
        obs = self.units.get(spec.job_id)
        if obs is not None and obs.state == "active":
            return self.invocations[spec.job_id]  # idempotent: the name is the key
        if self.refuse_start:
            error, self.refuse_start = self.refuse_start, None
            raise RuntimeError(error)
        self.specs.append(spec)
        self.invocations[spec.job_id] = f"inv-{next(self._ids)}"
        self.units[spec.job_id] = JobObs(state="active", mem_used_gb=0.1)
        return self.invocations[spec.job_id]

    async def stop(self, job_id: str, kill: bool = False) -> None:
        self.stopped.append(job_id)
        if job_id in self.units and self.units[job_id].state == "active":
            self.end(job_id, code="killed", status="KILL" if kill else "TERM")

    async def observe(self, job_ids: list[str]) -> dict[str, JobObs]:
        if not self.reachable:
            raise RuntimeUnavailable("the fake runtime is unreachable")
        out = {i: copy(o) for i, o in self.units.items()}
        for i in job_ids:
            out.setdefault(i, JobObs(state="absent"))
        return out

    async def forget(self, job_id: str) -> None:
        self.forgotten.append(job_id)
        self.units.pop(job_id, None)

    async def watch(self, callback) -> None:
        self._watch = callback

    def user_side(self):
        return None  # no slices, scopes or unit files: a cluster-like runtime

    # -------------------------------------------------------------- what a test does

    def end(self, job_id: str, rc: int = 0, code: str = "exited", status: str | None = None, oom: bool = False) -> None:
        """The job's unit ends and its exit record is there, as systemd's ExecStopPost would write it."""
        status = status if status is not None else str(rc)
        result = "oom-kill" if oom else "success" if code == "exited" and rc == 0 else "exit-code" if code == "exited" else "signal"
        self.units[job_id] = JobObs(state="inactive", exit=ExitObs(result=result, code=code, status=status, at=time.time(),
                                                                   peak_gb=0.25, invocation=self.invocations.get(job_id)))
        if self._watch is not None:
            self._watch(job_id, "inactive")


def fake_engine(tmp_path, monkeypatch):
    """A loop's Engine on a FakeRuntime, over real files in `tmp_path`, with the shipped policy and no
    reserve or headroom (so small test jobs always fit); yields (engine, runtime), closed after. For
    a pytest fixture: `yield from fake_engine(tmp_path, monkeypatch)`."""
    import asyncio

    from reconciler.config.paths import Paths
    from reconciler.config.policy import load_policy
    from reconciler.loop.tick import Engine

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # no user policy: the shipped one
    monkeypatch.setenv("RES_USER_RESERVE_GB", "0")
    monkeypatch.setenv("RES_SMALL_HEADROOM_GB", "0")
    monkeypatch.setenv("RES_USER_RESERVE_CPUS", "0")
    runtime = FakeRuntime()
    e = Engine(Paths(tmp_path / "state"), load_policy(), runtime=runtime)
    try:
        yield e, runtime
    finally:
        asyncio.run(e.close())
