"""The crowd benchmark (`python3 bench/crowd.py`, docs/crowd.md): N coding agents share one simulated
workstation under each arm, on the same seeded workload, back to back.

    machine.py    the simulated workstation (a slice of W GB), res-overflow's Slurm cluster, the owner's
                  probe, and the cleanup of everything a run starts (STARTED)
    workload.py   the real test suites, the mixes, each agent's seeded jobs, the lower bound
    arms.py       how each arm runs one job attempt (free-for-all, slots, cgroup-only, the res arms)
    cli_arm.py    the res-cli arm: the agents as real agent CLI sessions (tests/agentcli's harness)
    measures.py   an attempt, the sampler, every figure of an arm's row (Timeline)
    armrun.py     one arm's run (ArmRun): its container, its agents' threads, its row
    report.py     the table and the lines under it
    plot.py       the picture (--plot; matplotlib)
    main.py       bench/crowd.py's command line
    sweep.py      bench/crowd_sweep.py: the sweep that chooses res's margin and cpu_overcommit

Who imports whom, top down and never up: main and sweep → armrun → arms, measures → workload →
machine; report → arms, measures, workload; cli_arm → arms, machine (imported by armrun and report only
when the res-cli arm runs); plot imports nothing of these. The processes the harness starts stay in
bench/ as scripts run by their paths: crowd_job.py (every job, the probe, the cap check) and
crowd_res.py (res with its view of memory pinned to the container); their names are in the jobs'
command lines. bench/ is on sys.path (the entry points put it there), for bench/common.py."""
