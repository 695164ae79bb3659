"""``python -m benchmarks.adapted_cost``: what an adapted inference-time attack costs
against its default, with each setting's folds stacked and one by one (issue 67 item 2).

An adapted attack (``adapt: {trials: N}``) scores each of its N settings on k folds of
its own auxiliary rows, then runs the chosen setting once (``attacks/tuning.py``). Model
completion (PMC, MC) stacks: ``fold_scores`` trains a setting's k fold models as one
(``Attack.run_many``). This benchmark trains one digits model (aggVFL FedSGD, 3 epochs),
then times on its attacker views, one thread, median over ``--repeats``:

- ``default_s``: the attack at its default setting, once (what a default record costs);
- ``tune_s``: ``tune`` over ``--trials`` settings (folds stacked), plus one run;
- ``folds_stacked_s`` / ``folds_alone_s``: one setting's k folds as one ``run_many`` and as
  k ``run`` calls; their scores must be equal (``equal``).

It prints one JSON object: per attack, the seconds, the folds, ``adapted_ratio``
((tune + run) / default) and ``fold_speedup`` (alone / stacked).
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import numpy as np
import torch

from trainables.attacks import ATTACKS
from trainables.attacks.harness import nn_view_of
from trainables.attacks.tuning import Adapt, fold_scores, masked_view, plan_folds, tune
from trainables.data import load_dataset
from trainables.spec import TrialSpec
from trainables.trial import prepare_parties, train_local_parties

SPEC = TrialSpec.build(dataset="digits", epochs=3, seed=1)


def _view(parties: list[Any], name: str) -> Any:
    """The attacker's view, as the harness builds it for every evaluation."""
    return nn_view_of(parties, SPEC.seed)(ATTACKS.get(name).info)[1]


def _timed(fn: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def measure(name: str, parties: list[Any], trials: int, repeats: int) -> dict[str, object]:
    view = _view(parties, name)
    attack = ATTACKS.create(name)
    info = ATTACKS.get(name).info
    masks, why = plan_folds(view, info, Adapt(trials=trials))
    if not masks:
        return {"not_tuned": why}
    folds = [masked_view(view, info, m) for m in masks]
    runs: dict[str, list[float]] = {}
    equal = True
    for _ in range(repeats):
        runs.setdefault("default_s", []).append(_timed(lambda: attack.run(view))[0])
        tuned_s, _ = _timed(lambda: tune(attack, view, Adapt(trials=trials)))
        runs.setdefault("tune_s", []).append(tuned_s)
        stacked_s, stacked = _timed(lambda: fold_scores(attack, folds))
        alone_s, alone = _timed(lambda: [score(attack.run(v)) for v, score, _ in folds])
        runs.setdefault("folds_stacked_s", []).append(stacked_s)
        runs.setdefault("folds_alone_s", []).append(alone_s)
        equal = equal and bool(np.array_equal(stacked, np.array(alone)))
    med = {k: round(statistics.median(v), 3) for k, v in runs.items()}
    return {
        **med,
        "folds": len(folds),
        "trials": trials,
        "equal": equal,
        "adapted_ratio": round((med["tune_s"] + med["default_s"]) / med["default_s"], 2),
        "fold_speedup": round(med["folds_alone_s"] / med["folds_stacked_s"], 2),
    }


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(prog="python -m benchmarks.adapted_cost")
    p.add_argument("--trials", type=int, default=6, help="settings the attacker tries")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--attacks", default="pmc,mc", help="comma-separated attack names")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    prepared = prepare_parties(SPEC, load_dataset("digits"), [("pmc", {}), ("mc", {})])
    parties = train_local_parties(prepared, int(SPEC.required("epochs")))[1]
    out: dict[str, object] = {"benchmark": "adapted_cost", "dataset": "digits", "threads": 1}
    for name in args.attacks.split(","):
        out[name] = measure(name, parties, args.trials, args.repeats)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
