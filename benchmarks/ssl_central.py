"""``python -m benchmarks.ssl_central``: does SSL pretraining help at all, with no federation?

For each SSL method (SimSiam, BYOL, MoCo) the federated code's ``Tower`` is pretrained
centrally on ONE party's view (mnist: the left half of the 2-party halves split; adult:
party 0's block of the 2-party split) on all of that party's training rows, with the
paper's settings (batch 512, projector/predictor widths of ALGORITHMS.md, default
``Widths``, Adam 1e-3 as in ``SSLParty``). Then, on a seeded choice of ``--labels``
labeled rows: (a) a linear probe (logistic regression on the frozen ``represent()``
output) and (b) a full fine-tune (encoder + linear head, fixed lr), against the same
encoder at random init (same seed) and a supervised encoder (the random-init encoder
trained end-to-end on the labels: its fine-tune IS the random-init fine-tune; its probe
refits a logistic regression on its frozen features). Metric: accuracy (mnist), AUC
(adult). Paired differences over seeds (pretrained - random) with a paired t-test.
Collapse: per-dimension std of L2-normalised representations, and the SSL loss, per
epoch. Each finished (dataset, method, seed) is appended to ``--progress`` (JSONL).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy import stats

from benchmarks import ssl_central_parts as central
from trainables.data import load_dataset
from trainables.ssl.hssl.augment import IMAGE_AUGS, ImageLayout
from trainables.ssl.hssl.base import Widths

METHODS = ("simsiam", "byol", "moco")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["mnist", "adult"])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1")
    ap.add_argument("--epochs", type=int, default=20, help="pretraining epochs (images)")
    ap.add_argument("--tabular-epochs", type=int, default=5, help="pretraining epochs (tabular)")
    ap.add_argument("--labels", type=int, default=200)
    ap.add_argument("--batch", type=int, default=512, help="pretraining batch (paper: 512)")
    ap.add_argument("--lr", type=float, default=1e-3, help="pretraining Adam lr (SSLParty)")
    ap.add_argument("--ft-lr", type=float, default=0.005, help="fine-tune Adam lr (fixed)")
    ap.add_argument("--ft-epochs", type=int, default=30)
    ap.add_argument("--ft-batch", type=int, default=32)
    ap.add_argument("--image-aug", default="light", choices=IMAGE_AUGS)
    ap.add_argument("--no-head-bn", action="store_true", help="plain projector/predictor")
    ap.add_argument(
        "--widths",
        type=int,
        nargs=4,
        default=None,
        metavar=("HIDDEN", "EMB", "PROJ", "PRED"),
        help="default: Widths()",
    )
    ap.add_argument("--progress", type=Path, default=None, help="JSONL of finished runs")
    ap.add_argument(
        "--from-progress",
        type=Path,
        default=None,
        help="tabulate the runs of this --progress file (give the flags it ran with) "
        "instead of running: for a run that was cut short",
    )
    return ap.parse_args(argv)


def widths_of(args: argparse.Namespace) -> Widths:
    w = (
        Widths()
        if args.widths is None
        else Widths(*args.widths[:3], args.widths[2], args.widths[3])
    )
    return dataclasses.replace(w, head_bn=not args.no_head_bn)


def view_of(name: str, args: argparse.Namespace) -> central.PartyView:
    view = central.party_view(load_dataset(name), n_parties=2, party=0)
    if isinstance(view.layout, ImageLayout):
        view = dataclasses.replace(
            view, layout=dataclasses.replace(view.layout, aug=args.image_aug)
        )
    return view


def baseline(
    view: central.PartyView, seed: int, rows: np.ndarray, args: argparse.Namespace, w: Widths
) -> dict[str, float]:
    """Random-init and supervised numbers for one seed (the encoder's initial weights do
    not depend on the SSL method: the heads are built after it)."""
    tower = central.build_tower(central.in_width(view), "simsiam", w, seed)
    enc = central.encoder_of(tower)
    ft = central.FineTune(args.ft_lr, args.ft_epochs, args.ft_batch)
    ft_random, supervised = central.fine_tune(enc, view, rows, seed, ft)
    return {
        "probe_random": central.linear_probe(enc, view, rows),
        "finetune_random": ft_random,
        "probe_supervised": central.linear_probe(supervised, view, rows),
    }


def one(
    view: central.PartyView,
    method: str,
    seed: int,
    epochs: int,
    rows: np.ndarray,
    args: argparse.Namespace,
    w: Widths,
) -> dict[str, Any]:
    start = time.perf_counter()
    pre = central.pretrain(view, method, epochs, seed, widths=w, batch=args.batch, lr=args.lr)
    enc = central.encoder_of(pre.tower)
    ft = central.FineTune(args.ft_lr, args.ft_epochs, args.ft_batch)
    return {
        "probe_pretrained": central.linear_probe(enc, view, rows),
        "finetune_pretrained": central.fine_tune(enc, view, rows, seed, ft)[0],
        "ssl_loss": [round(x, 5) for x in pre.loss],
        "std_emb": [round(s["emb"], 5) for s in pre.std],  # [0]: random init
        "std_z": [round(s["z"], 5) for s in pre.std],
        "seconds": round(time.perf_counter() - start, 2),
    }


def summary(xs: list[float]) -> dict[str, float | int]:
    return {
        "mean": round(statistics.mean(xs), 4),
        "std": round(statistics.stdev(xs), 4) if len(xs) > 1 else 0.0,
        "n": len(xs),
    }


def paired(a: list[float], b: list[float]) -> dict[str, Any]:
    """a - b over the same seeds: mean ± std of the differences and the paired t-test."""
    d = [x - y for x, y in zip(a, b, strict=True)]
    p = float(stats.ttest_rel(a, b).pvalue) if len(d) > 1 and np.std(d) > 0 else None
    return {
        **summary(d),
        "p": None if p is None else float(f"{p:.3g}"),
        "wins": sum(x > 0 for x in d),
    }


def table(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for r in runs:
        out.setdefault(r["dataset"], {}).setdefault(r["method"], []).append(r)
    for ds, by_method in out.items():
        for method, rs in by_method.items():
            col = {k: [r[k] for r in rs] for k in rs[0] if k not in ("dataset", "method")}
            by_method[method] = {
                "metric": rs[0]["metric"],
                "probe": {
                    k: summary(col[f"probe_{k}"]) for k in ("random", "pretrained", "supervised")
                },
                "finetune": {k: summary(col[f"finetune_{k}"]) for k in ("random", "pretrained")},
                "pretrained_minus_random": {
                    "probe": paired(col["probe_pretrained"], col["probe_random"]),
                    "finetune": paired(col["finetune_pretrained"], col["finetune_random"]),
                },
                "collapse": {
                    "std_emb_random": summary([s[0] for s in col["std_emb"]]),
                    "std_emb_final": summary([s[-1] for s in col["std_emb"]]),
                    "std_emb_min_over_epochs": summary([min(s) for s in col["std_emb"]]),
                    "std_z_final": summary([s[-1] for s in col["std_z"]]),
                    "emb_dim_healthy_ref": round(1 / np.sqrt(rs[0]["emb_dim"]), 4),
                },
                "ssl_loss_per_epoch": [
                    round(float(np.mean(e)), 4) for e in zip(*col["ssl_loss"], strict=True)
                ],
                "std_emb_per_epoch": [
                    round(float(np.mean(e)), 4) for e in zip(*col["std_emb"], strict=True)
                ],
                "seconds_per_run": round(statistics.mean(col["seconds"]), 1),
            }
        out[ds] = by_method
    return out


def settings(args: argparse.Namespace, w: Widths) -> dict[str, Any]:
    return {
        "datasets": args.datasets,
        "methods": args.methods,
        "seeds": list(range(args.seeds)),
        "party": "mnist: left half of the 2-party halves split; tabular: party 0 of 2 blocks",
        "pretrain": {
            "epochs_image": args.epochs,
            "epochs_tabular": args.tabular_epochs,
            "batch": args.batch,
            "optimizer": "adam",
            "lr": args.lr,
            "rows": "all of the party's training rows",
            "image_aug": args.image_aug,
            "widths": dataclasses.asdict(w),
            "moco_proj_out": central.MOCO_DIM,
            "moco": {"queue": 4096, "tau": 0.5, "momentum": 0.99},
            "byol_momentum": 0.995,
        },
        "labels": args.labels,
        "probe": "sklearn LogisticRegression(C=1, lbfgs) on standardised frozen represent()",
        "finetune": {
            "lr": args.ft_lr,
            "epochs": args.ft_epochs,
            "batch": args.ft_batch,
            "optimizer": "adam",
            "head": "linear",
        },
        "supervised": "random-init encoder + linear head trained end-to-end on the labels "
        "(= the random-init fine-tune); its probe refits on its frozen features",
    }


def main(argv: list[str] | None = None) -> None:
    torch.set_num_threads(1)
    args = parse(argv)
    start = time.perf_counter()
    if args.from_progress is not None:
        lines = args.from_progress.read_text().splitlines()
        runs = [
            r
            for r in map(json.loads, lines)
            if r["dataset"] in args.datasets
            and r["method"] in args.methods
            and r["seed"] < args.seeds
        ]
    else:
        runs = run_all(args)
    out = {
        "settings": settings(args, widths_of(args)),
        "table": table(runs),
        "runs": runs,
        "seconds": round(time.perf_counter() - start, 1),
        "run_seconds_total": round(sum(r["seconds"] for r in runs), 1),
    }
    if args.from_progress is not None:
        out["tabulated_from"] = str(args.from_progress)
    print(json.dumps(out))


def run_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    for name in args.datasets:
        view = view_of(name, args)
        epochs = args.epochs if isinstance(view.layout, ImageLayout) else args.tabular_epochs
        for seed in range(args.seeds):
            rows = central.labeled_rows(view, args.labels, seed)
            base = baseline(view, seed, rows, args, widths_of(args))
            for method in args.methods:
                w = central.widths_for(method, widths_of(args))
                run = {
                    "dataset": name,
                    "method": method,
                    "seed": seed,
                    "metric": view.metric,
                    "emb_dim": w.emb,
                    **base,
                    **one(view, method, seed, epochs, rows, args, w),
                }
                runs.append(run)
                if args.progress is not None:
                    with args.progress.open("a") as f:
                        f.write(json.dumps(run) + "\n")
    return runs


if __name__ == "__main__":
    main()
