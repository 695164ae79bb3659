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


def seed_interval(values: object) -> tuple[float | None, list[float] | None]:
    """(mean, 95 % interval) over seeds, rounded to 4 places: t over the per-seed values
    (``analysis.uncertainty.half_width``, no test-set term), and no interval below its
    three seeds; NaN values are dropped."""
    import numpy as np

    from analysis.uncertainty import half_width

    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if not len(v):
        return None, None
    mean = float(v.mean())
    half = float(half_width(v.std(ddof=1) if len(v) > 1 else 0.0, len(v), 0.0))
    ci = None if np.isnan(half) else [round(mean - half, 4), round(mean + half, 4)]
    return round(mean, 4), ci


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
