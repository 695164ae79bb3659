"""``python -m benchmarks.vectorized``: a vectorized pack against unstacked runs and a loop.

For K = 4, 16, 64 trainings of one shape (seeds 0..K-1) at VFLAIR's settings (MLP-2,
batch 1024, Adam, ``--epochs`` 50) on breast_cancer and digits, the seconds to train
and record the pack (no attacks), medians over ``--repeats``, all in this process:

- ``vectorized_s``: ``NNKind.run_many`` on warm Ray actors (one per party, 0.5 CPU
  each), stacked (``vfl/vectorized.py``);
- ``unstacked_s``: the same call with ``vectorize`` off: one training after another, each
  a stack of one, on the same warm actors (party objects before 2026-12-03, lockstep
  packs before that);
- ``loop_s``: ``NNKind.run`` per training in this process (``transport: local``), the
  plain loop;
- ``local_vectorized_s``: the stacked pack in this process.

Each repeat checks that the stacked MPs equal the unstacked ones (``mp_equal``). Ratios
are of medians from the same run. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import torch

from trainables.data import load_dataset
from trainables.jobs import Job
from trainables.kinds.nn import NNKind
from trainables.schedule import ONE_BY_ONE, STACKED, Schedule
from trainables.spec import TrialSpec
from trainables.transport.placement import LOCAL, Placement

WARM = Placement("ray", cpu_per_party=0.5, reuse_actors=True)


def _jobs(dataset: str, k: int, epochs: int) -> list[Job]:
    return [Job(TrialSpec.build(dataset=dataset, epochs=epochs, seed=s)) for s in range(k)]


def _timed(
    jobs: list[Job], ds: Any, placement: Placement, schedule: Schedule = STACKED
) -> tuple[float, list[float]]:
    start = time.perf_counter()
    got = dict(NNKind().run_many(jobs, ds, placement, schedule))
    seconds = time.perf_counter() - start
    return seconds, [got[i][0].mp for i in range(len(jobs))]  # type: ignore[index,union-attr]


def _loop(jobs: list[Job], ds: Any) -> float:
    start = time.perf_counter()
    for job in jobs:
        NNKind().run(job.spec, ds, LOCAL, ())
    return time.perf_counter() - start


def measure(dataset: str, k: int, epochs: int, repeats: int) -> dict[str, Any]:
    ds = load_dataset(dataset)
    jobs = _jobs(dataset, k, epochs)
    runs: dict[str, list[float]] = {}
    equal = True
    for _ in range(repeats):
        vec, mp_vec = _timed(jobs, ds, WARM)
        alone, mp_alone = _timed(jobs, ds, WARM, ONE_BY_ONE)
        local, _ = _timed(jobs, ds, LOCAL)
        equal = equal and mp_vec == mp_alone
        runs.setdefault("vectorized_s", []).append(vec)
        runs.setdefault("unstacked_s", []).append(alone)
        runs.setdefault("local_vectorized_s", []).append(local)
        runs.setdefault("loop_s", []).append(_loop(jobs, ds))
    med = {key: statistics.median(v) for key, v in runs.items()}
    return {
        "dataset": dataset,
        "k": k,
        **{key: round(v, 3) for key, v in med.items()},
        "speedup_over_unstacked": round(med["unstacked_s"] / med["vectorized_s"], 2),
        "speedup_over_loop": round(med["loop_s"] / med["vectorized_s"], 2),
        "local_speedup_over_loop": round(med["loop_s"] / med["local_vectorized_s"], 2),
        "mp_equal": equal,
        "runs": {key: [round(x, 3) for x in v] for key, v in runs.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", default="breast_cancer,digits")
    parser.add_argument("--ks", default="4,16,64")
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    torch.set_num_threads(1)  # as in every party actor
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    warm = _jobs("breast_cancer", 2, 1)  # start the actors and warm torch everywhere
    _timed(warm, load_dataset("breast_cancer"), WARM)
    _timed(warm, load_dataset("breast_cancer"), LOCAL)
    results = [
        measure(dataset, int(k), args.epochs, args.repeats)
        for dataset in args.datasets.split(",")
        for k in args.ks.split(",")
    ]
    ray.shutdown()
    print(json.dumps({"epochs": args.epochs, "repeats": args.repeats, "results": results}))


if __name__ == "__main__":
    main()
