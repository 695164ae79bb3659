"""``by_axis.csv`` and ``best.json``: every metric per cell of the sweep's axes, over seeds.

A cell is one combination of the varying axes other than ``seed``; its trainings are
its seeds. Per metric the table gives mean, std, n and a 95% interval of the mean: a t
interval over the seeds widened by the test set's sampling error where the metric has one
(MP, attack advantage), and none below three seeds (analysis/uncertainty.py says why).
Metrics: the clean row's scalars, ``ap:<attack>`` (the attack's AP as VFLAIR scores it)
and ``adv:<attack>`` (its advantage over a no-information guess, 0..1).

``best.json`` names, per metric, the best cell, the cells exactly tied with it and those
whose intervals overlap it; a metric that never varied gets no best. MP is selected on the
validation rows (``val_mp``, the trial's ``val_ratio``) and the test MP of the selected
cell is reported: choosing on the test rows a number is then reported on would flatter it.
Without validation rows (``val_ratio`` 0, the paper setting of a grid; records written
before ``val_mp`` existed) no cell is named best by MP, and ``best.json`` says why.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from analysis.load import as_str
from analysis.uncertainty import TIE, half_width

SCALARS = (
    "mp",
    "val_mp",
    "rounds",
    "comm_bytes",
    "train_seconds",
    "epsilon",
    "rounds_to_target",
)
# Which way is better, per metric: what ``best.json`` picks and states.
DIRECTIONS = {
    "mp": "max",
    "val_mp": "max",
    "rounds": "min",
    "comm_bytes": "min",
    "train_seconds": "min",
    "epsilon": "min",
    "rounds_to_target": "min",
    "ap": "min",  # ap:<attack>: the attack's performance; a lower one means less leakage
    "adv": "min",  # adv:<attack>: its advantage over chance; lower means less leakage
}
STATS = ("mean", "std", "n", "ci_lo", "ci_hi")
# a scalar's sampling error column (test rows; validation rows for val_mp), where it has one
SE_OF = {"mp": "mp_se", "val_mp": "val_mp_se"}
SELECTED_ON = {"mp": "val_mp"}  # a metric whose best cell is chosen on another one


def bounded(metric: str) -> bool:
    """Whether a metric is a share in [0, 1] (MP, AP, advantage), whose interval is clipped
    to that range (a t interval knows no bounds)."""
    return metric in ("mp", "val_mp") or metric.startswith(("ap:", "adv:"))


def direction(metric: str) -> str:
    return DIRECTIONS[metric.split(":", 1)[0] if ":" in metric else metric]


def per_training(frame: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """One row per (training, metric): the cell's axes, ``metric`` and ``value``.

    Scalars come from the clean row (``attack='none'``); ``ap:<attack>`` and
    ``adv:<attack>`` from attack rows. ``se``: the value's test-set sampling error (MP,
    advantage; 0 where a metric has none). Rows not ``ok`` are left out (``summary.json``
    counts them).
    """
    keys = [a for a in axes if a in frame.columns]
    extra = ("attack", "ap", "ap_advantage", "ap_advantage_se", "mp_se", "val_mp_se")
    used = [*keys, *(c for c in (*SCALARS, *extra) if c in frame and c not in keys)]
    ok = frame.loc[frame["status"] == "ok", used]  # copy only the columns used
    clean = ok[ok["attack"] == "none"]
    parts = []
    scalars = [m for m in SCALARS if m in clean.columns and clean[m].notna().any()]
    for metric in scalars:
        rows = clean[keys].copy()
        rows["metric"] = metric
        rows["value"] = clean[metric].astype(float)
        se = SE_OF.get(metric)
        rows["se"] = clean[se].astype(float) if se in clean.columns else 0.0
        parts.append(rows)
    attacked = ok[ok["attack"] != "none"]
    attack = attacked["attack"].astype("category")  # one string op per attack name
    for prefix, column, se in (("ap", "ap", None), ("adv", "ap_advantage", "ap_advantage_se")):
        if column not in attacked.columns:
            continue
        has = attacked[column].notna().to_numpy()
        if not has.any():
            continue
        rows = attacked.loc[has, keys].copy()
        names = attack[has].cat.rename_categories(lambda a, p=prefix: f"{p}:{a}")
        rows["metric"] = as_str(names)
        rows["value"] = attacked.loc[has, column].astype(float)
        rows["se"] = attacked.loc[has, se].astype(float) if se else 0.0
        parts.append(rows)
    if not parts:
        return pd.DataFrame(columns=[*keys, "metric", "value", "se"])
    long = pd.concat(parts, ignore_index=True)
    long["value"] = pd.to_numeric(long["value"], errors="coerce").astype(float)
    long["se"] = pd.to_numeric(long["se"], errors="coerce").astype(float).fillna(0.0)
    return long[long["value"].notna()].reset_index(drop=True)


def by_axis_table(long: pd.DataFrame, cell_axes: list[str]) -> pd.DataFrame:
    """One row per cell: the axes, ``cell`` (a label), then ``<metric>_<stat>`` columns."""
    keys = [*cell_axes, "metric"]
    if "se" not in long.columns:
        long = long.assign(se=0.0)
    groups = long.groupby(keys, observed=True, dropna=False, sort=True)
    stats = groups["value"].agg(["mean", "std", "count"]).rename(columns={"count": "n"})
    half = half_width(stats["std"].to_numpy(), stats["n"].to_numpy(), groups["se"].mean())
    stats["ci_lo"], stats["ci_hi"] = stats["mean"] - half, stats["mean"] + half
    metric = stats.index.get_level_values("metric").to_series(index=stats.index)
    unit = metric.map(bounded).to_numpy(dtype=bool)  # shares: the interval stays in [0, 1]
    stats.loc[unit, "ci_lo"] = stats.loc[unit, "ci_lo"].clip(lower=0.0)
    stats.loc[unit, "ci_hi"] = stats.loc[unit, "ci_hi"].clip(upper=1.0)
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
    """Per metric: the best cell by mean (direction stated), the cells exactly tied with
    it, and those whose interval overlaps its own (not distinguishable with these seeds;
    none can be named below three seeds). A metric with one value everywhere gets no best.

    MP's best is chosen on ``val_mp`` (``SELECTED_ON``): ties and overlaps are the
    validation MP's, and the cells carry their test MP (``mean``, ``ci``) beside
    ``selected_mean``. Without validation MP no MP best is named (``note`` says why);
    ``val_mp`` gets no entry of its own (it is MP's selection).
    """
    out: dict[str, Any] = {
        "directions": {m: direction(m) for m in metrics_of(table) if m != "val_mp"},
        "note": "mp: higher is better, selected on the validation rows (val_mp) and reported "
        "on the test rows; ap:<attack> (attack performance), adv:<attack> (its "
        "advantage over a no-information guess), rounds, comm_bytes, train_seconds, epsilon, "
        "rounds_to_target: lower is better. ci: 95% interval of the mean over seeds with the "
        "test-set error, only with >= 3 seeds (else null). 'tied': exactly the best mean; "
        "'overlapping': intervals overlap the best's (cannot be told apart).",
        "axes": cell_axes,
        "metrics": {},
    }
    metrics = metrics_of(table)
    for metric in metrics:
        if metric == "val_mp":
            continue
        on = SELECTED_ON.get(metric, metric)
        entry: dict[str, Any] = {"direction": direction(metric)}
        if on != metric:
            entry["selected_on"] = on
        if on not in metrics:
            if f"{metric}_n" in table and (table[f"{metric}_n"] > 0).any():
                out["metrics"][metric] = entry
                entry.update(best=None, note=NO_VALIDATION)
            continue
        rows = table[(table[f"{on}_n"] > 0) & (table[f"{metric}_n"] > 0)]
        if rows.empty:
            continue
        out["metrics"][metric] = entry
        means = rows[f"{on}_mean"]
        if means.max() - means.min() <= TIE:
            entry.update(best=None, note=f"never varied: {means.iloc[0]:g} in every cell")
            continue
        best = rows.loc[means.idxmax() if direction(on) == "max" else means.idxmin()]
        others = rows[rows["cell"] != best["cell"]]
        tied = others[(others[f"{on}_mean"] - best[f"{on}_mean"]).abs() <= TIE]
        lo, hi = best[f"{on}_ci_lo"], best[f"{on}_ci_hi"]
        overlap = others[(others[f"{on}_ci_hi"] >= lo) & (others[f"{on}_ci_lo"] <= hi)]
        entry["best"] = _cell(best, metric, cell_axes, on)
        entry["tied"] = [_cell(r, metric, cell_axes, on) for _, r in tied.iterrows()]
        entry["overlapping"] = [_cell(r, metric, cell_axes, on) for _, r in overlap.iterrows()]
        if not np.isfinite(lo):
            entry["note"] = "fewer than 3 seeds: no interval, so no cell can be told apart"
    return out


NO_VALIDATION = (
    "not selected: no validation rows (val_ratio 0, or records without val_mp); choosing "
    "the best cell on the test MP it reports would flatter it. Set val_ratio > 0 to select"
)


def _cell(row: pd.Series, metric: str, cell_axes: list[str], on: str) -> dict[str, Any]:
    out = {
        "cell": row["cell"],
        "axes": {a: _plain(row[a]) for a in cell_axes},
        "mean": float(row[f"{metric}_mean"]),
        "ci": _interval(row[f"{metric}_ci_lo"], row[f"{metric}_ci_hi"]),
        "n": int(row[f"{metric}_n"]),
    }
    if on != metric:  # what it was chosen on, beside what is reported
        out["selected_mean"] = float(row[f"{on}_mean"])
        out["selected_ci"] = _interval(row[f"{on}_ci_lo"], row[f"{on}_ci_hi"])
    return out


def _plain(value: Any) -> Any:
    """A JSON value: numpy scalars unwrapped, missing as None."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if isinstance(value, np.generic) else value


def _interval(lo: float, hi: float) -> list[float] | None:
    return [float(lo), float(hi)] if np.isfinite(lo) and np.isfinite(hi) else None
