"""``python -m benchmarks.attacks``: AP of every attack at VFLAIR's defaults and per preset.

2-party aggVFL FedSGD with VFLAIR's settings; multi-class attacks on digits, binary-only
ones on breast_cancer. Each attack runs with its defaults (VFLAIR's settings, key
``default``) and with each named preset (``strong``, ...), on the same seeds; one clean
training per (dataset, seed) serves every inference-time attack and preset, a
training-time attack trains once per (preset, seed). Per (attack, preset): AP median,
mean and std over seeds, the parameters that differ from the defaults, MP, seconds.
Feature-reconstruction attacks are reported beside the AP of a trivial reconstruction
(each column's mean), their baseline.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
from typing import Any

import numpy as np
import torch

from trainables.attacks import ATTACKS, FeatureGuess
from trainables.attacks.judge import Judge
from trainables.data import load_dataset
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.trial import AttackSpec, prepare_parties, run_trial, train_local_parties

DEFAULT = "default"  # the key of an attack's VFLAIR-default setting in the output


def trivial_feature_ap(dataset: str, seed: int) -> float:
    """AP of guessing party 0's training features by their column means."""
    spec = TrialSpec.build(dataset=dataset, seed=seed, epochs=1)
    _, parties = train_local_parties(prepare_parties(spec, load_dataset(dataset)), 1)
    x = parties[0].X_train.cpu().numpy()
    rows = np.arange(len(x))
    means = np.repeat(x.mean(axis=0, keepdims=True), len(x), axis=0)
    return Judge(parties).feature_ap(FeatureGuess(0, "train", rows, means))


def nn_attacks() -> list[str]:
    """The NN-VFL attacks (tree attacks read tree-VFL messages: ``benchmarks.trees_leakage``)."""
    return [n for n in ATTACKS.names() if getattr(ATTACKS.get(n), "family", "nn") == "nn"]


def dataset_of(name: str) -> str:
    return "breast_cancer" if ATTACKS.get(name).info.binary_only else "digits"


def settings(name: str) -> list[tuple[str, dict[str, Any]]]:
    """(key, attack params): VFLAIR's defaults, then each preset."""
    presets = sorted(ATTACKS.get(name).presets)
    return [(DEFAULT, {}), *((p, {"preset": p}) for p in presets)]


def records_of(names: list[str], seed: int) -> dict[tuple[str, str], Record]:
    """(attack, setting key) -> its record on ``seed``; shares clean trainings per dataset."""
    out: dict[tuple[str, str], Record] = {}
    shared: dict[str, list[tuple[str, AttackSpec]]] = {}
    for name in names:
        for key, params in settings(name):
            if ATTACKS.get(name).info.training_time:
                spec = TrialSpec.build(
                    dataset=dataset_of(name), seed=seed, train_attack=name,
                    train_attack_params=params,
                )  # fmt: skip
                out[name, key] = next(r for r in run_trial(spec) if r.attack == name)
            else:
                shared.setdefault(dataset_of(name), []).append((key, (name, params)))
    for dataset, entries in shared.items():
        spec = TrialSpec.build(dataset=dataset, seed=seed)
        attack_rows = [
            r for r in run_trial(spec, attacks=[a for _, a in entries]) if r.attack != "none"
        ]
        for (key, (name, _)), row in zip(entries, attack_rows, strict=True):
            assert row.attack == name
            out[name, key] = row
    return out


def _one_thread() -> None:
    torch.set_num_threads(1)


def summary(rows: list[Record], params: dict[str, Any]) -> dict[str, Any]:
    aps = [float(r.ap) for r in rows if r.ap is not None]
    return {
        "params": params,
        "ap_median": round(statistics.median(aps), 4),
        "ap_mean": round(statistics.fmean(aps), 4),
        "ap_std": round(statistics.stdev(aps), 4) if len(aps) > 1 else 0.0,
        "ap": [round(a, 4) for a in aps],
        "mp_median": round(statistics.median(float(r.mp) for r in rows if r.mp is not None), 4),
        "attack_seconds_median": round(statistics.median(r.attack_seconds for r in rows), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--attacks", default=",".join(nn_attacks()))
    parser.add_argument("--jobs", type=int, default=1, help="seeds run in parallel processes")
    args = parser.parse_args()
    names = args.attacks.split(",")
    start = time.perf_counter()
    if args.jobs > 1:  # one process per seed, each on one torch thread
        with multiprocessing.get_context("spawn").Pool(args.jobs, initializer=_one_thread) as pool:
            per_seed = pool.starmap(records_of, [(names, s) for s in range(args.seeds)])
    else:
        per_seed = [records_of(names, seed) for seed in range(args.seeds)]
    result: dict[str, Any] = {}
    for name in names:
        info = ATTACKS.get(name).info
        entry: dict[str, Any] = {"type": info.type, "dataset": dataset_of(name)}
        for key, _ in settings(name):
            rows = [records[name, key] for records in per_seed]
            shown = json.loads(rows[0].extra).get("attack_params", {})
            entry[key] = summary(rows, shown)
        if info.type == "FR":
            entry["trivial_ap"] = round(trivial_feature_ap(dataset_of(name), 0), 4)
        result[name] = entry
    wall = round(time.perf_counter() - start, 1)
    print(json.dumps({"seeds": args.seeds, "wall_seconds": wall, "attacks": result}))


if __name__ == "__main__":
    main()
