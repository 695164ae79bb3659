"""``python -m benchmarks.sweep_throughput``: a sweep on Ray vs the same trainings in a loop.

Workload (compute-bound): ``synthetic`` 20,000 rows x 200 features, 2 parties, MLP-2 with
512 hidden units, FedBCD Q=5, 12 epochs, batch 256: 10-20 s per training sequentially
here. (a) ``sweep.py`` with a local Ray of ``--cpus`` CPUs (party actors get 0.5 CPU and
one torch thread each, so two trials run at once on 2 CPUs); (b) the same trainings one
after another in this process with the local transport and torch's default threads, as a
user would run them. The tiny workload (breast_cancer, 50 epochs) shows the fixed cost
per trial. Wall times include everything a user waits for (Ray start for the sweep).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from trainables.spec import TrialSpec
from trainables.trial import run_trial

ROOT = Path(__file__).resolve().parents[1]
HEAVY: dict[str, Any] = {
    "dataset": "synthetic",
    "dataset_params": {"n_samples": 20000, "n_features": 200, "n_informative": 20},
    "model": "mlp2",
    "hidden": [512],
    "protocol": "fedbcd",
    "protocol_params": {"q": 5},
    "epochs": 12,
    "batch_size": 256,
    "lr": 0.001,
}
TINY: dict[str, Any] = {"dataset": "breast_cancer", "epochs": 50}


def sequential(base: dict[str, Any], n: int) -> float:
    start = time.perf_counter()
    for seed in range(n):
        run_trial(TrialSpec.build(**base, seed=seed))
    return time.perf_counter() - start


def swept(base: dict[str, Any], n: int, cpus: int, name: str) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        space = Path(tmp) / f"{name}.yaml"
        space.write_text(
            yaml.safe_dump(
                {
                    "name": name,
                    "base": base,
                    "grid": {"seed": list(range(n))},
                    "resources": {"cpu_per_party": 0.5, "cpu_per_trial": 0},
                }
            )
        )
        cmd = [
            sys.executable,
            "sweep.py",
            "--space",
            str(space),
            "--results",
            tmp,
            "--num-cpus",
            str(cpus),
        ]
        start = time.perf_counter()
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - start
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-3000:])
        last = [line for line in out.stdout.splitlines() if line.startswith("done:")]
        return wall, last[-1] if last else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=12)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--skip-heavy", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    out: dict[str, Any] = {"n": args.n, "cpus": args.cpus, "heavy": HEAVY, "tiny": TINY}
    run_trial(TrialSpec.build(**{**TINY, "epochs": 1}))  # warm this process (imports, torch)
    if not args.skip_heavy:
        seq = sequential(HEAVY, args.n)
        sweep_wall, summary = swept(HEAVY, args.n, args.cpus, "throughput_heavy")
        out.update(
            sequential_s=round(seq, 2),
            sweep_s=round(sweep_wall, 2),
            sweep_over_sequential=round(sweep_wall / seq, 3),
            sequential_per_training_s=round(seq / args.n, 2),
            sweep_summary=summary,
        )
    seq_tiny = sequential(TINY, args.n)
    tiny_wall, tiny_summary = swept(TINY, args.n, args.cpus, "throughput_tiny")
    out.update(
        tiny_sequential_s=round(seq_tiny, 2),
        tiny_sweep_s=round(tiny_wall, 2),
        tiny_sweep_over_sequential=round(tiny_wall / seq_tiny, 3),
        tiny_sweep_per_training_s=round(tiny_wall / args.n, 2),
        tiny_sweep_summary=tiny_summary,
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
