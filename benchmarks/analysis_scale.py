"""``python -m benchmarks.analysis_scale``: the whole analysis report on 1,000,000 records,
read in the layout the sink really writes.

Workload: a synthetic VFLAIR-shaped sweep (``analysis.synthetic.synthetic_table``): 4
scenarios (agg/split x FedSGD/FedBCD), 20 defenses x 10 strengths + undefended, 12 attacks
(10 inference-time sharing a training, 2 training-time with their own), about 96 seeds:
about 231k trainings. They are written through ``RecordSink.write_many`` in packs of
``--pack`` trainings, the driver calling ``maybe_compact(--threshold)`` after each pack and
``compact()`` at the end, as a sweep does; the JSON gives those seconds. Timed (median over
``--repeats``): reading the records, every table (DCS, ranking with bootstrap, β
sensitivity, CAP, two DCS-gap comparisons) and every plot, as ``python -m analysis <dir>
--compare partition=split:agg --compare protocol=fedbcd:fedsgd --no-mlflow`` does.
Separately, ``--small-files`` trainings are read as single files and again compacted: the
cost per file that compaction removes. Prints one JSON object. Target: whole report
<= 10 s on the 2-core dev machine. ``--records 20000`` for a quick check.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from analysis.gaps import parse_compare
from analysis.load import read_records
from analysis.ranking import DEFAULT_WEIGHTS
from analysis.report import build, write
from analysis.synthetic import synthetic_table
from sweep_engine.sink import RecordSink
from trainables.records import Record

TARGET_S = 10.0
FILLED = {"rounds": 10, "comm_bytes": 1000, "train_seconds": 1.0}  # not in the synthetic rows


def packs(table: pa.Table, size: int) -> Iterator[list[tuple[str, list[Record]]]]:
    """The table's trainings as Records, ``size`` trainings at a time (rows of a training
    are contiguous in the synthetic table)."""
    step = 13 * max(1, size // 3)  # 13 rows = 3 trainings of one setting and strength
    for start in range(0, table.num_rows, step):
        trainings: dict[str, list[Record]] = {}
        for row in table.slice(start, step).to_pylist():
            trainings.setdefault(row["trial_id"], []).append(Record(**FILLED, **row))
        yield list(trainings.items())


def write_through_sink(table: pa.Table, folder: Path, pack: int, threshold: int) -> dict:
    """Seconds to write every training as a sweep does, and to compact."""
    sink = RecordSink(folder)
    write_s = compact_s = 0.0
    trainings = 0
    for items in packs(table, pack):
        start = time.perf_counter()
        sink.write_many(items)
        write_s += time.perf_counter() - start
        trainings += len(items)
        start = time.perf_counter()
        sink.maybe_compact(threshold)
        compact_s += time.perf_counter() - start
    start = time.perf_counter()
    sink.compact()
    compact_s += time.perf_counter() - start
    return {
        "trainings": trainings,
        "write_seconds": round(write_s, 1),
        "write_ms_per_training": round(1000 * write_s / trainings, 3),
        "compact_seconds": round(compact_s, 1),
        "part_files": len(sink.files()),
    }


def one_report(folder: Path) -> dict[str, float]:
    compares = [parse_compare("partition=split:agg"), parse_compare("protocol=fedbcd:fedsgd")]
    start = time.perf_counter()
    records = read_records(folder)
    read_s = time.perf_counter() - start
    report = build(records, 0.5, DEFAULT_WEIGHTS, compares)
    write(report, folder / "report", compares)
    total = time.perf_counter() - start
    return {"read": read_s, **report.timings, "total": total}


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def small_files(table: pa.Table, folder: Path, n_trainings: int) -> dict:
    """Reading ``n_trainings`` as one file each, then compacted: per training, in ms."""
    sink = RecordSink(folder)
    items = [item for items in packs(table.slice(0, 13 * n_trainings), 300) for item in items]
    items = items[:n_trainings]
    for start in range(0, len(items), 300):
        sink.write_many(items[start : start + 300])
    single = {"read": timed(lambda: read_records(folder)), "done": timed(sink.done)}
    sink.compact()
    compacted = {"read": timed(lambda: read_records(folder)), "done": timed(sink.done)}
    per = {k: 1000 / len(items) for k in ("read", "done")}
    return {
        "small_trainings": len(items),
        "single_files_ms_per_training": {k: round(v * per[k], 3) for k, v in single.items()},
        "compacted_ms_per_training": {k: round(v * per[k], 4) for k, v in compacted.items()},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", "--rows", type=int, default=1_000_000, dest="records")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pack", type=int, default=100, help="trainings per write_many")
    p.add_argument("--threshold", type=int, default=10_000, help="maybe_compact threshold")
    p.add_argument("--small-files", type=int, default=2000)
    args = p.parse_args()
    table = synthetic_table(args.records)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "syn"
        written = write_through_sink(table, folder, args.pack, args.threshold)
        runs = [one_report(folder) for _ in range(args.repeats)]
        small = small_files(table, Path(tmp) / "small", args.small_files)
    medians = {k: round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
    per_file_read = small["single_files_ms_per_training"]["read"]
    out = {
        "benchmark": "analysis_scale",
        "rows": table.num_rows,
        **written,
        "repeats": args.repeats,
        "median_seconds": medians,
        "total_runs_seconds": [round(r["total"], 3) for r in runs],
        "target_seconds": TARGET_S,
        "meets_target": medians["total"] <= TARGET_S,
        **small,
        "uncompacted_read_seconds_estimate": round(per_file_read * written["trainings"] / 1000, 1),
        "cpus": os.cpu_count(),
        "loadavg_1min_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
