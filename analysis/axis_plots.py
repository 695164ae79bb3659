"""One figure per sweep axis: each metric against the axis value, a line per level of the
next axis, the mean over seeds with by_axis's 95% interval as error bars where a cell
has at least 3 seeds; the subtitle says which (matplotlib, Agg backend).

Axes beyond the two plotted are pooled (the title says which): the figure answers "how
does MP move with lr", and ``by_axis.csv`` keeps every cell apart.

A sweep that varies ``defense`` and its strength ``defense_param`` gets a panel per
defense wherever defenses would be drawn (``plot_jobs.split_by_defense``): one defense's
strengths (GS's percentages, G-DP's noise scales, MID's λ) mean nothing on another's
axis. ``axis_defense.png`` then plots each metric against each defense's own strengths,
the undefended value as a horizontal reference; ``defense_param`` gets no figure.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.by_axis import by_axis_table, direction
from analysis.plot_jobs import axis_jobs, split_by_defense
from analysis.plots import defense_order, defense_styles
from analysis.uncertainty import MIN_SEEDS

DPI = 90
MAX_LINES = 8  # levels of the line axis drawn; more are named in the title as omitted
MAX_DEFENSES = 8  # defense panels per row; more are named in the title as omitted
LOG_SPAN = 100.0  # a log x axis when positive values span more than two decades
STRENGTH_LOG_SPAN = 10.0  # a defense's strengths: log when they span more than a decade
NO_DEFENSE = "no defense"
STRENGTH = "defense_param"


def numeric(values: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)


def write_axis_plots(long: pd.DataFrame, cell_axes: list[str], folder: Path) -> list[Path]:
    """``axis_<axis>.png`` for every cell axis drawn; returns the files written."""
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
    if STRENGTH in long.columns and split_by_defense(axis, line_axis, [*others, axis]):
        plot_by_defense(long, axis, line_axis, others, metrics, path)
        return
    keys = [axis] + ([line_axis] if line_axis else [])
    table = by_axis_table(long[long["metric"].isin(metrics)], keys)
    fig, panels = plt.subplots(1, len(metrics), figsize=(5.0 * len(metrics) + 1.5, 4.2))
    panels = np.atleast_1d(panels)
    levels = list(pd.unique(table[line_axis])) if line_axis else [None]
    if line_axis == "defense":
        levels = defense_order(levels)
    shown = levels[:MAX_LINES]
    styles = _line_styles(line_axis, shown)
    bars = False
    for ax, metric in zip(panels, metrics, strict=True):
        for level, (color, marker) in zip(shown, styles, strict=True):
            part = table if level is None else table[_same(table[line_axis], level)]
            part = part[part[f"{metric}_n"] > 0]
            if part.empty:
                continue
            label = "all" if level is None else f"{line_axis}={_fmt(level)}"
            x = _positions(table[axis], part[axis])
            bars |= _line(ax, x, part, metric, color, marker, label)
        _x_axis(ax, table[axis], axis)
        better = "higher" if direction(metric) == "max" else "lower"
        ax.set_ylabel(f"{metric} (mean over seeds)")
        ax.set_title(f"{metric} vs {axis} ({better} is better)", y=1.0)  # see plots.TITLE_Y
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, title=None if line_axis is None else line_axis)
    pooled = [a for a in others if a != line_axis]
    title = f"{axis}: {_drawn(bars, pooled)}"
    if pooled:
        title += f"; pooled over {', '.join(pooled)}"
    if len(levels) > len(shown):
        title += f"; {len(levels) - len(shown)} more {line_axis} levels omitted"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def plot_by_defense(
    long: pd.DataFrame,
    axis: str,
    line_axis: str | None,
    others: list[str],
    metrics: list[str],
    path: Path,
) -> None:
    """A row of panels per metric, a panel per defense (shared y per row).

    ``axis == "defense"``: x = that defense's strengths, a line per level of
    ``line_axis`` (if any), the undefended value a dashed horizontal line with its band.
    Else (``line_axis == "defense"``): x = ``axis``, a line per strength of the defense,
    the undefended value a black line.
    """
    on_strength = axis == "defense"
    x_axis, lines = (STRENGTH, line_axis) if on_strength else (axis, STRENGTH)
    keys = list(dict.fromkeys(k for k in ("defense", x_axis, lines) if k))
    table = by_axis_table(long[long["metric"].isin(metrics)], keys)
    names = table["defense"].astype(str)
    defended = [d for d in defense_order(names) if d != "none"]
    shown = defended[:MAX_DEFENSES]
    undefended = table[names == "none"]
    rows, cols = len(metrics), max(len(shown), 1)
    width, height = 3.2 * cols + 1.2, 3.0 * rows + 1.0
    fig, grid = plt.subplots(rows, cols, figsize=(width, height), squeeze=False, sharey="row")
    # fixed margins in inches (tight_layout would cost a third of the figure on 32 panels)
    fig.subplots_adjust(
        left=0.95 / width, right=1 - 0.25 / width, bottom=0.6 / height, top=1 - 0.95 / height
    )
    fig.subplots_adjust(wspace=0.08, hspace=0.45)
    styles = defense_styles(names)
    bars = False
    for r, metric in enumerate(metrics):
        for c, name in enumerate(shown):
            ax = grid[r, c]
            part = table[(names == name) & (table[f"{metric}_n"] > 0)]
            if on_strength:
                bars |= _strength_panel(ax, part, undefended, metric, lines, table, styles[name])
                if part[STRENGTH].notna().any():
                    label = f"{name} strength ({STRENGTH})"
                    _x_axis(ax, part[STRENGTH], label, STRENGTH_LOG_SPAN)
                else:  # a defense without a strength: its one value at 0
                    ax.set_xticks([0.0], [f"{name} (no {STRENGTH})"])
            else:
                bars |= _level_panel(ax, part, undefended, metric, axis, table)
                _x_axis(ax, table[axis], axis)
            ax.set_title(name, fontsize=9, y=1.0, color=styles[name].color, fontweight="bold")
            ax.grid(alpha=0.3)
            if c == 0:
                better = "higher" if direction(metric) == "max" else "lower"
                ax.set_ylabel(f"{metric} (mean over seeds)\n{better} is better", fontsize=8)
            else:  # the row shares its y axis
                ax.tick_params(labelleft=False)
            if r == 0 and (c == 0 or not on_strength):
                ax.legend(fontsize=7, title=None if on_strength else STRENGTH, title_fontsize=7)
    drawn = "each defense's strengths" if on_strength else f"{axis}, a line per strength"
    pooled = [a for a in others if a not in (line_axis, "defense", STRENGTH, axis)]
    title = f"{', '.join(metrics)} vs {drawn}; a panel per defense;\n{_drawn(bars, pooled)}"
    if pooled:
        title += f"\npooled over {', '.join(pooled)}"
    if len(defended) > len(shown):
        title += f"\n{len(defended) - len(shown)} more defenses omitted: "
        title += ", ".join(defended[len(shown) :])
    fig.suptitle(title, fontsize=10, y=1 - 0.1 / height, va="top")
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _strength_panel(
    ax: plt.Axes,
    part: pd.DataFrame,
    undefended: pd.DataFrame,
    metric: str,
    line_axis: str | None,
    table: pd.DataFrame,
    style: tuple,
) -> bool:
    """One defense against its strengths; the undefended value as a horizontal line."""
    levels = list(pd.unique(table[line_axis]))[:MAX_LINES] if line_axis else [None]
    colors = [style] if line_axis is None else _line_styles(line_axis, levels)
    none = part[STRENGTH].isna().all()  # a defense without a strength: its value at 0
    bars = False
    for level, (color, marker) in zip(levels, colors, strict=True):
        rows = part if level is None else part[_same(part[line_axis], level)]
        suffix = "" if level is None else f"{line_axis}={_fmt(level)}"
        if len(rows):
            x = rows[STRENGTH].to_numpy(dtype=float)
            x = np.zeros(len(x)) if none else x
            bars |= _line(ax, x, rows, metric, color, marker, suffix or "mean")
        ref = undefended if level is None else undefended[_same(undefended[line_axis], level)]
        ref = ref[ref[f"{metric}_n"] > 0]
        if len(ref):
            bars |= _reference(ax, ref, metric, "black" if level is None else color, suffix)
    return bars


def _level_panel(
    ax: plt.Axes,
    part: pd.DataFrame,
    undefended: pd.DataFrame,
    metric: str,
    axis: str,
    table: pd.DataFrame,
) -> bool:
    """One defense against ``axis``, a line per strength; the undefended line in black."""
    strengths = sorted(part[STRENGTH].dropna().unique())
    strengths = (strengths + [np.nan] * bool(part[STRENGTH].isna().any()))[:MAX_LINES]
    shades = plt.cm.viridis(np.linspace(0.0, 0.85, max(len(strengths), 1)))
    bars = False
    for strength, shade in zip(strengths, shades, strict=False):
        rows = part[_same(part[STRENGTH], strength)]
        x = _positions(table[axis], rows[axis])
        label = f"no {STRENGTH}" if np.isnan(strength) else f"{strength:g}"
        bars |= _line(ax, x, rows, metric, tuple(shade), "o", label)
    ref = undefended[undefended[f"{metric}_n"] > 0]
    if len(ref):
        x = _positions(table[axis], ref[axis])
        bars |= _line(ax, x, ref, metric, "black", "*", NO_DEFENSE)
    return bars


def _line(
    ax: plt.Axes,
    x: np.ndarray,
    part: pd.DataFrame,
    metric: str,
    color: object,
    marker: str,
    label: str,
) -> bool:
    """Means as a line, CIs as error bars where they exist; True if any bar is drawn."""
    order = np.argsort(x)
    mean = part[f"{metric}_mean"].to_numpy(dtype=float)[order]
    ax.plot(x[order], mean, ls="-", marker=marker, color=color, label=label)
    ok, lo, hi = _intervals(part, metric)
    ok, lo, hi = ok[order], lo[order], hi[order]
    if not ok.any():
        return False
    yerr = np.vstack([np.clip(mean - lo, 0, None), np.clip(hi - mean, 0, None)])[:, ok]
    ax.errorbar(x[order][ok], mean[ok], yerr=yerr, fmt="none", ecolor=color, capsize=3, lw=1)
    return True


def _reference(ax: plt.Axes, ref: pd.DataFrame, metric: str, color: object, suffix: str) -> bool:
    """The undefended mean as a dashed horizontal line, its CI (if any) as a band."""
    mean = float(ref[f"{metric}_mean"].mean())
    label = NO_DEFENSE + (f" ({suffix})" if suffix else "")
    ax.axhline(mean, ls="--", color=color, lw=1.2, label=label)
    ok, lo, hi = _intervals(ref, metric)
    if len(ref) != 1 or not ok.all():  # one undefended cell per line level
        return False
    ax.axhspan(lo[0], hi[0], color=color, alpha=0.12, lw=0)
    return True


def _intervals(part: pd.DataFrame, metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(drawable, lo, hi): an interval only with finite bounds and n ≥ MIN_SEEDS."""
    lo = part[f"{metric}_ci_lo"].to_numpy(dtype=float)
    hi = part[f"{metric}_ci_hi"].to_numpy(dtype=float)
    n = part[f"{metric}_n"].to_numpy(dtype=float)
    return np.isfinite(lo) & np.isfinite(hi) & (n >= MIN_SEEDS), lo, hi


def _drawn(bars: bool, pooled: list[str]) -> str:
    """What the figure draws, exactly."""
    unit = "trainings" if pooled else "seeds"
    if bars:
        return f"mean over seeds; bars: 95% CI where n ≥ {MIN_SEEDS} {unit}"
    return f"mean over seeds (n < {MIN_SEEDS}: no interval)"


def _line_styles(line_axis: str | None, levels: list) -> list[tuple[object, str]]:
    """(colour, marker) per line: defenses in their own palette, other levels tab10."""
    if line_axis == "defense":
        styles = defense_styles(levels)
        return [tuple(styles[str(level)]) for level in levels]
    colors = plt.cm.tab10.colors
    return [(colors[j % len(colors)], "o") for j in range(len(levels))]


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


def _x_axis(ax: plt.Axes, values: pd.Series, label: str, span: float = LOG_SPAN) -> None:
    if numeric(values):
        finite = values.dropna().to_numpy(dtype=float)
        positive = finite[finite > 0]
        if len(positive) == len(finite) and len(finite) and finite.max() / finite.min() > span:
            ax.set_xscale("log")
        ax.set_xlabel(label + (" (log scale)" if ax.get_xscale() == "log" else ""))
        return
    levels = sorted({str(v) for v in values})
    ax.set_xticks(range(len(levels)), levels, rotation=30 if len(levels) > 4 else 0)
    ax.set_xlabel(label)


def _fmt(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
