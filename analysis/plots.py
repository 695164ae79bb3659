"""The report's figures (matplotlib, Agg backend): AP-MP per attack with the Pareto front
and the no-information baseline, rank vs β with Kendall τ, DCS-gap distributions per
attack type. Every figure (and ``axis_plots``) draws a defense in the same colour and
marker (``defense_styles``); the undefended model is black.

Every figure plots already aggregated tables (a few hundred points), never the raw rows,
so plotting cost does not grow with the number of records.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.markers import MarkerStyle

from analysis.gaps import Compare
from analysis.plot_jobs import WORKERS, Figures, PlotPool

if TYPE_CHECKING:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from analysis.report_data import Report

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


def _panels(
    n: int, width: float = 4.6, height: float = 4.0, hspace: float = 0.4
) -> tuple[plt.Figure, list[plt.Axes]]:
    cols = min(n, 3)
    rows = int(np.ceil(n / cols))
    fig = plt.figure(figsize=(width * cols + 2.2, height * rows))
    grid = fig.add_gridspec(rows, cols)
    axes = [fig.add_subplot(grid[i // cols, i % cols]) for i in range(n)]  # only those shown
    bottom = 0.12 if hspace <= 0.4 else 1.4 / (height * rows)  # room for a legend below
    left = max(0.07, 0.8 / fig.get_figwidth())  # the y label's room: 0.8 in, not 7 %
    fig.subplots_adjust(left=left, right=0.80, top=0.86, bottom=bottom, wspace=0.3, hspace=hspace)
    return fig, axes


def fit_title(
    fig: plt.Figure, text: str, width_in: float, size: float = 10
) -> tuple[plt.Text, float]:
    """The suptitle wrapped until the renderer measures it inside the figure's width,
    and its height in inches (the panels start below it)."""
    renderer = cast("FigureCanvasAgg", fig.canvas).get_renderer()  # pyplot's, on Agg
    room = (width_in - 0.3) * fig.dpi
    chars = max(int(width_in * 72 / (size * 0.55)), 20)
    while True:
        wrapped = "\n".join(textwrap.fill(part, chars) for part in text.split("\n"))
        title = fig.suptitle(wrapped, fontsize=size, va="top")
        box = title.get_window_extent(renderer)
        if box.width <= room or chars <= 20:
            return title, box.height / fig.dpi
        chars = max(int(chars * 0.9), 20)


def _titled(fig: plt.Figure, text: str, panel_lines: int = 1) -> None:
    """``text`` as the suptitle, wrapped inside the figure, and the panels moved down
    below it and their own titles (``panel_lines`` lines of 8-9 pt): a long comparison
    label or scenario was clipped at the figure's edge or drawn over a panel's title."""
    width, height = fig.get_size_inches()
    title, title_h = fit_title(fig, text, width)
    title.set_y(1 - 0.1 / height)
    top = 1 - (0.1 + title_h + 0.15 + 0.17 * panel_lines) / height
    fig.subplots_adjust(top=min(top, 0.92))


def _panel_title(ax: plt.Axes, text: str, size: float = 8) -> int:
    """A panel's title wrapped to the panel's width; its number of lines."""
    width = ax.get_position().width * cast(plt.Figure, ax.figure).get_figwidth()  # no subfigures
    wrapped = textwrap.fill(text, max(int(width * 72 / (size * 0.6)), 12))
    ax.set_title(wrapped, fontsize=size, y=TITLE_Y)
    return wrapped.count("\n") + 1


# Each defense keeps one colour and marker in every figure: the known ones (those of
# trainables.defenses.MODULES) own a fixed slot, ordered so that defenses of one family
# (gdp/gs, ldp/gper, mid/dcor, cae/dcae) get far-apart hues; a stacked or unknown name
# ("mid+gs") takes the first slot no name present owns, in sorted order. "none": black.
DEFENSE_ORDER = ("gdp", "gs", "mid", "dcor", "ldp", "gper", "cae", "dcae", "iso")
NONE_COLOR = (0.0, 0.0, 0.0, 1.0)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "d")
DASHES = ("-", "--", ":", "-.")  # strengths of one defense in the β figure
CHANCE_LABEL = "no-information baseline"
CHANCE_LINE: dict[str, Any] = {"ls": "--", "c": "black", "lw": 1.2, "alpha": 0.7, "zorder": 1}


class Style(NamedTuple):
    color: tuple[float, float, float] | tuple[float, float, float, float]  # RGB or RGBA
    marker: str


def defense_palette() -> list[tuple[float, float, float]]:
    """tab10 without its grey (grey and black mean "no defense"), then tab20's light
    shades without grey: 18 colours that differ in hue or lightness."""
    tab10 = plt.cm.tab10.colors  # type: ignore[attr-defined]  # a ListedColormap; stubs: Colormap
    tab20 = plt.cm.tab20.colors  # type: ignore[attr-defined]  # a ListedColormap; stubs: Colormap
    strong = [c for i, c in enumerate(tab10) if i != 7]
    light = [c for i, c in enumerate(tab20) if i % 2 and i != 15]
    return [tuple(c) for c in strong + light]


def _slots(names: Iterable[object]) -> dict[str, int]:
    """Palette slot per defended name: a known one its own, the others the free ones."""
    present = sorted({str(n) for n in names} - {"none"})
    slots = {n: DEFENSE_ORDER.index(n) for n in present if n in DEFENSE_ORDER}
    taken = set(slots.values())
    free = (i for i in range(len(present) + len(DEFENSE_ORDER)) if i not in taken)
    for name in present:
        if name not in slots:
            slots[name] = next(free)
    return slots


def defense_styles(names: Iterable[object]) -> dict[str, Style]:
    """Colour and marker per defense name (``none``: black star), the same in every
    figure that shows the same defenses; past 18 names colours repeat, markers differ."""
    palette = defense_palette()
    styles = {
        name: Style(palette[i % len(palette)], MARKERS[i % len(MARKERS)])
        for name, i in _slots(names).items()
    }
    if "none" in {str(n) for n in names}:
        styles["none"] = Style(NONE_COLOR, "*")
    return styles


def defense_order(names: Iterable[object]) -> list[str]:
    """Names in palette order, ``none`` first: legends and panels list defenses alike."""
    names = list(names)
    slots = _slots(names)
    head = ["none"] if "none" in {str(n) for n in names} else []
    return head + sorted(slots, key=slots.__getitem__)


def _scatter(ax: plt.Axes, x: pd.Series, y: pd.Series, markers: list[str], **kw: Any) -> None:
    """One scatter call (one collection) with a marker per point."""
    points = ax.scatter(x, y, **kw)
    paths = []
    for marker in markers:
        style = MarkerStyle(marker)
        paths.append(style.get_path().transformed(style.get_transform()))
    if paths:
        points.set_paths(paths)


def plot_ap_mp(points: pd.DataFrame, attack: str, path: Path) -> None:
    """One panel per scenario; one scatter call per panel (colors, markers and sizes as
    arrays). ``ap_chance`` (when a column): the panel's no-information AP, a dashed line."""
    scenarios = list(points["scenario"].unique())[:MAX_PANELS]
    fig, axes = _panels(len(scenarios))
    kind = str(points["attack_type"].iloc[0])
    styles = defense_styles(points["defense"])
    defended = [d for d in defense_order(points["defense"]) if d != "none"]
    chance_drawn, lines = False, 1
    for ax, scenario in zip(axes, scenarios, strict=True):
        part = points[points["scenario"] == scenario]
        base = (part["defense"] == "none").to_numpy()
        rest = part[~base]
        sizes = rest.groupby("defense", observed=True)["defense_param"].transform(
            lambda s: pd.Series(_sizes(s), index=s.index)
        )
        names = rest["defense"].astype(str)
        _scatter(
            ax,
            rest["mp"],
            rest["ap"],
            [styles[d].marker for d in names],
            s=sizes,
            alpha=0.8,
            zorder=3,
            c=[styles[d].color for d in names],
        )
        ax.scatter(
            part.loc[base, "mp"], part.loc[base, "ap"], marker="*", s=260, c="black", zorder=4
        )
        # the front on the advantage where recorded: an attack that named the minority class
        # for every row has a low AP and no information, so no better trade-off
        basis = part["adv"] if "adv" in part and part["adv"].notna().all() else part["ap"]
        front = part[pareto_mask(part["mp"].to_numpy(), basis.to_numpy())].sort_values("mp")
        ax.plot(front["mp"], front["ap"], ls=":", c="grey", lw=1, zorder=2)
        ax.scatter(
            front["mp"],
            front["ap"],
            s=260,
            facecolors="none",
            edgecolors="red",
            linewidths=1.2,
            zorder=5,
        )
        chance = _chance(part)
        if np.isfinite(chance):
            ax.axhline(chance, **CHANCE_LINE, label=CHANCE_LABEL)
            chance_drawn = True
        lines = max(lines, _panel_title(ax, str(scenario)))
        ax.set_xlabel("MP (main-task performance)")
        ax.set_ylabel("AP (attack performance)")
        ax.grid(alpha=0.3)
    handles = [Line2D([], [], marker="*", ls="", c="black", ms=12, label="undefended")]
    handles += [
        Line2D([], [], marker=styles[d].marker, ls="", c=styles[d].color, label=d)
        for d in defended[:MAX_LEGEND]
    ]
    handles += [
        Line2D(
            [],
            [],
            marker="o",
            ls=":",
            c="grey",
            mfc="none",
            mec="red",
            ms=12,
            label="Pareto-optimal (max MP, min advantage or AP)",
        )
    ]
    if chance_drawn:
        handles.append(Line2D([], [], **CHANCE_LINE, label=CHANCE_LABEL))
    legend = fig.legend(
        handles=handles,
        loc="center right",
        bbox_to_anchor=(0.995, 0.5),
        fontsize=7,
        title="marker size = strength",
        title_fontsize=7,
    )
    # the panels end left of the legend, measured: it was drawn over the data
    renderer = cast("FigureCanvasAgg", fig.canvas).get_renderer()  # pyplot's, on Agg
    wide = legend.get_window_extent(renderer).width / fig.dpi
    fig.subplots_adjust(right=1 - (wide + 0.25) / fig.get_figwidth())
    text = f"AP vs MP under {attack} ({kind}); better = bottom right"
    _titled(fig, text + _omitted(len(points["scenario"].unique()), "scenarios"), lines)
    _save(fig, path)


def _chance(part: pd.DataFrame) -> float:
    """The panel's mean no-information AP; NaN without the column or a value."""
    if "ap_chance" not in part.columns:
        return float("nan")
    values = pd.to_numeric(part["ap_chance"], errors="coerce").astype("float64")
    return float(values.mean()) if values.notna().any() else float("nan")


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
    styles = defense_styles(ranked["defense"])
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
        owner = dict(zip(ref["label"], ref["defense"].astype(str), strict=True))
        repeats: dict[str, int] = {}
        for line in shown:  # a defense's colour and marker; its strengths by dash
            style = styles[owner[line]]
            k = repeats[owner[line]] = repeats.get(owner[line], -1) + 1
            ax.plot(
                wide.index,
                wide[line].to_numpy(),
                marker=style.marker,
                ms=4,
                lw=1,
                color=style.color,
                ls=DASHES[k % len(DASHES)],
                label=line,
            )
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
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
    """Per attack type: the chance-aware DCS gaps (B − A) as a histogram, VFLAIR's raw-AP
    gaps as an outline beside them, the mean chance-aware gap with its interval over
    seeds (``gap_summary``'s numbers), n in the title; attacks at chance in both arms are
    left out and named under the figure."""
    from analysis.gaps import gap_summary

    summary = gap_summary(pairs).set_index("attack_type")
    kept = pairs[~pairs["at_chance_both"]]
    kinds = [k for k in summary.index if k != "all" and summary.loc[k, "n_pairs"] > 0]
    fig, axes = _panels(max(len(kinds), 1), height=5.0, hspace=0.75)
    for ax, kind in zip(axes, kinds, strict=False):
        part = kept[kept["attack_type"] == kind]
        stats = summary.loc[kind]
        ca, raw = part["ca_gap"].dropna().to_numpy(), part["gap"].dropna().to_numpy()
        both = np.concatenate([ca, raw]) if len(ca) + len(raw) else np.zeros(1)
        bins = np.linspace(both.min() - 1e-9, both.max() + 1e-9, min(40, max(6, len(both) // 5)))
        edges = cast(Sequence[float], bins)  # hist takes any array of edges; stubs: Sequence
        share, raw_mean = stats["share_positive_ca"], stats["mean_gap_vflair"]
        if len(ca):
            label = f"chance-aware DCS gap ({share:.0%} > 0)"
            ax.hist(ca, bins=edges, color="tab:blue", alpha=0.75, label=label)
        label = f"VFLAIR DCS gap, raw AP (mean {raw_mean:+.3f})"
        ax.hist(raw, bins=edges, histtype="step", color="grey", lw=1.2, label=label)
        ax.axvline(0, c="red", ls="--", lw=1.0, label="no difference")
        mean, lo, hi = stats["mean_ca_gap"], stats["ca_gap_lo"], stats["ca_gap_hi"]
        if np.isfinite(mean):
            ci = f" [{lo:+.3f}, {hi:+.3f}]" if np.isfinite(lo) else " (< 3 seeds: no CI)"
            ax.axvline(mean, c="black", lw=1.2, label=f"mean {mean:+.3f}{ci}")
            if np.isfinite(lo):
                ax.axvspan(lo, hi, color="black", alpha=0.12)
        n, seeds = int(stats["n_pairs"]), int(stats["n_seeds"])
        ax.set_title(f"{kind}: n = {n} pairs, {seeds} seeds", fontsize=9, y=TITLE_Y)
        ax.set_xlabel(f"DCS gap ({compare.label})")
        ax.set_ylabel("pairs")
        # below the panel, never over the histogram it explains
        ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    if not kinds:
        axes[0].text(0.5, 0.5, "no attack above chance in either arm", ha="center",
                     transform=axes[0].transAxes)  # fmt: skip
    left = summary.loc["all", "left_out_at_chance"] if "all" in summary.index else ""
    if left:
        names = left.replace(";", ", ")
        text = f"left out, at chance undefended in both arms: {names}"
        fig.text(0.07, 0.015, text, fontsize=8, color="#a00")
    text = f"DCS gap by attack type: {compare.axis}, {compare.label}"
    text += f" (> 0: {compare.b} defends better)"
    _titled(fig, text)
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
            if compare.key in report.gaps:
                figures.ready("gaps", (compare.key, report.gaps[compare.key]))
        pool.join()
