"""``by_axis.csv`` and ``best.json``: every metric per cell of the sweep's axes, over seeds.

A cell is one combination of the varying axes other than ``seed``; its trainings are
its seeds. Per metric the table gives mean, std, n and a bootstrap 95% CI of the mean
(percentile method, 2000 resamples, fixed seed: the same records give the same file;
samples over 500 values get the normal approximation, see ``MAX_BOOT_N``).

Why the CI comes from one shared set of resampling weights per sample size: the
bootstrap means of every cell are then one matrix product (cells x n by n x B), so a
sweep with ten thousand cells costs milliseconds, not a Python loop per cell.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

SCALARS = ("mp", "rounds", "comm_bytes", "train_seconds", "epsilon", "rounds_to_target")
# Which way is better, per metric: what ``best.json`` picks and states.
DIRECTIONS = {
    "mp": "max",
    "rounds": "min",
    "comm_bytes": "min",
    "train_seconds": "min",
    "epsilon": "min",
    "rounds_to_target": "min",
    "ap": "min",  # ap:<attack>: the attack's performance; a lower one means less leakage
}
N_BOOT = 2000
LEVEL = 0.95
BOOT_SEED = 0
# Samples larger than this (pooled cells of a figure, never a cell's seeds in practice)
# get the normal-approximation CI, mean ± 1.96 s/sqrt(n): the bootstrap's B x n weights
# would cost seconds there and give the same interval.
MAX_BOOT_N = 500
NORMAL_Z = 1.959964
STATS = ("mean", "std", "n", "ci_lo", "ci_hi")


def direction(metric: str) -> str:
    return DIRECTIONS["ap" if metric.startswith("ap:") else metric]


def per_training(frame: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """One row per (training, metric): the cell's axes, ``metric`` and ``value``.

    Scalars come from the clean row (``attack='none'``); ``ap:<attack>`` from attack rows.
    Rows not ``ok`` are left out (``summary.json`` counts them).
    """
    keys = [a for a in axes if a in frame.columns]
    used = [*keys, *(c for c in (*SCALARS, "attack", "ap") if c in frame and c not in keys)]
    ok = frame.loc[frame["status"] == "ok", used]  # copy only the columns used
    clean = ok[ok["attack"] == "none"]
    parts = []
    scalars = [m for m in SCALARS if m in clean.columns and clean[m].notna().any()]
    if scalars:
        melted = clean[[*keys, *scalars]].melt(keys, scalars, "metric", "value")
        parts.append(melted)
    attacked = ok[(ok["attack"] != "none") & ok["ap"].notna()]
    if len(attacked):
        rows = attacked[keys].copy()
        attack = attacked["attack"].astype("category")  # one string op per attack name
        rows["metric"] = attack.cat.rename_categories(lambda a: f"ap:{a}").astype(str)
        rows["value"] = attacked["ap"].astype(float)
        parts.append(rows)
    if not parts:
        return pd.DataFrame(columns=[*keys, "metric", "value"])
    long = pd.concat(parts, ignore_index=True)
    long["value"] = pd.to_numeric(long["value"], errors="coerce").astype(float)
    return long[long["value"].notna()].reset_index(drop=True)


def bootstrap_ci(values: np.ndarray) -> tuple[float, float]:
    """95% percentile-bootstrap CI of the mean of one sample (n=1: [v, v])."""
    lo, hi = bootstrap_cis([np.asarray(values, dtype=float)])
    return float(lo[0]), float(hi[0])


def bootstrap_cis(samples: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """CI bounds of each sample's mean; samples of one size share resampling weights."""
    lo, hi = np.full(len(samples), np.nan), np.full(len(samples), np.nan)
    sizes: dict[int, list[int]] = {}
    for i, sample in enumerate(samples):
        sizes.setdefault(len(sample), []).append(i)
    alpha = (1 - LEVEL) / 2
    for n, which in sizes.items():
        if n == 0:
            continue
        values = np.stack([samples[i] for i in which])  # cells x n
        if n == 1:
            lo[which], hi[which] = values[:, 0], values[:, 0]
            continue
        if n > MAX_BOOT_N:  # the percentile bootstrap's limit, at a fraction of the cost
            half = NORMAL_Z * values.std(axis=1, ddof=1) / np.sqrt(n)
            lo[which], hi[which] = values.mean(axis=1) - half, values.mean(axis=1) + half
            continue
        rng = np.random.default_rng([BOOT_SEED, n])
        picks = rng.integers(0, n, size=(N_BOOT, n))
        slots = (np.arange(N_BOOT)[:, None] * n + picks).ravel()
        weights = np.bincount(slots, minlength=N_BOOT * n).reshape(N_BOOT, n) / n
        for start in range(0, len(which), 4096):  # bound the cells x B matrix
            chunk = which[start : start + 4096]
            means = values[start : start + len(chunk)] @ weights.T
            lo[chunk], hi[chunk] = np.quantile(means, [alpha, 1 - alpha], axis=1)
    return lo, hi


def by_axis_table(long: pd.DataFrame, cell_axes: list[str]) -> pd.DataFrame:
    """One row per cell: the axes, ``cell`` (a label), then ``<metric>_<stat>`` columns."""
    keys = [*cell_axes, "metric"]
    groups = long.groupby(keys, observed=True, dropna=False, sort=True)["value"]
    stats = groups.agg(["mean", "std", "count"]).rename(columns={"count": "n"})
    codes = groups.ngroup().to_numpy()  # group numbers in the order of ``stats``' rows
    order = np.argsort(codes, kind="stable")
    bounds = np.cumsum(np.bincount(codes, minlength=len(stats)))[:-1]
    samples = np.split(long["value"].to_numpy(dtype=float)[order], bounds)
    stats["ci_lo"], stats["ci_hi"] = bootstrap_cis(samples)
    stats["std"] = stats["std"].fillna(0.0)
    wide = stats.unstack("metric") if cell_axes else stats.unstack("metric").to_frame().T
    metrics = sorted({m for _, m in wide.columns}, key=_metric_order)
    wide = wide.reindex(columns=[(s, m) for m in metrics for s in STATS])
    wide.columns = [f"{m}_{s}" for s, m in wide.columns]
    table = wide.reset_index() if cell_axes else wide.reset_index(drop=True)
    for column in table.columns:
        if column.endswith("_n"):
            table[column] = table[column].fillna(0).astype(int)
    table.insert(0, "cell", cell_labels(table, cell_axes))
    return table


def _metric_order(metric: str) -> tuple[int, str]:
    return (SCALARS.index(metric), "") if metric in SCALARS else (len(SCALARS), metric)


def cell_labels(table: pd.DataFrame, cell_axes: list[str]) -> list[str]:
    """``lr=0.01 partition=agg`` per row; ``all`` when the sweep varies only the seed."""
    if not cell_axes:
        return ["all"] * len(table)
    rows = table[cell_axes].to_dict("records")
    return [" ".join(f"{a}={_show(r[a])}" for a in cell_axes) for r in rows]


def _show(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


def metrics_of(table: pd.DataFrame) -> list[str]:
    return [c[: -len("_mean")] for c in table.columns if c.endswith("_mean")]


def best_cells(table: pd.DataFrame, cell_axes: list[str]) -> dict[str, Any]:
    """Per metric: the best cell by mean (direction stated), its CI, and the cells whose
    CI overlaps it (not distinguishable from the best with these seeds)."""
    out: dict[str, Any] = {
        "directions": {m: direction(m) for m in metrics_of(table)},
        "note": "mp: higher is better; ap:<attack> (attack performance), rounds, comm_bytes, "
        "train_seconds, epsilon, rounds_to_target: lower is better. CI: 95% bootstrap "
        "of the mean over seeds; 'overlapping' cells cannot be told apart from the best.",
        "axes": cell_axes,
        "metrics": {},
    }
    for metric in metrics_of(table):
        rows = table[table[f"{metric}_n"] > 0]
        if rows.empty:
            continue
        means = rows[f"{metric}_mean"]
        best = rows.loc[means.idxmax() if direction(metric) == "max" else means.idxmin()]
        lo, hi = best[f"{metric}_ci_lo"], best[f"{metric}_ci_hi"]
        overlap = rows[(rows[f"{metric}_ci_hi"] >= lo) & (rows[f"{metric}_ci_lo"] <= hi)]
        overlap = overlap[overlap["cell"] != best["cell"]]
        out["metrics"][metric] = {
            "direction": direction(metric),
            "best": _cell(best, metric, cell_axes),
            "overlapping": [_cell(r, metric, cell_axes) for _, r in overlap.iterrows()],
        }
    return out


def _cell(row: pd.Series, metric: str, cell_axes: list[str]) -> dict[str, Any]:
    return {
        "cell": row["cell"],
        "axes": {a: _plain(row[a]) for a in cell_axes},
        "mean": float(row[f"{metric}_mean"]),
        "ci": [float(row[f"{metric}_ci_lo"]), float(row[f"{metric}_ci_hi"])],
        "n": int(row[f"{metric}_n"]),
    }


def _plain(value: Any) -> Any:
    """A JSON value: numpy scalars unwrapped, missing as None."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if isinstance(value, np.generic) else value
