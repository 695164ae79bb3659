"""FedCVT vs FedSplitNN on the same overlapping rows: adult, credit, mnist halves.

``python -m benchmarks.fedcvt [--seeds 5] [--overlaps 250 500] [--epochs 20]`` prints ONE
JSON object: per dataset and overlap size, mean and std over seeds of test accuracy (and AUC
for the binary datasets) for ``fedcvt`` and ``fedsplitnn`` (same encoders, heads, rows, seed
and optimizer steps), their paired difference, and FedCVT's pseudo-label statistics. Each
finished run goes to stderr and, with ``--runs FILE``, is appended there as one JSON line
(progress survives a kill). Measured: 60 runs in about 6 minutes on one core.

``--ablation`` (binary datasets, default adult and credit) runs, per seed, FedCVT as is,
FedCVT with pseudo-labels off (``t_fed: 1.01``: no softmax reaches it) and FedSplitNN,
and reports each one's accuracy and AUC, the class-1 share of FedCVT's last-epoch
pseudo-labels against its share in A's own rows (computed by the experimenter), and
FedCVT's B-only accuracy: the README's ablation table and diagnosis.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from trainables.spec import TrialSpec
from trainables.trial import run_trial

DATASETS = ("adult", "credit", "mnist")
VARIANTS = ("fedcvt", "fedsplitnn")


PSEUDO_OFF = {"t_fed": 1.01}  # above any softmax probability: no row is ever pseudo-labeled
ABLATION = (("fedcvt", {}), ("fedcvt_no_pseudo", PSEUDO_OFF), ("fedsplitnn", {}))


def one_run(
    dataset: str, n_aligned: int, variant: str, seed: int, epochs: int,
    model_params: dict | None = None,
) -> dict:  # fmt: skip
    spec = TrialSpec.build(
        dataset=dataset, ssl_variant=variant, n_aligned=n_aligned, seed=seed, epochs=epochs,
        batch_size=256, model_params=dict(model_params or {}),
    )  # fmt: skip
    start = time.perf_counter()
    rec = run_trial(spec)[0]
    extra = json.loads(rec.extra)
    return {
        "dataset": dataset, "n_aligned": n_aligned, "variant": variant, "seed": seed,
        "acc": rec.mp, "auc": extra.get("auc"), "seconds": time.perf_counter() - start,
        **{k: extra.get(k) for k in ("acc_active_only", "pseudo_last_epoch",
                                     "pseudo_last_epoch_acc", "n_local_a",
                                     "pseudo_class_share", "own_a_class_share")},
    }  # fmt: skip


def _ms(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {}
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": round(statistics.fmean(values), 4), "std": round(std, 4), "n": len(values)}


def summarize(runs: list[dict]) -> dict:
    """Mean/std per (dataset, overlap, variant) and the paired FedCVT - FedSplitNN gap."""
    out: dict[str, dict] = {}
    for ds in DATASETS:
        for n in sorted({r["n_aligned"] for r in runs}):
            cell = {}
            by = {v: {r["seed"]: r for r in runs if (r["dataset"], r["n_aligned"], r["variant"])
                      == (ds, n, v)} for v in VARIANTS}  # fmt: skip
            if not any(by.values()):
                continue
            for v, rs in by.items():
                cell[v] = {m: _ms([r[m] for r in rs.values() if r[m] is not None])
                           for m in ("acc", "auc")}  # fmt: skip
            paired = sorted(set(by["fedcvt"]) & set(by["fedsplitnn"]))
            for m in ("acc", "auc"):
                diffs = [by["fedcvt"][s][m] - by["fedsplitnn"][s][m] for s in paired
                         if by["fedcvt"][s][m] is not None]  # fmt: skip
                cell[f"gain_{m}"] = _ms(diffs)
            cvt = list(by["fedcvt"].values())
            cell["fedcvt_active_only_acc"] = _ms([r["acc_active_only"] for r in cvt])
            cell["pseudo_last_epoch"] = _ms([r["pseudo_last_epoch"] for r in cvt])
            cell["pseudo_last_epoch_acc"] = _ms(
                [r["pseudo_last_epoch_acc"] for r in cvt if r["pseudo_last_epoch_acc"] is not None]
            )
            out[f"{ds}/{n}"] = cell
    return out


def _class1(share: list[float] | None) -> float | None:
    return None if not share or len(share) != 2 else share[1]


def summarize_ablation(runs: list[dict]) -> dict:
    """Per (dataset, overlap): acc/AUC of each arm, pseudo-label vs A's class-1 share."""
    out: dict[str, dict] = {}
    for ds, n in sorted({(r["dataset"], r["n_aligned"]) for r in runs}):
        cell: dict[str, object] = {}
        for arm, _ in ABLATION:
            rs = [r for r in runs if (r["dataset"], r["n_aligned"], r["arm"]) == (ds, n, arm)]
            cell[arm] = {m: _ms([r[m] for r in rs if r[m] is not None]) for m in ("acc", "auc")}
        cvt = [r for r in runs if (r["dataset"], r["n_aligned"], r["arm"]) == (ds, n, "fedcvt")]
        pseudo = [_class1(r["pseudo_class_share"]) for r in cvt if r["pseudo_last_epoch"]]
        cell["pseudo_class1_share"] = _ms([v for v in pseudo if v is not None])
        cell["own_a_class1_share"] = _ms([_class1(r["own_a_class_share"]) for r in cvt])
        cell["fedcvt_active_only_acc"] = _ms([r["acc_active_only"] for r in cvt])
        out[f"{ds}/{n}"] = cell
    return out


def ablation(args: argparse.Namespace) -> dict:
    runs = []
    for ds in args.datasets:
        for n in args.overlaps:
            for seed in range(args.seeds):
                for arm, params in ABLATION:
                    variant = "fedsplitnn" if arm == "fedsplitnn" else "fedcvt"
                    run = {"arm": arm, **one_run(ds, n, variant, seed, args.epochs, params)}
                    runs.append(run)
                    _log(run, args.runs)
    return {"ablation": True, "epochs": args.epochs, "batch_size": 256, "n_local": 4000,
            "pseudo_off": PSEUDO_OFF, "seeds": args.seeds,
            "cells": summarize_ablation(runs)}  # fmt: skip


def _log(run: dict, path: Path | None) -> None:
    if path is not None:
        with path.open("a") as fh:
            fh.write(json.dumps(run) + "\n")
    print(json.dumps(run), file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--overlaps", type=int, nargs="+", default=[250, 500])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--datasets", nargs="+", default=None)
    parser.add_argument("--runs", type=Path, default=None, help="append each run here (JSONL)")
    parser.add_argument("--ablation", action="store_true", help="pseudo-labels on vs off")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.ablation:
        args.datasets = args.datasets or ["adult", "credit"]
        print(json.dumps(ablation(args)))
        return 0
    args.datasets = args.datasets or list(DATASETS)
    runs = []
    for ds in args.datasets:
        for n in args.overlaps:
            for seed in range(args.seeds):
                for v in VARIANTS:
                    run = one_run(ds, n, v, seed, args.epochs)
                    runs.append(run)
                    _log(run, args.runs)
    print(json.dumps({"epochs": args.epochs, "batch_size": 256, "n_local": 4000,
                      "metric_note": "acc = test accuracy of f_AB; auc for binary datasets",
                      "cells": summarize(runs)}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
