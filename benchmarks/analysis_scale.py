"""``python -m benchmarks.analysis_scale``: the whole analysis report on 1,000,000 records.

Workload: a synthetic VFLAIR-shaped sweep (``analysis.synthetic.synthetic_table``): 4
scenarios (agg/split x FedSGD/FedBCD), 20 defenses x 10 strengths + undefended, 12 attacks
(10 inference-time sharing a training, 2 training-time with their own), about 96 seeds,
written as 16 Parquet files. Timed (median over ``--repeats``): reading the records,
every table (DCS, ranking with bootstrap, β sensitivity, CAP, two DCS-gap comparisons)
and every plot, as ``python -m analysis <dir> --compare partition=split:agg --compare
protocol=fedbcd:fedsgd --no-mlflow`` does. A sweep's real layout is one small file per
training; the cost per file is measured separately on ``--small-files`` one-training
files, and the JSON gives the read time that layout would add for this many trainings.
Prints one JSON object. Target: whole report <= 10 s on the 2-core dev machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from analysis.gaps import parse_compare
from analysis.load import read_records
from analysis.ranking import DEFAULT_WEIGHTS
from analysis.report import build, write
from analysis.synthetic import synthetic_table

TARGET_S = 10.0


def write_parts(table, folder: Path, n_files: int) -> None:
    (folder / "records").mkdir(parents=True)
    step = -(-table.num_rows // n_files)
    for i, start in enumerate(range(0, table.num_rows, step)):
        pq.write_table(table.slice(start, step), folder / "records" / f"part{i:04d}.parquet")


def one_report(folder: Path) -> dict[str, float]:
    compares = [parse_compare("partition=split:agg"), parse_compare("protocol=fedbcd:fedsgd")]
    start = time.perf_counter()
    records = read_records(folder)
    read_s = time.perf_counter() - start
    report = build(records, 0.5, DEFAULT_WEIGHTS, compares)
    write(report, folder / "report", compares)
    total = time.perf_counter() - start
    return {"read": read_s, **report.timings, "total": total}


def per_file_read_ms(table, folder: Path, n_files: int) -> float:
    """Read cost per one-training file (11-row slices, as the sink writes them)."""
    (folder / "records").mkdir(parents=True)
    for i in range(n_files):
        pq.write_table(table.slice(i * 11, 11), folder / "records" / f"t{i:06d}.parquet")
    start = time.perf_counter()
    read_records(folder)
    return 1000 * (time.perf_counter() - start) / n_files


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--files", type=int, default=16)
    p.add_argument("--small-files", type=int, default=2000)
    args = p.parse_args()
    table = synthetic_table(args.rows)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "syn"
        write_parts(table, folder, args.files)
        runs = [one_report(folder) for _ in range(args.repeats)]
        per_file = per_file_read_ms(table, Path(tmp) / "small", args.small_files)
    medians = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
    trainings = len(set(table.column("trial_id").to_pylist()))
    print(
        json.dumps(
            {
                "benchmark": "analysis_scale",
                "rows": table.num_rows,
                "trainings": trainings,
                "files": args.files,
                "repeats": args.repeats,
                "median_seconds": medians,
                "total_runs_seconds": [round(r["total"], 3) for r in runs],
                "target_seconds": TARGET_S,
                "meets_target": medians["total"] <= TARGET_S,
                "read_ms_per_small_file": round(per_file, 3),
                "one_file_per_training_read_seconds_estimate": round(
                    per_file * trainings / 1000, 1
                ),
                "cpus": os.cpu_count(),
                "loadavg_1min_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            }
        )
    )


if __name__ == "__main__":
    main()
