"""The sweep that chooses res's capacity numbers (DESIGN §5.1, issue 36): `margin` and `cpu_overcommit`,
measured on bench/crowd.py's crowd (crowdkit/sweep.py says how).

    python3 bench/crowd_sweep.py [--mixes cpu,memory,mixed] [--seeds 23,24,25]
                                 [--margins 1.0,1.1,1.25] [--overcommits 1,1.5,2,3] [--json FILE]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from crowdkit.sweep import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
