"""``python -m benchmarks.main_task``: clean main-task MP with VFLAIR's models and settings.

Mean and standard deviation over seeds, aggVFL and splitVFL, 2 parties, FedSGD, local
transport (the transport does not change the numbers; tests prove it). Targets from the
foundation issue are printed beside each mean (aggVFL): the JSON says which are met.
Datasets that need files are read from ``--data-dir`` / ``VFLSWEEP_DATA`` / ``../shared``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from trainables.errors import MissingDataError
from trainables.spec import TrialSpec
from trainables.trial import run_trial

TARGETS = {
    "breast_cancer": 0.91,
    "digits": 0.90,
    "adult": 0.83,
    "credit": 0.81,
    "nursery": 0.95,
    "diabetes": 0.72,
    "mnist": None,  # 10k-image subset only; VFLAIR's 0.972 uses the 60k training set
}
VFLAIR = {
    "breast_cancer": 0.914,
    "adult": 0.839,
    "credit": 0.826,
    "nursery": 0.999,
    "diabetes": 0.755,
    "mnist": 0.972,
}


def measure(dataset: str, partition: str, seeds: int, data_dir: str | None) -> dict[str, Any]:
    mps, seconds = [], []
    for seed in range(seeds):
        spec = TrialSpec.build(dataset=dataset, partition=partition, seed=seed)
        (record,) = run_trial(spec, data_dir=data_dir)
        mps.append(float(record.mp))  # type: ignore[arg-type]
        seconds.append(record.train_seconds)
    return {
        "mean": round(statistics.mean(mps), 4),
        "std": round(statistics.stdev(mps), 4) if len(mps) > 1 else 0.0,
        "seeds": len(mps),
        "rounds": record.rounds,
        "train_seconds_median": round(statistics.median(seconds), 3),
        "model": spec.model,
        "lr": spec.lr,
        "epochs": spec.epochs,
        "batch_size": spec.batch_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--datasets", default=",".join(TARGETS))
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    start = time.perf_counter()
    out: dict[str, Any] = {"seeds": args.seeds, "results": {}, "skipped": {}}
    for dataset in args.datasets.split(","):
        try:
            row = {p: measure(dataset, p, args.seeds, args.data_dir) for p in ("agg", "split")}
        except MissingDataError as err:
            out["skipped"][dataset] = str(err)
            continue
        target = TARGETS.get(dataset)
        row["target_agg"] = target
        row["vflair_agg"] = VFLAIR.get(dataset)
        row["target_met"] = None if target is None else row["agg"]["mean"] >= target
        out["results"][dataset] = row
    out["all_targets_met"] = all(
        r["target_met"] for r in out["results"].values() if r["target_met"] is not None
    )
    out["wall_seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
