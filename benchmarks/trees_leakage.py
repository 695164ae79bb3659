"""``python -m benchmarks.trees_leakage``: label-inference AP of tree_grad_li per tree model.

Each model is trained with the attack (passive party 0 infers every training row's label
from the per-row statistics it was sent) for ``--seeds`` seeds; the output gives AP per
seed, its mean, the rows attacked and MP. Plaintext twins (``encrypt=0``) run the same
protocol unencrypted, so the pair isolates what encryption hides. Settings are smaller
than the paper's 5 trees of depth 6 (``--n-trees``, ``--max-depth``) because Paillier
decryption dominates; the first tree already carries every row's statistic.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.trial import run_trial

LR_FIELDS = {"lr": 0.5, "epochs": 1, "batch_size": 100}


def cells(n_trees: int, depth: int, lr_rows: int) -> dict[str, tuple[str, dict[str, Any]]]:
    """Label -> (model, model_params)."""
    tree = {"n_trees": n_trees, "max_depth": depth}
    return {
        "xgboost": ("xgboost", tree),
        "secureboost": ("secureboost", tree),
        "secureboost_plain": ("secureboost", {**tree, "encrypt": 0}),
        "rf": ("rf", tree),
        "secure_rf": ("secure_rf", tree),
        "paillier_lr": ("paillier_lr", {"max_rows": lr_rows}),
        "paillier_lr_plain": ("paillier_lr", {"max_rows": lr_rows, "encrypt": 0}),
    }


def measure(model: str, params: dict[str, Any], dataset: str, seed: int, key: int) -> dict:
    extra = LR_FIELDS if model == "paillier_lr" else {}
    spec = TrialSpec.build(dataset=dataset, model=model, model_params=params, key_length=key,
                           seed=seed, **extra)  # fmt: skip
    transport = "ray" if model == "xgboost" else "local"
    start = time.perf_counter()
    clean, attacked = run_trial(spec, Placement(transport), attacks=[("tree_grad_li", {})])
    rows = json.loads(attacked.extra)["attack_rows"]
    return {"ap": float(attacked.ap), "mp": float(clean.mp), "rows": rows,
            "seconds": round(time.perf_counter() - start, 2)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="breast_cancer")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--key-length", type=int, default=512)
    parser.add_argument("--n-trees", type=int, default=2)
    parser.add_argument("--max-depth", type=int, default=3)
    parser.add_argument("--lr-rows", type=int, default=455)
    parser.add_argument("--models", default=",".join(cells(1, 1, 1)))
    args = parser.parse_args(argv)
    table = cells(args.n_trees, args.max_depth, args.lr_rows)
    out: dict[str, Any] = {"dataset": args.dataset, "key_length": args.key_length,
                           "n_trees": args.n_trees, "max_depth": args.max_depth,
                           "lr_rows": args.lr_rows, "models": {}}  # fmt: skip
    for label in args.models.split(","):
        model, params = table[label]
        runs = [measure(model, params, args.dataset, s, args.key_length) for s in range(args.seeds)]
        out["models"][label] = {
            "ap": [round(r["ap"], 4) for r in runs],
            "ap_mean": round(statistics.mean(r["ap"] for r in runs), 4),
            "mp_mean": round(statistics.mean(r["mp"] for r in runs), 4),
            "rows": [r["rows"] for r in runs],
            "seconds": [r["seconds"] for r in runs],
        }
    json.dump(out, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
