"""`res doctor` on the real user manager: one line per check (the decisions, from literal facts, are
tests/pure/test_doctor.py)."""
from __future__ import annotations

import re


from clihelp import res  # noqa: F401


def test_doctor_on_the_real_manager_prints_a_line_per_check(res):
    # No Slurm cluster configured here (the cluster tier may have put one in the environment): its
    # lines are tests/slurm's.
    r = res("doctor", env={"SLURM_CONF": str(res.tmp / "no-slurm.conf")})
    assert r.code in (0, 1), str(r)
    lines = r.out.splitlines()  # the report is the output, gaps or not
    gates = [ln for ln in lines if re.match(r"(ok   \w+: gated |note \w+ is on this machine and not gated)", ln)]
    lines = [ln for ln in lines if ln not in gates]  # the agent CLIs installed here (none in CI, some on a desktop)
    assert all(re.search(r"\(res hook in /|res hook install --agent \w+ \(writes /", ln) for ln in gates), gates
    assert len(lines) == 7 and r.err == "", str(r)
    for line in lines:
        assert re.match(r"^(ok   |fix  |note )\S", line), line
    assert lines[0].startswith("ok   systemd user manager reachable over D-Bus (systemd "), str(r)
    assert re.match(r"^(ok   cgroup v[12]|fix  no cgroup)", lines[1]), lines[1]
    assert "controllers" in lines[2] and "lingering" in lines[3] and "systemd-oomd" in lines[4]
    assert lines[5].startswith("ok   /tmp ")
    assert lines[6].startswith("ok   unit dir ") and lines[6].endswith("is in the user manager's search path"), lines[6]
    assert (r.code == 0) == (not any(line.startswith("fix") for line in lines))
