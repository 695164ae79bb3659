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
from pathlib import Path
from types import TracebackType

import pandas as pd

from analysis.gaps import Compare

WORKERS = min(2, os.cpu_count() or 1)  # more than the cores only slows the tables
MAX_ATTACK_PANELS = 3  # ap:<attack> panels next to MP (every attack is in the CSV)


def ap_mp_points(dcs: pd.DataFrame) -> pd.DataFrame:
    """Mean (MP, AP) over seeds per (attack, scenario, defense, strength)."""
    keys = ["attack", "attack_type", "scenario", "defense", "defense_param"]
    mask = (dcs["status"] == "ok") & (dcs["attack"] != "none") & dcs["ap"].notna()
    rows = dcs.loc[mask, [*keys, "mp_dcs", "ap"]]
    grouped = rows.groupby(keys, observed=True, dropna=False)
    return grouped.agg(mp=("mp_dcs", "mean"), ap=("ap", "mean")).reset_index()


def panel_metrics(long: pd.DataFrame) -> list[str]:
    """MP, then AP of the first few attacks: one figure per axis stays readable."""
    present = set(long["metric"].unique())
    attacks = sorted(m for m in present if m.startswith("ap:"))[:MAX_ATTACK_PANELS]
    first = ["mp"] if "mp" in present else sorted(present - set(attacks))[:1]
    return first + attacks


def axis_jobs(long: pd.DataFrame, cell_axes: list[str], folder: Path) -> list[tuple]:
    """``plot_axis`` arguments for ``axis_<axis>.png`` of every cell axis, each with only
    the rows and columns its figure uses."""
    metrics = panel_metrics(long) if len(long) else []
    if not metrics:
        return []
    shown = long[long["metric"].isin(metrics)]
    jobs = []
    for i, axis in enumerate(cell_axes):
        others = [a for a in cell_axes if a != axis]
        line_axis = cell_axes[(i + 1) % len(cell_axes)] if others else None
        columns = [axis, *([line_axis] if line_axis else []), "metric", "value"]
        path = folder / f"axis_{axis.replace('/', '_')}.png"
        jobs.append((shown[columns], axis, line_axis, others, metrics, path))
    return jobs


def _warm() -> None:
    """Import matplotlib in a worker while the main process reads (about 0.4 s)."""
    import analysis.axis_plots
    import analysis.plots  # noqa: F401


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


class Figures:
    """Submits each figure of the report once its input table exists (``build``'s
    ``ready`` callback): AP-MP per attack, β sensitivity, DCS gaps, one per sweep axis."""

    def __init__(self, pool: PlotPool, folder: Path, compares: list[Compare]) -> None:
        self.pool, self.folder = pool, folder
        self.compares = {c.axis: c for c in compares}

    def ready(self, name: str, value: object) -> None:
        if name == "dcs":
            assert isinstance(value, pd.DataFrame)
            for attack, part in ap_mp_points(value).groupby("attack", observed=True):
                path = self.folder / f"ap_mp_{attack}.png"
                self.pool.submit("analysis.plots:plot_ap_mp", part, str(attack), path)
        elif name == "beta":
            assert isinstance(value, pd.DataFrame)
            if len(value.dropna(subset=["rank"])):
                path = self.folder / "beta_sensitivity.png"
                self.pool.submit("analysis.plots:plot_beta", value, path)
        elif name == "gaps":
            axis, pairs = value  # type: ignore[misc]
            path = self.folder / f"dcs_gap_{axis}.png"
            compare = self.compares[axis]
            self.pool.submit(
                "analysis.plots:plot_gaps", pairs[["attack_type", "gap"]], compare, path
            )
        elif name == "per_training":
            long, cell_axes = value  # type: ignore[misc]
            for args in axis_jobs(long, cell_axes, self.folder):
                self.pool.submit("analysis.axis_plots:plot_axis", *args)
