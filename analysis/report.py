"""The whole report of a sweep: tables and plots written into a fresh folder, then swapped
into place, so an interrupted run never leaves half a report behind."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from analysis.cap import cap_table
from analysis.dcs import add_dcs
from analysis.gaps import Compare, dcs_gaps, gap_summary
from analysis.load import scenario_labels


@dataclass
class Report:
    """What a report holds in memory (the CLI logs parts of it to MLflow)."""

    dcs: pd.DataFrame
    ranking: pd.DataFrame
    beta: pd.DataFrame
    cap: pd.DataFrame
    gaps: dict[str, pd.DataFrame] = field(default_factory=dict)
    summary: dict[str, object] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


def prepare(records: pd.DataFrame, beta: float) -> pd.DataFrame:
    """Records plus ``scenario`` and the DCS columns at ``beta``."""
    frame = records.copy()
    frame["scenario"] = scenario_labels(frame)
    return add_dcs(frame, beta)


def build(
    records: pd.DataFrame,
    beta: float,
    weights: dict[str, float],
    compares: list[Compare],
) -> Report:
    """All tables (no I/O); ``timings`` says where the time went."""
    from analysis.ranking import beta_sensitivity, ranking_table, seed_means

    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = round(now - clock, 4)
        clock = now

    dcs = prepare(records, beta)
    lap("dcs")
    levels = seed_means(dcs)
    lap("seed_means")
    ranking = ranking_table(dcs, weights, levels)
    lap("ranking")
    sens = beta_sensitivity(dcs, weights, levels)
    lap("beta_sensitivity")
    cap = cap_table(dcs)
    lap("cap")
    gaps = {c.axis: dcs_gaps(dcs, c) for c in compares}
    lap("gaps")
    return Report(dcs, ranking, sens, cap, gaps, summarize(dcs, beta, weights), timings)


def summarize(dcs: pd.DataFrame, beta: float, weights: dict[str, float]) -> dict[str, object]:
    """Counts a reader needs to trust the tables: ignored and unpaired rows above all."""
    ok = dcs["status"] == "ok"
    attack_rows = ok & (dcs["attack"] != "none")
    return {
        "rows": len(dcs),
        "trainings": int(dcs["trial_id"].nunique()),
        "rows_not_ok_ignored": int((~ok).sum()),
        "trainings_not_ok": int(dcs.loc[~ok, "trial_id"].nunique()),
        "attack_rows": int(attack_rows.sum()),
        "attack_rows_scored": int(dcs["dcs"].notna().sum()),
        "attack_rows_without_mp_star": int((attack_rows & dcs["mp_star"].isna()).sum()),
        "attack_rows_without_ap": int((attack_rows & dcs["ap"].isna()).sum()),
        "scenarios": [str(s) for s in dcs["scenario"].unique()],
        "beta": beta,
        "weights": weights,
    }


def write(report: Report, out: Path, compares: list[Compare], plots: bool = True) -> Path:
    """Write every table and plot into a temporary sibling of ``out``, then swap it in."""
    tmp = out.parent / f".{out.name}.partial-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        clock = time.perf_counter()
        write_tables(report, tmp)
        report.timings["write_tables"] = round(time.perf_counter() - clock, 4)
        if plots:
            from analysis.plots import write_plots

            clock = time.perf_counter()
            write_plots(report, tmp, compares)
            report.timings["plots"] = round(time.perf_counter() - clock, 4)
        (tmp / "summary.json").write_text(json.dumps(report.summary, indent=2, default=str))
        swap_in(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def write_tables(report: Report, folder: Path) -> None:
    dcs = report.dcs.drop(columns=["spec_json"], errors="ignore")
    pq.write_table(pa.Table.from_pandas(dcs, preserve_index=False), folder / "dcs.parquet")
    write_csv(report.ranking, folder / "ranking.csv")
    write_csv(report.beta, folder / "beta_sensitivity.csv")
    write_csv(report.cap, folder / "cap.csv")
    for axis, pairs in report.gaps.items():
        write_csv(pairs, folder / f"dcs_gap_{axis}.csv")
        write_csv(gap_summary(pairs), folder / f"dcs_gap_{axis}_summary.csv")


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
