"""The whole report of a sweep: tables and plots written into a fresh folder, then swapped
into place, so an interrupted run never leaves half a report behind.

Every sweep gets ``by_axis.csv``, ``best.json`` and one ``axis_<axis>.png`` per varying
axis (analysis/by_axis.py); a sweep with attack rows also gets the DCS tables and plots.
A sweep without attacks gets no DCS files (they would be empty); ``summary.json`` says so.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from analysis.answer import build_answer
from analysis.axes import flatten
from analysis.by_axis import best_cells, by_axis_table, per_training
from analysis.cap import cap_table
from analysis.compare import row_arms
from analysis.completeness import completeness
from analysis.contrast import Contrasts, contrasts, joint_holm
from analysis.dcs import add_dcs
from analysis.gaps import Compare, dcs_gaps, gap_summary
from analysis.kept_comparisons import keep
from analysis.load import scenario_labels
from analysis.plot_jobs import Figures, PlotPool
from analysis.report_data import Report
from analysis.worst_case import default_view, worst_case
from trainables.errors import ConfigError


def prepare(records: pd.DataFrame, beta: float) -> pd.DataFrame:
    """Records plus ``scenario`` and the DCS columns at ``beta``."""
    frame = records.copy(deep=False)  # copy-on-write (pandas 3): adds columns only
    frame["scenario"] = scenario_labels(frame)
    return add_dcs(frame, beta)


def build(
    records: pd.DataFrame,
    beta: float,
    weights: dict[str, float],
    compares: list[Compare],
    manifest: dict[str, object] | None = None,
    ready: Callable[[str, object], None] | None = None,
    family: str = "comparison",
    effect: float = 0.05,
) -> Report:
    """All tables (no I/O); ``timings`` says where the time went. ``manifest``: the
    sweep's ``manifest.json`` (its varying fields); without it they are inferred.
    ``ready(name, value)`` hears of each figure's input as soon as it exists ("dcs",
    "per_training", "beta", "gaps"), so figures can be drawn meanwhile (plot_jobs.py);
    the order of the tables puts the inputs of the most figures first."""
    from analysis.ranking import beta_sensitivity, ranking_table, seed_means

    timings: dict[str, float] = {}
    clock = time.perf_counter()
    tell = ready or (lambda name, value: None)

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = round(now - clock, 4)
        clock = now

    dcs = prepare(records, beta)
    worst = worst_case(dcs, weights)  # adaptive attackers: a view of their own
    dcs = default_view(dcs)  # every other table: each attack at its fixed setting, once
    tell("dcs", dcs)
    lap("dcs")
    report = Report(dcs, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(), timings=timings)
    report.summary = summarize(dcs, beta, weights)
    report.summary["damaged"] = dict(records.attrs.get("damaged") or {})  # not read: see load
    report.summary["completeness"] = completeness(records, manifest)
    report.worst = worst
    if worst is not None:
        report.summary["worst_case"] = worst.summary()
    add_axes(report, records, manifest)
    if report.per_training is not None:
        tell("per_training", (report.per_training, report.axes))
    lap("by_axis")
    levels = seed_means(dcs)
    lap("seed_means")
    report.beta = beta_sensitivity(dcs, weights, levels)
    tell("beta", report.beta)
    lap("beta_sensitivity")
    report.ranking = ranking_table(dcs, weights, levels)
    lap("ranking")
    if report.has_attacks:
        report.answer = build_answer(dcs, report.ranking)
        report.summary["at_chance_undefended"] = report.answer.at_chance[
            ["scenario", "attack"]
        ].to_dict("records")
    lap("answer")
    report.cap = cap_table(dcs)
    lap("cap")
    summaries: dict[str, dict[str, object]] = {}  # summary.json's "contrasts": one each
    for c in compares:  # MP contrasts need no attack; gaps need scored attack rows
        arms = row_arms(dcs, c)  # each spec parsed once for both
        by = family if family != "analysis" else "comparison"  # joint: after the loop
        found = report.contrasts[c.key] = contrasts(dcs, c, arms, by, effect)
        report.summary["contrasts"] = summaries
        summaries[c.key] = contrast_summary(found)
        if report.has_attacks:
            try:
                report.gaps[c.key] = dcs_gaps(dcs, c, found.left_out, arms)
            except ConfigError as err:  # attacks in one arm only: the contrasts still hold
                summaries[c.key]["gaps"] = f"skipped: {err}"
                continue
            tell("gaps", (c.key, report.gaps[c.key]))
    if family == "analysis" and report.contrasts:
        joint_holm(list(report.contrasts.values()))
        for key, found in report.contrasts.items():  # the verdicts changed with the family
            gaps = summaries[key].get("gaps")
            summaries[key] = contrast_summary(found)
            if gaps is not None:
                summaries[key]["gaps"] = gaps
    lap("contrasts")
    return report


def contrast_summary(found: Contrasts) -> dict[str, object]:
    """What summary.json says of one comparison: its size and how the verdicts fell."""
    table = found.table
    return {
        "compare": found.compare.text,
        "delta": found.compare.label,
        "contexts": found.contexts,
        "contrasts": int((table["kind"] == "contrast").sum()),
        "interactions": int((table["kind"] == "interaction").sum()),
        "correction": "holm",
        "family": str(table["family_by"].iloc[0]) if len(table) else "comparison",
        "verdicts": {str(k): int(v) for k, v in table["verdict"].value_counts().items()},
        "left_out_at_chance": found.left_out.to_dict("records"),
    }


def add_axes(report: Report, records: pd.DataFrame, manifest: dict[str, object] | None) -> None:
    """The sweep's axes, ``by_axis`` and ``best`` of ``records`` into ``report``."""
    flat, axes = flatten(records, manifest)
    report.axes = [a for a in axes if a != "seed"]
    report.per_training = per_training(flat, report.axes)
    if len(report.per_training):
        report.by_axis = by_axis_table(report.per_training, report.axes)
        report.best = best_cells(report.by_axis, report.axes)
    report.summary["axes"] = report.axes
    report.summary["cells"] = 0 if report.by_axis is None else len(report.by_axis)
    if not report.has_attacks:
        report.summary["dcs"] = "skipped: no attack rows (DCS, ranking and CAP need attacks)"


def summarize(dcs: pd.DataFrame, beta: float, weights: dict[str, float]) -> dict[str, object]:
    """Counts a reader needs to trust the tables: ignored and unpaired rows above all."""
    ok = dcs["status"] == "ok"
    attack_rows = ok & (dcs["attack"] != "none")
    return {
        "rows": len(dcs),
        "trainings": int(dcs["trial_id"].nunique()),
        "rows_not_ok_ignored": int((~ok).sum()),
        "trainings_not_ok": int(dcs.loc[~ok, "trial_id"].nunique()),
        # stopped early by a scheduler or pruner: records, not failures, left out likewise
        "trainings_stopped": int(dcs.loc[dcs["status"] == "stopped", "trial_id"].nunique()),
        "attack_rows": int(attack_rows.sum()),
        "attack_rows_scored": int(dcs["dcs"].notna().sum()),
        "attack_rows_without_mp_star": int((attack_rows & dcs["mp_star"].isna()).sum()),
        "attack_rows_without_ap": int((attack_rows & dcs["ap"].isna()).sum()),
        "scenarios": [str(s) for s in dcs["scenario"].unique()],
        "beta": beta,
        "weights": weights,
    }


def make(
    records: pd.DataFrame,
    beta: float,
    weights: dict[str, float],
    compares: list[Compare],
    out: Path,
    manifest: dict[str, object] | None = None,
    pool: PlotPool | None = None,
    family: str = "comparison",
    effect: float = 0.05,
) -> Report:
    """``build`` and ``write`` in one go, the figures drawn by ``pool``'s workers while the
    tables are computed (``analysis/plot_jobs.py``); no figures without a pool."""
    tmp = staging(out)
    try:
        figures = Figures(pool, tmp, compares) if pool is not None else None
        ready = figures.ready if figures is not None else None
        report = build(records, beta, weights, compares, manifest, ready, family, effect)
        write_files(report, tmp, pool, out)
        swap_in(tmp, out)
    except BaseException:
        if pool is not None:  # no figure lands in ``tmp`` after it is removed
            pool.close()
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return report


def write(report: Report, out: Path, compares: list[Compare], plots: bool = True) -> Path:
    """Write every table and plot into a temporary sibling of ``out``, then swap it in."""
    tmp = staging(out)
    try:
        with PlotPool() if plots else nullcontext() as pool:
            if pool is not None:
                figures = Figures(pool, tmp, compares)
                if report.has_attacks:
                    figures.ready("dcs", report.dcs)
                    figures.ready("beta", report.beta)
                    for compare in compares:
                        if compare.key in report.gaps:
                            figures.ready("gaps", (compare.key, report.gaps[compare.key]))
                if report.per_training is not None:
                    figures.ready("per_training", (report.per_training, report.axes))
            write_files(report, tmp, pool, out)
        swap_in(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def staging(out: Path) -> Path:
    """A fresh temporary sibling of ``out`` (swapped in when complete)."""
    tmp = out.parent / f".{out.name}.partial-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    return tmp


def write_files(
    report: Report, tmp: Path, pool: PlotPool | None, earlier: Path | None = None
) -> None:
    """Tables and ``summary.json`` into ``tmp``, then wait for the figures ``pool`` draws;
    the comparisons of ``earlier`` (the report ``tmp`` replaces) this one did not redo are
    kept (``kept_comparisons.py``)."""
    clock = time.perf_counter()
    if report.has_attacks:
        write_tables(report, tmp)
    write_contrasts(report, tmp)
    write_axis_tables(report, tmp)
    report.timings["write_tables"] = round(time.perf_counter() - clock, 4)
    if pool is not None:
        clock = time.perf_counter()
        pool.join()  # a figure's exception stops the report here, before the swap
        report.timings["plots_wait"] = round(time.perf_counter() - clock, 4)
        report.timings["plots_busy"] = round(pool.busy, 4)  # drawing, all workers
    keep(report, tmp, earlier)  # after the figures: a comparison's files include its own
    (tmp / "summary.json").write_text(json.dumps(report.summary, indent=2, default=str))
    write_index(report, tmp)  # after the figures: it lists every one of them


def write_tables(report: Report, folder: Path) -> None:
    dcs = report.dcs.drop(columns=["spec_json"], errors="ignore")
    pq.write_table(pa.Table.from_pandas(dcs, preserve_index=False), folder / "dcs.parquet")
    write_csv(report.ranking, folder / "ranking.csv")
    write_csv(report.beta, folder / "beta_sensitivity.csv")
    write_csv(report.cap, folder / "cap.csv")
    if report.answer is not None:
        write_csv(report.answer.cells, folder / "answer_cells.csv")
        write_csv(report.answer.by_attack, folder / "answer_by_attack.csv")
    if report.worst is not None:
        write_csv(report.worst.attacks, folder / "worst_case_attacks.csv")
        write_csv(report.worst.cells, folder / "worst_case_cells.csv")
        write_csv(report.worst.tau, folder / "worst_case_tau.csv")
    for key, pairs in report.gaps.items():
        write_csv(pairs, folder / f"dcs_gap_{key}.csv")
        write_csv(gap_summary(pairs), folder / f"dcs_gap_{key}_summary.csv")
    if "split_importance" in dcs.columns and dcs["split_importance"].notna().any():
        from analysis import split_leakage  # VertiBench splits: leakage vs measured importance

        write_csv(split_leakage.bins(dcs), folder / "split_leakage_bins.csv")
        write_csv(split_leakage.slopes(dcs), folder / "split_leakage_slopes.csv")


def write_contrasts(report: Report, folder: Path) -> None:
    """``contrast_<key>.csv`` / ``.parquet`` (every contrast and interaction) and
    ``contrast_<key>_baselines.csv`` (each arm's undefended cell) per comparison, its key
    the axis and both levels (``Compare.key``)."""
    for key, found in report.contrasts.items():
        write_csv(found.table, folder / f"contrast_{key}.csv")
        table = pa.Table.from_pandas(found.table, preserve_index=False)
        pq.write_table(table, folder / f"contrast_{key}.parquet")
        write_csv(found.baselines, folder / f"contrast_{key}_baselines.csv")


def write_index(report: Report, folder: Path) -> None:
    """``index.md`` and ``index.html``: the printed answer, then every figure and table."""
    from analysis.index_page import write_pages

    write_pages(report, folder)


def write_axis_tables(report: Report, folder: Path) -> None:
    """``by_axis.csv`` and ``best.json`` (absent only when no training finished ok)."""
    if report.by_axis is None:
        return
    write_csv(report.by_axis, folder / "by_axis.csv")
    (folder / "best.json").write_text(json.dumps(report.best, indent=2, default=str))


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    """CSV through Arrow's C++ writer (pandas' to_csv takes seconds on 500k gap pairs)."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    columns = [
        c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns
    ]
    pacsv.write_csv(pa.table(columns, names=table.column_names), path)


def swap_in(tmp: Path, out: Path) -> None:
    """Replace ``out`` by ``tmp`` with two renames (the old report is removed afterwards)."""
    old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)
