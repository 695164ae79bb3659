"""``python -m benchmarks.early_stopping``: what early stopping saves, and what it picks.

Two comparisons, each run the same way twice, as whole ``sweep.py`` processes in fresh
results folders (so their wall times include every start-up), printed as one JSON line:

1. **Grid.** An lr x epochs grid on digits (8 x 5 = 40 cells, 3 seeds: 120 trainings,
   ``val_ratio`` 0.2), in full and with ``run.halving`` (successive halving inside each
   stacked pack; cells compete within one epoch count, see ``trainables/vfl/halving.py``).
   The halving run's pick is its finished cell with the best mean validation MP; the full
   grid's best rank group by test MP is its best cell and every cell whose 95% interval
   (``by_axis.csv``: t over seeds widened by the test-set error) overlaps the best's.
   Reported: the pick, whether it is in that group, training epochs, wall seconds and the
   trainings' own seconds (records' ``train_seconds``) of both runs, and the ratios
   (targets: epochs <= 0.4, wall <= 0.5).
2. **Search.** An Optuna TPE search over lr (20 epochs on digits, 24 trials, one at a
   time so TPE sees every result) without and with ``search.pruner: median``. Reported:
   each one's best validation MP among finished trials, the difference (target: <= 0.01)
   and training epochs (target: pruned <= 0.6 of unpruned).

Training epochs: a finished training counts its ``epochs``, a stopped one its
``extra.epochs_run``.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
LRS = [0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3]
EPOCHS = [5, 10, 15, 20, 30]
SEEDS = [0, 1, 2]
RESOURCES = "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"


def grid_space(name: str, halving: bool) -> str:
    run = "run: {halving: {grace_epochs: 1, reduction_factor: 3}}\n" if halving else ""
    return (
        f"name: {name}\nbase: {{dataset: digits, val_ratio: 0.2}}\n"
        f"grid: {{lr: {LRS}, epochs: {EPOCHS}, seed: {SEEDS}}}\n{run}{RESOURCES}"
    )


def search_space(name: str, pruner: str) -> str:
    return (
        f"name: {name}\nbase: {{dataset: digits, epochs: 20, seed: 0}}\n"
        "search:\n  params: {lr: {low: 0.0001, high: 0.3, log: true}}\n"
        "  objectives: [{metric: mp, mode: max}]\n  n_trials: 24\n  sampler: tpe\n"
        f"  pruner: {pruner}\nrun: {{max_concurrent_trials: 1}}\n{RESOURCES}"
    )


def sweep(folder: Path, name: str, text: str) -> tuple[list[dict[str, Any]], float]:
    """Run ``text`` as a whole ``sweep.py`` process; its records and wall seconds."""
    space = folder / f"{name}.yaml"
    space.write_text(text)
    clock = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "sweep.py", "--space", str(space), "--results", str(folder),
         "--no-mlflow"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - clock
    if done.returncode != 0:
        raise SystemExit(f"{name}: sweep.py exited {done.returncode}\n{done.stdout[-3000:]}")
    return pq.read_table(folder / name / "records").to_pylist(), wall


def epochs_of(rows: list[dict[str, Any]]) -> int:
    total = 0
    for row in rows:
        if row["attack"] != "none":
            continue
        if row["status"] == "stopped":
            total += int(json.loads(row["extra"])["epochs_run"])
        else:
            total += int(json.loads(row["spec_json"])["epochs"])
    return total


def train_seconds(rows: list[dict[str, Any]]) -> float:
    """The trainings' own seconds (records' ``train_seconds``: no start-up, no evaluation)."""
    return round(sum(float(r["train_seconds"]) for r in rows if r["attack"] == "none"), 1)


def cell(row: dict[str, Any]) -> tuple[float, int]:
    spec = json.loads(row["spec_json"])
    return float(spec["lr"]), int(spec["epochs"])


def best_group(folder: Path, name: str) -> tuple[tuple[float, int], list[tuple[float, int]]]:
    """The full grid's best cell by mean test MP, and the cells whose interval overlaps it
    (``python -m analysis``'s ``by_axis.csv``)."""
    done = subprocess.run(
        [sys.executable, "-m", "analysis", str(folder / name), "--no-mlflow"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"analysis exited {done.returncode}\n{done.stdout[-3000:]}")
    with (folder / name / "report" / "by_axis.csv").open() as f:
        rows = list(csv.DictReader(f))
    best = max(rows, key=lambda r: float(r["mp_mean"]))
    lo = float(best["mp_ci_lo"])
    group = [r for r in rows if float(r["mp_ci_hi"]) >= lo]
    return key(best), [key(r) for r in group]


def key(row: dict[str, str]) -> tuple[float, int]:
    return float(row["lr"]), int(float(row["epochs"]))


def pick(rows: list[dict[str, Any]]) -> tuple[float, int]:
    """The finished cell with the best mean validation MP over its seeds."""
    by_cell: dict[tuple[float, int], list[float]] = {}
    for row in rows:
        if row["status"] == "ok" and row["attack"] == "none":
            by_cell.setdefault(cell(row), []).append(float(row["val_mp"]))
    return max(by_cell, key=lambda c: sum(by_cell[c]) / len(by_cell[c]))


def best_val(rows: list[dict[str, Any]]) -> float:
    return max(float(r["val_mp"]) for r in rows if r["status"] == "ok")


def run(folder: Path) -> dict[str, Any]:
    full_rows, full_wall = sweep(folder, "grid_full", grid_space("grid_full", False))
    cut_rows, cut_wall = sweep(folder, "grid_halving", grid_space("grid_halving", True))
    best, group = best_group(folder, "grid_full")
    chosen = pick(cut_rows)
    plain_rows, plain_wall = sweep(folder, "tpe", search_space("tpe", "none"))
    pruned_rows, pruned_wall = sweep(folder, "tpe_median", search_space("tpe_median", "median"))
    full_epochs, cut_epochs = epochs_of(full_rows), epochs_of(cut_rows)
    plain_epochs, pruned_epochs = epochs_of(plain_rows), epochs_of(pruned_rows)
    gap = best_val(plain_rows) - best_val(pruned_rows)
    return {
        "grid": {
            "cells": len(LRS) * len(EPOCHS), "seeds": len(SEEDS), "trainings": len(full_rows),
            "stopped": sum(r["status"] == "stopped" for r in cut_rows),
            "full_best_by_test_mp": best, "full_best_group": group,
            "halving_pick": chosen, "pick_in_best_group": chosen in group,
            "epochs": [full_epochs, cut_epochs], "epochs_ratio": round(cut_epochs / full_epochs, 3),
            "wall_s": [round(full_wall, 1), round(cut_wall, 1)],
            "wall_ratio": round(cut_wall / full_wall, 3),
            "train_s": [train_seconds(full_rows), train_seconds(cut_rows)],
        },
        "search": {
            "trials": 24, "pruned": sum(r["status"] == "stopped" for r in pruned_rows),
            "best_val_mp": [round(best_val(plain_rows), 4), round(best_val(pruned_rows), 4)],
            "best_val_mp_gap": round(gap, 4),
            "epochs": [plain_epochs, pruned_epochs],
            "epochs_ratio": round(pruned_epochs / plain_epochs, 3),
            "wall_s": [round(plain_wall, 1), round(pruned_wall, 1)],
            "train_s": [train_seconds(plain_rows), train_seconds(pruned_rows)],
        },
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", default=None, help="results folder to keep (default: temp)")
    args = parser.parse_args()
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        print(json.dumps(run(Path(args.keep)), default=str))
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run(Path(tmp)), default=str))


if __name__ == "__main__":
    main()
