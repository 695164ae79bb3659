"""One figure per sweep axis: each metric against the axis value, a line per level of the
next axis, the bootstrap 95% CI over seeds as a band (matplotlib, Agg backend).

Axes beyond the two plotted are pooled (the title says which): the figure answers "how
does MP move with lr", and ``by_axis.csv`` keeps every cell apart.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.by_axis import by_axis_table, direction
from analysis.plot_jobs import axis_jobs

DPI = 90
MAX_LINES = 8  # levels of the line axis drawn; more are named in the title as omitted
LOG_SPAN = 100.0  # a log x axis when positive values span more than two decades


def numeric(values: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)


def write_axis_plots(long: pd.DataFrame, cell_axes: list[str], folder: Path) -> list[Path]:
    """``axis_<axis>.png`` for every cell axis; returns the files written."""
    jobs = axis_jobs(long, cell_axes, folder)
    for args in jobs:
        plot_axis(*args)
    return [args[-1] for args in jobs]


def plot_axis(
    long: pd.DataFrame,
    axis: str,
    line_axis: str | None,
    others: list[str],
    metrics: list[str],
    path: Path,
) -> None:
    keys = [axis] + ([line_axis] if line_axis else [])
    table = by_axis_table(long[long["metric"].isin(metrics)], keys)
    fig, panels = plt.subplots(1, len(metrics), figsize=(5.0 * len(metrics) + 1.5, 4.2))
    panels = np.atleast_1d(panels)
    levels = list(pd.unique(table[line_axis])) if line_axis else [None]
    shown = levels[:MAX_LINES]
    colors = plt.cm.tab10.colors
    for ax, metric in zip(panels, metrics, strict=True):
        for j, level in enumerate(shown):
            part = table if level is None else table[_same(table[line_axis], level)]
            part = part[part[f"{metric}_n"] > 0]
            if part.empty:
                continue
            x = _positions(table[axis], part[axis])
            order = np.argsort(x)
            label = "all" if level is None else f"{line_axis}={_fmt(level)}"
            color = colors[j % len(colors)]
            ax.plot(x[order], part[f"{metric}_mean"].to_numpy()[order], "o-", color=color,
                    label=label)  # fmt: skip
            lo, hi = (part[f"{metric}_ci_{s}"].to_numpy()[order] for s in ("lo", "hi"))
            ax.fill_between(x[order], lo, hi, color=color, alpha=0.2, linewidth=0)
        _x_axis(ax, table[axis], axis)
        better = "higher" if direction(metric) == "max" else "lower"
        ax.set_ylabel(f"{metric} (mean over seeds, 95% CI)")
        ax.set_title(f"{metric} vs {axis} ({better} is better)", y=1.0)  # see plots.TITLE_Y
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title=None if line_axis is None else line_axis)
    pooled = [a for a in others if a != line_axis]
    title = f"{axis}: mean over seeds with bootstrap 95% CI"
    if pooled:
        title += f"; pooled over {', '.join(pooled)}"
    if len(levels) > len(shown):
        title += f"; {len(levels) - len(shown)} more {line_axis} levels omitted"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _same(column: pd.Series, level: object) -> pd.Series:
    if pd.isna(level):
        return column.isna()
    return column == level


def _positions(all_values: pd.Series, values: pd.Series) -> np.ndarray:
    """Numeric axes at their values; others at the index of their (sorted) level."""
    if numeric(all_values):
        return values.to_numpy(dtype=float)
    levels = sorted({str(v) for v in all_values})
    return np.array([levels.index(str(v)) for v in values], dtype=float)


def _x_axis(ax: plt.Axes, values: pd.Series, axis: str) -> None:
    if numeric(values):
        finite = values.dropna().to_numpy(dtype=float)
        positive = finite[finite > 0]
        if len(positive) == len(finite) and len(finite) and finite.max() / finite.min() > LOG_SPAN:
            ax.set_xscale("log")
        ax.set_xlabel(axis + (" (log scale)" if ax.get_xscale() == "log" else ""))
        return
    levels = sorted({str(v) for v in values})
    ax.set_xticks(range(len(levels)), levels, rotation=30 if len(levels) > 4 else 0)
    ax.set_xlabel(axis)


def _fmt(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
