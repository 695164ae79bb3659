"""The report's figures (matplotlib, Agg backend): AP-MP per attack with the Pareto front,
rank vs β with Kendall τ, DCS-gap distributions per attack type.

Every figure plots already aggregated tables (a few hundred points), never the raw rows,
so plotting cost does not grow with the number of records.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from analysis.gaps import Compare
from analysis.plot_jobs import WORKERS, Figures, PlotPool

if TYPE_CHECKING:
    from analysis.report import Report

DPI = 90
MAX_PANELS = 6  # scenarios per figure; more are listed in the figure title as omitted
MAX_LEGEND = 20
PLOT_WORKERS = WORKERS
# Titles at a fixed height: matplotlib otherwise lays out every y tick label again per
# title to check that no top tick or offset text collides (none here: ticks are at the
# bottom), about a sixth of a figure's cost; the images are the same.
TITLE_Y = 1.0
TOP_LINES = 12  # lines in the rank-vs-beta plot (every defense is in the CSV)


def pareto_mask(mp: np.ndarray, ap: np.ndarray) -> np.ndarray:
    """True for points no other point beats on both (higher-or-equal MP, lower-or-equal AP,
    one strictly): the best privacy-utility trade-offs. O(n log n): sort by MP descending,
    a point is optimal iff its AP is below every AP seen at a higher MP."""
    order = np.lexsort((ap, -mp))  # MP descending, ties: lower AP first
    best = np.inf
    mask = np.zeros(len(mp), dtype=bool)
    for i in order:
        if ap[i] < best:
            mask[i] = True
            best = ap[i]
    return mask


def _sizes(strength: pd.Series) -> np.ndarray:
    """Marker area by strength rank within its defense (strengths span 1e-4…1e4)."""
    ranks = strength.rank(method="dense").fillna(1.0).to_numpy()
    top = max(ranks.max(), 1.0)
    return 30.0 + 170.0 * (ranks - 1.0) / max(top - 1.0, 1.0)


def _panels(n: int, width: float = 4.6) -> tuple[plt.Figure, list[plt.Axes]]:
    cols = min(n, 3)
    rows = int(np.ceil(n / cols))
    fig = plt.figure(figsize=(width * cols + 2.2, 4.0 * rows))
    grid = fig.add_gridspec(rows, cols)
    axes = [fig.add_subplot(grid[i // cols, i % cols]) for i in range(n)]  # only those shown
    fig.subplots_adjust(left=0.07, right=0.80, top=0.86, bottom=0.12, wspace=0.3, hspace=0.4)
    return fig, axes


def _colors(names: list[str]) -> dict[str, tuple[float, ...]]:
    palette = plt.cm.tab20.colors
    return {name: palette[i % len(palette)] for i, name in enumerate(names)}


def plot_ap_mp(points: pd.DataFrame, attack: str, path: Path) -> None:
    """One panel per scenario; one scatter call per panel (colors and sizes as arrays)."""
    scenarios = list(points["scenario"].unique())[:MAX_PANELS]
    fig, axes = _panels(len(scenarios))
    kind = str(points["attack_type"].iloc[0])
    defended = sorted({str(d) for d in points["defense"]} - {"none"})
    colors = _colors(defended)
    for ax, scenario in zip(axes, scenarios, strict=True):
        part = points[points["scenario"] == scenario]
        base = (part["defense"] == "none").to_numpy()
        rest = part[~base]
        sizes = rest.groupby("defense", observed=True)["defense_param"].transform(
            lambda s: pd.Series(_sizes(s), index=s.index)
        )
        ax.scatter(
            rest["mp"],
            rest["ap"],
            s=sizes,
            alpha=0.8,
            zorder=3,
            c=[colors[str(d)] for d in rest["defense"]],
        )
        ax.scatter(
            part.loc[base, "mp"], part.loc[base, "ap"], marker="*", s=260, c="black", zorder=4
        )
        front = part[pareto_mask(part["mp"].to_numpy(), part["ap"].to_numpy())].sort_values("mp")
        ax.plot(front["mp"], front["ap"], ls="--", c="grey", lw=1, zorder=2)
        ax.scatter(
            front["mp"],
            front["ap"],
            s=260,
            facecolors="none",
            edgecolors="red",
            linewidths=1.2,
            zorder=5,
        )
        ax.set_title(str(scenario), fontsize=8, y=TITLE_Y)
        ax.set_xlabel("MP (main-task performance)")
        ax.set_ylabel("AP (attack performance)")
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], marker="*", ls="", c="black", ms=12, label="undefended")]
    handles += [
        Line2D([], [], marker="o", ls="", c=colors[d], label=d) for d in defended[:MAX_LEGEND]
    ]
    handles += [
        Line2D(
            [],
            [],
            marker="o",
            ls="--",
            c="grey",
            mfc="none",
            mec="red",
            ms=12,
            label="Pareto-optimal (max MP, min AP)",
        )
    ]
    fig.legend(
        handles=handles,
        loc="center right",
        fontsize=7,
        title="marker size = strength",
        title_fontsize=7,
    )
    fig.suptitle(
        f"AP vs MP under {attack} ({kind}); better = bottom right"
        + _omitted(len(points["scenario"].unique()), "scenarios")
    )
    _save(fig, path)


def _omitted(total: int, what: str) -> str:
    return f"\n(first {MAX_PANELS} of {total} {what} shown)" if total > MAX_PANELS else ""


def plot_beta(table: pd.DataFrame, path: Path) -> None:
    """Rank vs β for the top defenses at β = 0.5 (the CSV has all), and Kendall τ vs β."""
    ranked = table.dropna(subset=["rank"])
    scenarios = list(ranked["scenario"].unique())[:MAX_PANELS]
    fig, axes = plt.subplots(
        len(scenarios),
        2,
        figsize=(12, 3.8 * len(scenarios)),
        squeeze=False,
        gridspec_kw={"width_ratios": [3, 1]},
    )
    fig.subplots_adjust(left=0.07, right=0.97, top=0.9, bottom=0.1, wspace=0.55, hspace=0.45)
    for (ax, tau_ax), scenario in zip(axes, scenarios, strict=True):
        part = ranked[ranked["scenario"] == scenario]
        label = part["defense"].astype(str) + part["strength"].map(
            lambda v: "" if pd.isna(v) else f" {v:g}"
        )
        part = part.assign(label=label)
        ref = part[part["beta"] == 0.5].sort_values("rank")
        shown = list(ref["label"].head(TOP_LINES))
        shown += [x for x in ref["label"] if x == "none" and x not in shown]
        wide = part[part["label"].isin(shown)].pivot_table(
            index="beta", columns="label", values="rank", aggfunc="first"
        )[shown]
        ax.plot(wide.index, wide.to_numpy(), marker="o", ms=3, lw=1)
        ax.legend(shown, fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
        ax.invert_yaxis()
        ax.set_xlabel("β (weight on MP)")
        ax.set_ylabel("C-DCS rank (1 = best)")
        ax.set_title(
            f"{scenario}: top {len(shown)} of {part['label'].nunique()} at β = 0.5",
            fontsize=8,
            y=TITLE_Y,
        )
        taus = part.groupby("beta")["kendall_tau_vs_0.5"].first()
        tau_ax.plot(taus.index, taus.to_numpy(), marker="o", c="black", label="Kendall τ")
        tau_ax.set_ylim(-1.05, 1.05)
        tau_ax.axhline(0, c="grey", lw=0.8)
        tau_ax.set_xlabel("β")
        tau_ax.set_ylabel("Kendall τ vs β = 0.5 (all)")
        tau_ax.set_title("ranking stability", fontsize=8, y=TITLE_Y)
        tau_ax.legend(fontsize=7)
    fig.suptitle(
        "C-DCS ranking sensitivity to β" + _omitted(ranked["scenario"].nunique(), "scenarios")
    )
    _save(fig, path)


def plot_gaps(pairs: pd.DataFrame, compare: Compare, path: Path) -> None:
    kinds = [k for k in ("LI", "FR", "TB", "NTB") if k in set(pairs["attack_type"].astype(str))]
    kinds += sorted(set(pairs["attack_type"].astype(str)) - set(kinds))
    fig, axes = _panels(max(len(kinds), 1))
    for ax, kind in zip(axes, kinds, strict=False):
        gap = pairs.loc[pairs["attack_type"].astype(str) == kind, "gap"].to_numpy()
        share = float((gap > 0).mean()) if len(gap) else float("nan")
        ax.hist(
            gap,
            bins=min(40, max(5, len(gap) // 5)),
            color="tab:blue",
            alpha=0.8,
            label=f"{len(gap)} pairs, {share:.0%} > 0",
        )
        ax.axvline(0, c="red", ls="--", lw=1.2, label="no difference")
        ax.axvline(
            float(np.mean(gap)) if len(gap) else 0,
            c="black",
            lw=1,
            label=f"mean {np.mean(gap) if len(gap) else float('nan'):+.3f}",
        )
        ax.set_title(f"{kind} attacks", fontsize=9, y=TITLE_Y)
        ax.set_xlabel(f"DCS gap ({compare.label})")
        ax.set_ylabel("pairs")
        ax.legend(fontsize=7)
    fig.suptitle(f"DCS gap by attack type: {compare.axis} {compare.label}")
    _save(fig, path)


def _save(fig: plt.Figure, path: Path) -> None:
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def write_plots(report: Report, folder: Path, compares: list[Compare]) -> None:
    """Every DCS figure, drawn by ``PLOT_WORKERS`` forked workers (text layout in
    matplotlib is the cost; the figures are independent). ``python -m analysis`` instead
    draws them while it computes the tables (``analysis/plot_jobs.py``)."""
    with PlotPool(PLOT_WORKERS) as pool:
        figures = Figures(pool, folder, compares)
        figures.ready("dcs", report.dcs)
        figures.ready("beta", report.beta)
        for compare in compares:
            figures.ready("gaps", (compare.axis, report.gaps[compare.axis]))
        pool.join()
