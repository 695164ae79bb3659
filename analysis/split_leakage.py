"""Leakage against the measured party importance of the feature split (VertiBench splits).

Why measured and not the knob: a Dirichlet α draws *which* party gets the signal at random
(α = 0.1 gives one party nearly all of it, but which one depends on the seed), so the
records' ``split_importance`` (the passive parties' share of the Shapley importance of the
split that actually ran) is the x-axis; α only sets how spread the draws are.

Two tables, both on the chance-aware advantage (``ap_advantage``, 0 = no better than the
attack's no-information baseline):

- ``bins``: per (dataset, attack, defense) and importance bin (quintiles of [0, 1]), the
  mean advantage over the trainings in the bin with its interval (``uncertainty.py``:
  t over trainings, the test set's error added; none below 3 trainings);
- ``slopes``: per (dataset, attack, defense), the least-squares slope of advantage on
  passive importance with its 95 % t interval, and Spearman's ρ: a slope whose interval
  excludes 0 says leakage does depend on who holds the signal.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.uncertainty import cell_stats, t_quantile

EDGES = np.linspace(0.0, 1.0, 6)  # importance bins: [0, .2), [.2, .4), ..., [.8, 1]
KEYS = ["dataset", "attack", "defense_label"]


def attack_rows(records: pd.DataFrame) -> pd.DataFrame:
    """Ok attack rows with a measured split and an advantage; ``defense_label`` joins the
    defense and its strength (``gdp 0.01``)."""
    if "split_importance" not in records.columns:
        return records.iloc[0:0].assign(defense_label=pd.Series(dtype=str))
    rows = records[
        (records["status"] == "ok")
        & (records["attack"] != "none")
        & records["split_importance"].notna()
        & records["ap_advantage"].notna()
    ].copy()
    strength = rows["defense_param"].map(lambda v: "" if pd.isna(v) else f" {v:g}")
    rows["defense_label"] = rows["defense"].astype(str) + strength
    return rows


def bins(records: pd.DataFrame) -> pd.DataFrame:
    """Mean advantage with its interval per key and importance bin (see the module doc)."""
    rows = attack_rows(records)
    if rows.empty:
        return pd.DataFrame()
    index = np.clip(np.digitize(rows["split_importance"], EDGES[1:-1]), 0, len(EDGES) - 2)
    labels = [f"[{lo:.1f}, {hi:.1f})" for lo, hi in pairwise(EDGES)]
    labels[-1] = labels[-1][:-1] + "]"  # the last bin holds 1.0 too
    rows["importance_bin"] = [labels[i] for i in index]
    out = cell_stats(rows, [*KEYS, "importance_bin"], "ap_advantage", "ap_advantage_se")
    out = out.rename(columns={"n": "trainings"})
    return out.sort_values([*KEYS, "importance_bin"]).reset_index(drop=True)


def slopes(records: pd.DataFrame) -> pd.DataFrame:
    """Per key: slope of advantage on passive importance (95 % t interval), Spearman's ρ,
    the trainings used and the importance range they cover."""
    from scipy.stats import spearmanr

    out = []
    for key, part in attack_rows(records).groupby(KEYS, observed=True, sort=True):
        x = part["split_importance"].to_numpy(float)
        y = part["ap_advantage"].to_numpy(float)
        n = len(x)
        row = dict(zip(KEYS, key, strict=True))
        row.update(trainings=n, importance_min=float(x.min()), importance_max=float(x.max()))
        row.update(mean=float(y.mean()), max=float(y.max()))
        row.update(slope=np.nan, lo=np.nan, hi=np.nan, rho=np.nan)
        if n >= 3 and np.ptp(x) > 0:
            slope, intercept = np.polyfit(x, y, 1)
            resid = y - (slope * x + intercept)
            se = np.sqrt(resid @ resid / (n - 2) / ((x - x.mean()) @ (x - x.mean())))
            half = float(t_quantile(n - 2)) * se
            rho = spearmanr(x, y).statistic if np.ptp(y) > 0 else np.nan
            row.update(slope=slope, lo=slope - half, hi=slope + half, rho=float(rho))
        out.append(row)
    return pd.DataFrame(out)


def verdict(row: pd.Series) -> str:
    """One reading of a slope row: rises, falls or no dependence shown."""
    if row["max"] <= 0:
        return "at chance in every training (advantage 0)"
    if pd.isna(row["slope"]):
        return "too few trainings or no spread in importance"
    if row["lo"] > 0:
        return "leaks more as the passive party holds more of the signal"
    if row["hi"] < 0:
        return "leaks less as the passive party holds more of the signal"
    return "no dependence shown (interval contains 0)"


def plot(records: pd.DataFrame, path: Path) -> None:
    """One panel per (dataset, attack): each training's advantage against its measured
    passive importance, one colour per defense, with each defense's least-squares line."""
    import matplotlib.pyplot as plt

    from analysis.plots import MAX_PANELS, _panels, _save, defense_styles

    rows = attack_rows(records)
    panels = list(rows.groupby(["dataset", "attack"], observed=True, sort=True))[:MAX_PANELS]
    if not panels:
        return
    fig, axes = _panels(len(panels))
    styles = defense_styles(rows["defense"])
    for ax, ((dataset, attack), part) in zip(axes, panels, strict=True):
        for label, one in part.groupby("defense_label", observed=True, sort=True):
            style = styles[str(one["defense"].iloc[0])]
            x, y = one["split_importance"].to_numpy(float), one["ap_advantage"].to_numpy(float)
            ax.scatter(x, y, c=[style.color], marker=style.marker, s=28, alpha=0.8, label=label)
            if len(x) >= 3 and np.ptp(x) > 0:
                slope, intercept = np.polyfit(x, y, 1)
                ax.plot([0, 1], [intercept, slope + intercept], c=style.color, lw=1)
        ax.axhline(0.0, ls="--", c="black", lw=1, alpha=0.6)  # the no-information baseline
        ax.set(title=f"{dataset} / {attack}", xlim=(-0.02, 1.02))
        ax.set_xlabel("passive parties' share of feature importance (measured)")
        ax.set_ylabel("attack advantage over chance")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="center right", title="defense")
    fig.suptitle("Leakage against the measured party importance of the split")
    _save(fig, path)
    plt.close("all")
