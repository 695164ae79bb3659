"""One figure per axis of its own (``plot_jobs.axis_figures``): a row of panels per metric,
the metric against the axis value, a line per level of another axis, a panel per value of
every other axis (dataset first) and per defense where defenses have strengths; the mean
over seeds with by_axis's 95% interval as error bars where a cell has at least 3 seeds.

Why panels, never a pool: a mean over datasets mixes tasks whose MPs share no scale, and a
mean over defenses mixes protected trainings with unprotected ones; with every other axis a
line or a panel, each point is one cell of ``by_axis.csv``. A field that only follows an
axis (``epochs`` set per dataset) gets no figure of its own; the title names it.

A sweep that varies ``defense`` and its strength ``defense_param`` gets a panel per
defense wherever defenses would be drawn (``plot_jobs.split_by_defense``): one defense's
strengths (GS's percentages, G-DP's noise scales, MID's λ) mean nothing on another's
axis. ``axis_defense.png`` then plots each metric against each defense's own strengths,
the undefended value as a horizontal reference; other figures draw a line per strength,
the undefended value in black. Titles are wrapped to the figure's width as the renderer
measures them: nothing is cut off.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.axes import show
from analysis.by_axis import by_axis_table, direction
from analysis.plot_jobs import AxisFigure, axis_jobs
from analysis.plots import defense_order, defense_styles, fit_title
from analysis.uncertainty import MIN_SEEDS

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.typing import ColorType

DPI = 90
MAX_LINES = 8  # levels of the line axis drawn; more are named in the title as omitted
MAX_COLUMNS = 8  # panels side by side; more wrap into another block of rows
MAX_PANELS = 24  # panels per metric; more are named in the title as omitted
LOG_SPAN = 100.0  # a log x axis when positive values span more than two decades
STRENGTH_LOG_SPAN = 10.0  # a defense's strengths: log when they span more than a decade
NO_DEFENSE = "no defense"
STRENGTH = "defense_param"
PANEL_W, PANEL_H = 3.2, 2.6  # inches
LEFT, RIGHT, BOTTOM, GAP = 0.95, 0.25, 0.6, 0.55  # margins; GAP: x labels between rows
TITLE_SIZE, PANEL_SIZE = 10, 9  # points
LINE_H = 0.19  # inches per line of a panel title


def numeric(values: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)


def write_axis_plots(long: pd.DataFrame, cell_axes: list[str], folder: Path) -> list[Path]:
    """``axis_<axis>.png`` for every axis of its own; returns the files written."""
    jobs = axis_jobs(long, cell_axes, folder)
    for args in jobs:
        plot_axis(*args)
    return [args[-1] for args in jobs]


def plot_axis(long: pd.DataFrame, figure: AxisFigure, metrics: list[str], path: Path) -> None:
    """Draw ``figure`` of ``long`` (``per_training`` rows) into ``path``."""
    on_strength = figure.split and figure.axis == "defense"
    per_strength = figure.split and not on_strength
    x_axis = STRENGTH if on_strength else figure.axis
    line = STRENGTH if per_strength else figure.line
    defense = ["defense"] if figure.split else []
    keys = list(dict.fromkeys(k for k in (*figure.facets, *defense, x_axis, line) if k))
    table = by_axis_table(long[long["metric"].isin(metrics)], keys)
    columns = _columns(table, figure)
    shown = columns[:MAX_PANELS]
    ncols = max(min(len(shown), MAX_COLUMNS), 1)
    blocks, nm = max(math.ceil(len(shown) / ncols), 1), len(metrics)
    labels = [_wrap(label, PANEL_W, PANEL_SIZE) for _, _, label in shown]
    title_lines = max([label.count("\n") + 1 for label in labels] + [1])
    gap = GAP + title_lines * LINE_H
    width = PANEL_W * ncols + LEFT + RIGHT
    panels_h = blocks * nm * PANEL_H + (blocks * nm - 1) * gap + BOTTOM + title_lines * LINE_H
    fig, grid = plt.subplots(blocks * nm, ncols, figsize=(width, panels_h), squeeze=False)
    levels = _levels(table[line]) if line and not per_strength else [None]
    drawn_levels = levels[:MAX_LINES]
    styles = _line_styles(line, drawn_levels)
    palette = defense_styles(table["defense"].astype(str)) if "defense" in table else {}
    bars = False
    legends: dict[str | None, list[plt.Axes]] = {}
    for i, ((facet, name, _), label) in enumerate(zip(shown, labels, strict=True)):
        block, c = divmod(i, ncols)
        rows = _matching(table, figure.facets, facet)
        undefended = rows[rows["defense"].astype(str) == "none"] if figure.split else rows
        if name is not None:
            rows = rows[rows["defense"].astype(str) == name]
        for r, metric in enumerate(metrics):
            ax = grid[block * nm + r, c]
            part = rows[rows[f"{metric}_n"] > 0]
            if on_strength:
                assert name is not None  # on_strength: a panel per defense (``_columns``)
                own: list[tuple[ColorType, str]] = (
                    [(palette[name].color, palette[name].marker)] if line is None else styles
                )
                bars |= _strength_panel(ax, part, undefended, metric, line, drawn_levels, own)
                _strength_axis(ax, part, name)
            elif per_strength:
                bars |= _level_panel(ax, part, undefended, metric, x_axis, table)
                _x_axis(ax, table[x_axis], x_axis)
            else:
                for level, (color, marker) in zip(drawn_levels, styles, strict=True):
                    some = part if level is None else part[_same(part[line], level)]
                    text = "mean" if level is None else f"{line}={show(level)}"
                    if len(some):
                        x = _positions(table[x_axis], some[x_axis])
                        bars |= _line(ax, x, some, metric, color, marker, text)
                _x_axis(ax, table[x_axis], x_axis)
            if not ax.get_lines():  # e.g. a binary-only attack on a 10-class dataset
                ax.text(0.5, 0.5, f"no {metric} rows here", ha="center", transform=ax.transAxes)
                ax.set_axis_off()  # no ticks to draw or to read
            color = palette[name].color if name is not None else "black"
            title = label if figure.facets or name else f"{metric} vs {figure.axis}"
            ax.set_title(title, fontsize=PANEL_SIZE, y=1.0, color=color, fontweight="bold")
            ax.grid(alpha=0.3)
            if c == 0:
                better = "higher" if direction(metric) == "max" else "lower"
                ax.set_ylabel(f"{metric} (mean over seeds)\n{better} is better", fontsize=8)
            legends.setdefault(name if per_strength else None, []).append(ax)
        _share_rows(grid, block, nm, shown, ncols, i)
    _hide_unused(grid, shown, ncols, nm)
    for axes in legends.values():
        _legend(axes, STRENGTH if per_strength else None)
    text = _title(figure, metrics, bars, len(levels) - len(drawn_levels), columns[len(shown) :])
    suptitle, title_h = fit_title(fig, text, width, TITLE_SIZE)
    height = panels_h + title_h + 0.25
    fig.set_size_inches(width, height)
    suptitle.set_y(1 - 0.1 / height)
    top = 1 - (title_h + 0.25 + title_lines * LINE_H) / height
    fig.subplots_adjust(left=LEFT / width, right=1 - RIGHT / width, bottom=BOTTOM / height)
    fig.subplots_adjust(top=top, wspace=(0.5 if figure.facets else 0.1) / PANEL_W)
    fig.subplots_adjust(hspace=gap / PANEL_H)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)


def _columns(table: pd.DataFrame, figure: AxisFigure) -> list[tuple[tuple, str | None, str]]:
    """(facet values, defense or None, panel label) per panel column, facets in order."""
    facets = list(figure.facets)
    combos = table[facets].drop_duplicates().itertuples(index=False) if facets else [()]
    out: list[tuple[tuple, str | None, str]] = []
    for combo in combos:
        values = tuple(combo)
        label = " ".join(f"{f}={show(v)}" for f, v in zip(facets, values, strict=True))
        if not figure.split:
            out.append((values, None, label))
            continue
        names = _matching(table, facets, values)["defense"].astype(str)
        for name in [d for d in defense_order(names.unique()) if d != "none"]:
            out.append((values, name, f"{label}\n{name}" if label else name))
    return out


def _matching(table: pd.DataFrame, facets: tuple | list, values: tuple) -> pd.DataFrame:
    """The rows of one panel: ``facets`` at ``values`` (a missing value matches missing)."""
    mask = np.ones(len(table), dtype=bool)
    for facet, value in zip(facets, values, strict=True):
        mask &= _same(table[facet], value).to_numpy()
    return table[mask]


def _share_rows(grid: np.ndarray, block: int, nm: int, shown: list, ncols: int, i: int) -> None:
    """Panels of one facet side by side share their y axis (one defense's effect against
    another's, same task); another facet (another dataset) gets its own scale."""
    c = i % ncols
    if c == 0 or [show(v) for v in shown[i - 1][0]] != [show(v) for v in shown[i][0]]:
        return
    for r in range(nm):
        ax, left = grid[block * nm + r, c], grid[block * nm + r, c - 1]
        ax.sharey(left)
        ax.tick_params(labelleft=False)


def _hide_unused(grid: np.ndarray, shown: list, ncols: int, nm: int) -> None:
    for i in range(len(shown), grid.shape[0] // nm * ncols):
        block, c = divmod(i, ncols)
        for r in range(nm):
            grid[block * nm + r, c].set_visible(False)


def _legend(axes: list[plt.Axes], title: str | None) -> None:
    """One legend on the first of ``axes`` with every line drawn on any of them."""
    seen: dict[str, Artist] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    if seen:
        axes[0].legend(list(seen.values()), list(seen), fontsize=7, title=title, title_fontsize=7)


def _title(figure: AxisFigure, metrics: list[str], bars: bool, more: int, omitted: list) -> str:
    """What the figure draws, exactly: x, lines, panels, what is not an axis, omissions."""
    what = ", ".join(metrics)
    if figure.split and figure.axis == "defense":
        text = f"{what} vs each defense's own strengths (undefended: dashed)"
        text += f", a line per {figure.line}" if figure.line else ""
    elif figure.split:
        text = f"{what} vs {figure.axis}, a line per strength of the defense"
    else:
        text = f"{what} vs {figure.axis}" + (f", a line per {figure.line}" if figure.line else "")
    panels = [*figure.facets, *(["defense"] if figure.split else [])]
    parts = [text] + ([f"a panel per {' and '.join(panels)}"] if panels else [])
    parts.append(_drawn(bars))
    leaders: dict[str, list[str]] = {}
    for name, leader in figure.follows:
        leaders.setdefault(leader, []).append(name)
    for leader, names in leaders.items():
        if len(names) == 1:
            parts.append(f"{names[0]} follows {leader} (not an axis of its own)")
        else:
            parts.append(f"{', '.join(sorted(names))} follow {leader} (not axes of their own)")
    if more:
        parts.append(f"{more} more {figure.line} levels omitted")
    if omitted:
        listed = ", ".join(label.replace("\n", " ") for _, _, label in omitted)
        parts.append(f"{len(omitted)} more panels omitted ({listed}; by_axis.csv has them)")
    return "; ".join(parts)


def _wrap(text: str, width_in: float, size: float) -> str:
    """``text`` wrapped to about ``width_in`` inches of ``size``-point characters."""
    chars = max(int(width_in * 72 / (size * 0.6)), 12)
    return "\n".join(textwrap.fill(part, chars) for part in text.split("\n"))


def _strength_panel(
    ax: plt.Axes,
    part: pd.DataFrame,
    undefended: pd.DataFrame,
    metric: str,
    line: str | None,
    levels: list,
    styles: list[tuple[ColorType, str]],
) -> bool:
    """One defense against its strengths; the undefended value as a horizontal line."""
    none = part[STRENGTH].isna().all()  # a defense without a strength: its value at 0
    bars = False
    for level, (color, marker) in zip(levels, styles, strict=True):
        rows = part if level is None else part[_same(part[line], level)]
        suffix = "" if level is None else f"{line}={show(level)}"
        if len(rows):
            x = rows[STRENGTH].to_numpy(dtype=float)
            x = np.zeros(len(x)) if none else x
            bars |= _line(ax, x, rows, metric, color, marker, suffix or "mean")
        ref = undefended if level is None else undefended[_same(undefended[line], level)]
        ref = ref[ref[f"{metric}_n"] > 0]
        if len(ref):
            bars |= _reference(ax, ref, metric, "black" if level is None else color, suffix)
    return bars


def _strength_axis(ax: plt.Axes, part: pd.DataFrame, name: str | None) -> None:
    if part[STRENGTH].notna().any():
        _x_axis(ax, part[STRENGTH], f"{name} strength ({STRENGTH})", STRENGTH_LOG_SPAN)
    else:  # a defense without a strength: its one value at 0
        ax.set_xticks([0.0], [f"{name} (no {STRENGTH})"])


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
    color: ColorType,
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


def _reference(ax: plt.Axes, ref: pd.DataFrame, metric: str, color: ColorType, suffix: str) -> bool:
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


def _drawn(bars: bool) -> str:
    """What each point is, exactly: every other axis is a line or a panel."""
    if bars:
        return f"mean over seeds; bars: 95% CI where n ≥ {MIN_SEEDS} seeds"
    return f"mean over seeds (n < {MIN_SEEDS}: no interval)"


def _line_styles(line: str | None, levels: list) -> list[tuple[ColorType, str]]:
    """(colour, marker) per line: defenses in their own palette, other levels tab10."""
    if line == "defense":
        styles = defense_styles([str(level) for level in levels])
        return [(styles[str(level)].color, styles[str(level)].marker) for level in levels]
    colors = plt.cm.tab10.colors  # type: ignore[attr-defined]  # a ListedColormap; stubs: Colormap
    return [(colors[j % len(colors)], "o") for j in range(len(levels))]


def _levels(values: pd.Series) -> list:
    """The distinct values in reading order: an ordered categorical's own order
    (``level_names``), defenses in their fixed order, numbers ascending (missing last)."""
    if isinstance(values.dtype, pd.CategoricalDtype) and values.dtype.ordered:
        present = set(values.dropna())
        return [c for c in values.dtype.categories if c in present]
    if values.name == "defense":
        return defense_order(values.astype(str).unique())
    distinct = list(pd.unique(values.dropna()))
    ordered = sorted(distinct) if numeric(values) else sorted(distinct, key=str)
    return ordered + [np.nan] * bool(values.isna().any())


def _same(column: pd.Series, level: object) -> pd.Series:
    if pd.isna(level):
        return column.isna()
    return column == level


def _positions(all_values: pd.Series, values: pd.Series) -> np.ndarray:
    """Numeric axes at their values; others at the index of their level (``_levels``)."""
    if numeric(all_values):
        return values.to_numpy(dtype=float)
    levels = [str(v) for v in _levels(all_values)]
    return np.array([levels.index(str(v)) for v in values], dtype=float)


def _x_axis(ax: plt.Axes, values: pd.Series, label: str, span: float = LOG_SPAN) -> None:
    if numeric(values):
        finite = values.dropna().to_numpy(dtype=float)
        positive = finite[finite > 0]
        if len(positive) == len(finite) and len(finite) and finite.max() / finite.min() > span:
            ax.set_xscale("log")
        ax.set_xlabel(label + (" (log scale)" if ax.get_xscale() == "log" else ""))
        return
    levels = [show(v) for v in _levels(values)]
    ax.set_xticks(range(len(levels)), levels, rotation=30 if len(levels) > 4 else 0)
    ax.set_xlim(-0.5, len(levels) - 0.5)  # room for the outer levels' names
    ax.set_xlabel(label)
