"""Reproducible speed and quality measurements.

Each ``python -m benchmarks.<name>`` prints one JSON object.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_space(space: str, results: Path) -> float:
    """``sweep.py --space space --results results --no-mlflow`` from the checkout, resuming
    (trainings already recorded there are not run again); its wall seconds."""
    start = time.perf_counter()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [sys.executable, "sweep.py", "--space", space, "--results", str(results)]
    done = subprocess.run([*cmd, "--no-mlflow"], cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:  # the sweep's own error (a missing dataset, a bad space) says why
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"benchmark: {' '.join(cmd)} exited {done.returncode}")
    return time.perf_counter() - start
