"""``python -m benchmarks.attacks``: AP and seconds of every attack, undefended.

2-party aggVFL FedSGD with VFLAIR's settings; multi-class attacks on digits, binary-only
ones on breast_cancer; medians over seeds. Feature-reconstruction attacks are reported
beside the AP of a trivial reconstruction (each column's mean), their baseline.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

import numpy as np

from trainables.attacks import ATTACKS, FeatureGuess
from trainables.attacks.judge import Judge
from trainables.data import load_dataset
from trainables.spec import TrialSpec
from trainables.trial import prepare_parties, run_trial, train_local_parties


def trivial_feature_ap(dataset: str, seed: int) -> float:
    """AP of guessing party 0's training features by their column means."""
    spec = TrialSpec.build(dataset=dataset, seed=seed, epochs=1)
    _, parties = train_local_parties(prepare_parties(spec, load_dataset(dataset)), 1)
    x = parties[0].X_train.cpu().numpy()
    rows = np.arange(len(x))
    means = np.repeat(x.mean(axis=0, keepdims=True), len(x), axis=0)
    return Judge(parties).feature_ap(FeatureGuess(0, "train", rows, means))


def measure(name: str, seeds: int) -> dict[str, Any]:
    info = ATTACKS.get(name).info
    dataset = "breast_cancer" if info.binary_only else "digits"
    aps, secs, mps = [], [], []
    for seed in range(seeds):
        if info.training_time:
            records = run_trial(TrialSpec.build(dataset=dataset, seed=seed, train_attack=name))
        else:
            records = run_trial(TrialSpec.build(dataset=dataset, seed=seed), attacks=[(name, {})])
        row = next(r for r in records if r.attack == name)
        aps.append(row.ap)
        secs.append(row.attack_seconds)
        mps.append(row.mp)
    out = {
        "type": info.type,
        "dataset": dataset,
        "ap_median": round(statistics.median(aps), 4),
        "ap": [round(a, 4) for a in aps],
        "mp_median": round(statistics.median(mps), 4),
        "attack_seconds_median": round(statistics.median(secs), 3),
    }
    if info.type == "FR":
        out["trivial_ap"] = round(trivial_feature_ap(dataset, 0), 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--attacks", default=",".join(ATTACKS.names()))
    args = parser.parse_args()
    result = {name: measure(name, args.seeds) for name in args.attacks.split(",")}
    print(json.dumps({"seeds": args.seeds, "attacks": result}))


if __name__ == "__main__":
    main()
