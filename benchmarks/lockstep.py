"""``python -m benchmarks.lockstep``: a pack of K tiny trainings, three ways, same run.

Trainings: breast_cancer, MLP-2, 2 parties, FedSGD, VFLAIR's batch (one round per
epoch), seeds 0..K-1. Per training wall (pack wall / K), medians of ``--repeats``:

- ``local_s``: ``NNKind.run`` in this process, one after another (the plain loop);
- ``warm_s``: ``NNKind.run`` on warm party actors, one after another (``run_many``'s
  default: what a pack costs without lockstep);
- ``lockstep_s``: ``run_lockstep`` on the same warm actors (one call per round for every
  ``GROUP_SIZE`` trainings); ``lockstep_g<n>_s``: the same with ``--group-sizes n``.

Every mode's records must agree (MP, rounds, bytes per training): checked, not assumed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import torch

from trainables.data import Dataset, load_dataset
from trainables.jobs import Job
from trainables.kinds.nn import NNKind
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.transport.placement import LOCAL, Placement
from trainables.transport.ray_actors import ensure_ray, release_warm_actors
from trainables.vfl.lockstep import GROUP_SIZE, run_lockstep

WARM = Placement("ray", cpu_per_party=1.0, reuse_actors=True)
Run = Callable[[Sequence[Job], Dataset], list[Record]]  # each job's clean record


def _one_by_one(placement: Placement) -> Run:
    def run(jobs: Sequence[Job], ds: Dataset) -> list[Record]:
        return [NNKind().run(job.spec, ds, placement, job.attacks)[0] for job in jobs]

    return run


def _lockstep(size: int) -> Run:
    def run(jobs: Sequence[Job], ds: Dataset) -> list[Record]:
        got = dict(run_lockstep(jobs, ds, WARM, group_size=size))
        return [got[i][0] for i in range(len(jobs))]  # type: ignore[index]

    return run


def modes(sizes: Sequence[int]) -> dict[str, Run]:
    """local, warm, then lockstep (default group size) and ``lockstep_g<size>`` per size."""
    out = {"local": _one_by_one(LOCAL), "warm": _one_by_one(WARM), "lockstep": _lockstep(0)}
    return {**out, **{f"lockstep_g{size}": _lockstep(size) for size in sizes}}


def measure(k: int, epochs: int, repeats: int, ds: Dataset, sizes: Sequence[int]) -> dict[str, Any]:
    """Per-training seconds of each mode for a pack of ``k`` trainings of ``epochs``:
    ``<mode>_s`` the pack's wall / k, ``<mode>_train_s`` the mean record train_seconds
    (lockstep: each training's share of the run; setup and actor release excluded)."""
    jobs = [Job(TrialSpec.build(dataset="breast_cancer", epochs=epochs, seed=s)) for s in range(k)]
    runs = modes(sizes)
    walls: dict[str, list[float]] = {mode: [] for mode in runs}
    trains: dict[str, list[float]] = {mode: [] for mode in runs}
    keys: dict[str, list[tuple[Any, ...]]] = {}
    for _ in range(repeats):
        for mode, run in runs.items():  # interleaved: a noisy machine hits every mode
            start = time.perf_counter()
            records = run(jobs, ds)
            walls[mode].append((time.perf_counter() - start) / k)
            trains[mode].append(statistics.mean(r.train_seconds for r in records))
            keys[mode] = [(r.mp, r.rounds, r.comm_bytes) for r in records]
    assert all(got == keys["local"] for got in keys.values()), keys
    med = {mode: statistics.median(w) for mode, w in walls.items()}
    return {
        "k": k,
        "epochs": epochs,
        "repeats": repeats,
        "group_size": GROUP_SIZE,
        **{f"{mode}_s": round(s, 4) for mode, s in med.items()},
        **{f"{mode}_train_s": round(statistics.median(t), 4) for mode, t in trains.items()},
        "lockstep_over_warm": round(med["lockstep"] / med["warm"], 3),
        "lockstep_over_local": round(med["lockstep"] / med["local"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--packs", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--epochs", type=int, nargs="+", default=[2, 50])
    parser.add_argument(
        "--group-sizes", type=int, nargs="*", default=[], help="also lockstep with these"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)  # the arithmetic budget of one party actor (1 CPU)
    ensure_ray(num_cpus=max(4, os.cpu_count() or 1))
    ds = load_dataset("breast_cancer")
    warm_up = [Job(TrialSpec.build(dataset="breast_cancer", epochs=1, seed=s)) for s in range(2)]
    for run in modes([]).values():  # actors started, torch warm in every process
        run(warm_up, ds)
    try:
        for k in args.packs:
            for epochs in args.epochs:
                print(
                    json.dumps(measure(k, epochs, args.repeats, ds, args.group_sizes)), flush=True
                )
    finally:
        release_warm_actors()


if __name__ == "__main__":
    main()
