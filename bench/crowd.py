"""A crowded workstation, side by side (issue 23, DESIGN §10): what res is worth against what people
use instead.

    python3 bench/crowd.py [--mix cpu|memory|mixed] [--agents N] [--arms a,b,…] [--mem-gb W]
                           [--cluster-gb A,B,C] [--seed S] [--smoke] [--json FILE] [--plot FILE.png]
    python3 bench/crowd.py --replot RUN.json --plot FILE.png      (draw a saved run again)

N agents (default 8) each run their own seeded list of jobs one after another, as coding agents do:
real test suites of small real projects (installed from PyPI into a venv at set-up, suites listed in
crowdkit/workload.py's TESTS), builds (a process that ramps to 1.2–1.6 GB and burns CPU) and end-to-end
runs (2.2–2.8 GB, longer; mostly asleep in the memory mix). Every job knows its true peak and its time alone. An
OOM-killed attempt (SIGKILL: rc 137) is retried by its agent up to twice, then the job is failed.

The machine, the workload, the arms, what is measured and the report are the modules of bench/crowdkit/
(its __init__ says which is which); docs/crowd.md has the figures. Needs a systemd user manager
(DBUS_SESSION_BUS_ADDRESS). Everything started here is stopped by pid or by its unique unit names,
and its units, slices and state removed at the end, even on Ctrl-C.
"""
import sys

from crowdkit.main import main

if __name__ == "__main__":
    sys.exit(main())
