"""The report's figures drawn by forked workers while the main process computes tables.

Why: on a million records ``python -m analysis`` spends about as long drawing figures
(matplotlib, single-threaded, 0.2-0.8 s a figure) as computing tables (pandas, one core).
A figure needs only its own small input table, which exists long before the last table
is done; so workers forked at start (they import matplotlib while the main process reads
the records, and the main process never imports it) draw each figure as soon as its
input exists. On 2 cores the report then takes about the longer of the two, not the sum.

Jobs get their inputs pickled (a few hundred to a few hundred thousand rows, only the
columns the figure uses); figures are the same files ``write_plots`` and
``write_axis_plots`` draw in one process (``PlotPool(workers=1)`` runs jobs inline).
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import time
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import cast

import pandas as pd

from analysis.axes import AxisRoles, axis_roles, level_names
from analysis.gaps import Compare

WORKERS = min(2, os.cpu_count() or 1)  # more than the cores only slows the tables
MAX_ATTACK_PANELS = 3  # ap:<attack> panels next to MP (every attack is in the CSV)


def ap_mp_points(dcs: pd.DataFrame) -> pd.DataFrame:
    """Mean (MP, AP) over seeds per (attack, scenario, defense, strength), and the mean
    ``ap_chance`` (the AP of a no-information guess) where the records carry it."""
    keys = ["attack", "attack_type", "scenario", "defense", "defense_param"]
    mask = (dcs["status"] == "ok") & (dcs["attack"] != "none") & dcs["ap"].notna()
    chance = [c for c in ("ap_chance", "adv") if c in dcs.columns]
    rows = dcs.loc[mask, [*keys, "mp_dcs", "ap", *chance]]
    for column in chance:  # older records hold None there
        rows[column] = pd.to_numeric(rows[column], errors="coerce").astype("float64")
    grouped = rows.groupby(keys, observed=True, dropna=False)
    means = {"mp": ("mp_dcs", "mean"), "ap": ("ap", "mean")}
    means |= {c: (c, "mean") for c in chance}
    return grouped.agg(**means).reset_index()


def panel_metrics(long: pd.DataFrame) -> list[str]:
    """MP, then the first few attacks: ``adv:<attack>`` (advantage over chance, comparable
    across attacks) where present, else ``ap:<attack>``; one figure per axis stays readable."""
    present = set(long["metric"].unique())
    scored = {m.split(":", 1)[1] for m in present if m.startswith(("ap:", "adv:"))}
    attacks = sorted(scored)[:MAX_ATTACK_PANELS]
    panels = [f"adv:{a}" if f"adv:{a}" in present else f"ap:{a}" for a in attacks]
    first = ["mp"] if "mp" in present else sorted(present - set(panels))[:1]
    return first + panels


def split_by_defense(axis: str, line_axis: str | None, cell_axes: list[str]) -> bool:
    """True when a figure of ``axis`` gets a panel per defense: the sweep varies both
    ``defense`` and its strength ``defense_param``, and the figure would draw defenses
    (as x or as lines), whose strengths are not comparable with one another (GS's
    percentages, G-DP's noise scales, MID's λ)."""
    paired = {"defense", "defense_param"} <= set(cell_axes)
    return paired and "defense" in (axis, line_axis)


@dataclass(frozen=True)
class AxisFigure:
    """What ``axis_<axis>.png`` draws: x = ``axis``, a line per level of ``line``, a
    panel per combination of ``facets`` (and per defense where ``split``), a row per
    metric; ``follows`` (field, its axis) are named in the title, not drawn."""

    axis: str
    line: str | None
    facets: tuple[str, ...] = ()
    split: bool = False
    follows: tuple[tuple[str, str], ...] = ()


def axis_figures(roles: AxisRoles) -> list[AxisFigure]:
    """One figure per axis of its own (``axes.axis_roles``): a field that follows another
    (``epochs`` set per dataset) gets none. Every other axis is a line or a panel, never
    pooled: a mean over datasets or defenses answers no question. ``dataset`` is a panel
    wherever there is another axis to draw (MP on adult and on digits share no scale);
    ``defense`` is the line wherever it is not x (a figure answers "what does the
    defense do at each value of x")."""
    paired = {"defense", "defense_param"} <= set(roles.axes)
    kept = [a for a in roles.axes if not (paired and a == "defense_param")]
    drawn = [a for a in kept if a != "dataset"] or kept
    params = {name for names in roles.params.values() for name in names}
    follows = tuple((f, a) for f, a in roles.follows.items() if f not in params)
    figures = []
    for i, axis in enumerate(drawn):
        others = [a for a in kept if a != axis]
        lines = [a for a in drawn[i + 1 :] + drawn[:i] if a != axis]
        line = "defense" if "defense" in others else (lines[0] if lines else None)
        facets = sorted((a for a in others if a != line), key=lambda a: a != "dataset")
        split = split_by_defense(axis, line, roles.axes)
        figures.append(AxisFigure(axis, line, tuple(facets), split, follows))
    return figures


def axis_jobs(long: pd.DataFrame, cell_axes: list[str], folder: Path) -> list[tuple]:
    """``plot_axis`` arguments (rows, ``AxisFigure``, metrics, path) for ``axis_<axis>.png``
    of every axis of its own, each with only the rows and columns its figure uses; an
    axis's parameters are folded into its level names (``protocol=fedbcd q=5``, not a
    ``protocol_params.q`` of ``nan`` beside FedSGD). ``defense_param`` gets no figure of
    its own when ``defense`` is an axis too: ``axis_defense.png`` plots each defense
    against its own strengths."""
    metrics = panel_metrics(long) if len(long) else []
    if not metrics or not cell_axes:
        return []
    shown = long[long["metric"].isin(metrics)]
    roles = axis_roles(shown[cell_axes].drop_duplicates(), cell_axes)
    shown = shown.assign(
        **{axis: level_names(shown, axis, params) for axis, params in roles.params.items()}
    )
    # se: each value's test-set sampling error, which by_axis folds into the interval
    values = ["metric", "value", *(["se"] if "se" in long.columns else [])]
    jobs = []
    for figure in axis_figures(roles):
        keys = [figure.axis, figure.line, *figure.facets]
        keys += ["defense_param"] if figure.split else []
        columns = list(dict.fromkeys(k for k in keys if k))
        path = folder / f"axis_{figure.axis.replace('/', '_')}.png"
        jobs.append((shown[[*columns, *values]], figure, metrics, path))
    return jobs


def _warm() -> None:
    """Import matplotlib in a worker while the main process reads (about 0.4 s, nearly
    all of what importing the figure modules costs a forked worker). Not the figure
    modules themselves: they build on this module's pool and jobs, which name them only
    as strings (``analysis.plots:plot_beta``), so nothing here imports back up to them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot


def _timed(target: str, *args: object) -> float:
    """Run ``module:function`` (named, so the main process need not import matplotlib)."""
    start = time.perf_counter()
    module, name = target.split(":")
    getattr(importlib.import_module(module), name)(*args)
    return time.perf_counter() - start


class PlotPool:
    """Plot jobs in ``workers`` forked processes (inline with 1 worker or without fork).

    Start it before reading the records: the workers fork from a process that has
    imported pandas but started no Arrow threads, and import matplotlib meanwhile.
    """

    def __init__(self, workers: int = WORKERS) -> None:
        self.busy = 0.0  # seconds spent drawing, all workers together
        self._futures: list[Future] = []
        self._pool: ProcessPoolExecutor | None = None
        if workers > 1 and "fork" in mp.get_all_start_methods():
            self._pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"))
            self._futures = [self._pool.submit(_warm) for _ in range(workers)]

    def submit(self, target: str, *args: object) -> None:
        """Draw ``target`` (``"analysis.plots:plot_beta"``) with ``args``."""
        if self._pool is None:
            self.busy += _timed(target, *args)
        else:
            self._futures.append(self._pool.submit(_timed, target, *args))

    def join(self) -> None:
        """Wait for every job; a job's exception is raised here."""
        futures, self._futures = self._futures, []
        self.busy += sum(f.result() or 0.0 for f in futures)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> PlotPool:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


GAP_COLUMNS = ["attack", "attack_type", "seed", "gap", "ca_gap", "at_chance_both"]


class Figures:
    """Submits each figure of the report once its input table exists (``build``'s
    ``ready`` callback): AP-MP per attack, β sensitivity, DCS gaps, one per sweep axis."""

    def __init__(self, pool: PlotPool, folder: Path, compares: list[Compare]) -> None:
        self.pool, self.folder = pool, folder
        self.compares = {c.key: c for c in compares}

    def ready(self, name: str, value: object) -> None:
        if name == "dcs":
            assert isinstance(value, pd.DataFrame)
            for attack, part in ap_mp_points(value).groupby("attack", observed=True):
                path = self.folder / f"ap_mp_{attack}.png"
                self.pool.submit("analysis.plots:plot_ap_mp", part, str(attack), path)
            if "split_importance" in value and value["split_importance"].notna().any():
                columns = ["dataset", "attack", "defense", "defense_param", "status"]
                points = value[[*columns, "split_importance", "ap_advantage"]]
                path = self.folder / "split_leakage.png"
                self.pool.submit("analysis.split_leakage:plot", points, path)
        elif name == "beta":
            assert isinstance(value, pd.DataFrame)
            if len(value.dropna(subset=["rank"])):
                path = self.folder / "beta_sensitivity.png"
                self.pool.submit("analysis.plots:plot_beta", value, path)
        elif name == "gaps":
            key, pairs = cast(tuple[str, pd.DataFrame], value)
            path = self.folder / f"dcs_gap_{key}.png"
            compare = self.compares[key]
            self.pool.submit("analysis.plots:plot_gaps", pairs[GAP_COLUMNS], compare, path)
        elif name == "per_training":
            long, cell_axes = cast(tuple[pd.DataFrame, list[str]], value)
            for args in axis_jobs(long, cell_axes, self.folder):
                self.pool.submit("analysis.axis_plots:plot_axis", *args)
