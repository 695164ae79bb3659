"""``python -m benchmarks.analysis_scale``: the whole analysis report on 1,000,000 records,
read in the layout the sink really writes.

Workload: a synthetic VFLAIR-shaped sweep (``analysis.synthetic.synthetic_table``): 4
scenarios (agg/split x FedSGD/FedBCD), 20 defenses x 10 strengths + undefended, 12 attacks
(10 inference-time sharing a training, 2 training-time with their own), about 96 seeds:
about 231k trainings. They are written through ``RecordSink.write_many`` in packs of
``--pack`` trainings (a pack of ``sink.PART_AT`` or more is one part file, as the driver
writes a stack's batch), the driver calling ``maybe_compact(--threshold)`` after each pack and
``compact()`` at the end, as a sweep does; the JSON gives those seconds (``--keep DIR``
writes them there once and reuses them after). Timed (median over ``--repeats``): the
command a user runs, ``python -m analysis <dir> --compare partition=agg:split --compare
protocol=fedsgd:fedbcd --no-mlflow``, in a fresh interpreter: every table (DCS, ranking
with bootstrap, β sensitivity, CAP, two DCS-gap comparisons, by-axis) and every figure.
Phases from the timings it prints: ``startup_imports_exit`` (interpreter, imports, exit),
``read``, ``compute`` (tables), ``write_tables``, ``plots_not_overlapped`` (waiting for
figures after the tables), ``total`` (wall), ``cpu_all_processes`` (CPU seconds of the
command and its plot workers: what the 2 cores must share). ``--against DIR`` times
another checkout's ``python -m analysis`` on the same records, interleaved, and checks
that both write the same files, byte for byte (sha256 of every table and figure). Separately,
``--small-files`` trainings are read as single files and again compacted: the cost per
file that compaction removes. Prints one JSON object. Target: ``total`` <= 10 s on the
2-core dev machine. ``--records 20000`` for a quick check.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from analysis.load import read_records
from analysis.synthetic import synthetic_table
from sweep_engine.sink import PART_AT, RecordSink
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


COMMAND = [
    "-m",
    "analysis",
    "--compare",
    "partition=agg:split",
    "--compare",
    "protocol=fedsgd:fedbcd",
    "--no-mlflow",
]
BUILD_LAPS = (
    "dcs", "by_axis", "seed_means", "beta_sensitivity", "ranking", "answer", "cap", "gaps",
    "contrasts",  # the gaps' lap since contrasts (issue 42): contrasts and gaps together
)  # fmt: skip


def one_report(folder: Path, code: Path) -> dict[str, float]:
    """``python -m analysis`` as a user runs it (a fresh interpreter, imports included),
    with the code of ``code``; the phases from the timings it prints."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # the summary as JSON: an explicit flag since the answer's tables became the default
    as_json = ["--json"] if "--json" in (code / "analysis" / "cli.py").read_text() else []
    done = subprocess.run(
        [sys.executable, *COMMAND[:2], str(folder), *COMMAND[2:], *as_json],
        cwd=code,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    total = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime
    timings = json.loads(done.stdout.strip().splitlines()[-1])["timings"]
    compute = sum(timings.get(k, 0.0) for k in BUILD_LAPS)
    plots = timings.get("plots_wait", timings.get("plots", 0.0))  # before: drawn after
    inside = timings.get("report", timings["read"] + compute + timings["write_tables"] + plots)
    return {
        "startup_imports_exit": total - inside,  # interpreter, imports, MLflow-free exit
        "read": timings["read"],
        "compute": compute,
        "write_tables": timings["write_tables"],
        "plots_not_overlapped": plots,
        "plots_busy": timings.get("plots_busy", timings.get("plots", 0.0)),
        "total": total,
        "cpu_all_processes": cpu_s,  # the CLI and its plot workers: load-independent-ish
        **{k: timings[k] for k in ("cpu_main", "cpu_plot_workers") if k in timings},
    }


def report_files(folder: Path) -> dict[str, str]:
    """sha256 of every file the report wrote (tables, JSON, Parquet and figures);
    ``comparisons.json`` without its ``analyzed_at`` times, which differ between any two
    runs (``analysis/kept_comparisons.py``)."""
    out = {}
    for path in sorted((folder / "report").iterdir()):
        data = path.read_bytes()
        if path.name == "comparisons.json":
            data = re.sub(rb'"analyzed_at": "[^"]*"', b'"analyzed_at": ""', data)
        out[path.name] = hashlib.sha256(data).hexdigest()
    return out


def reports(folder: Path, codes: dict[str, Path], repeats: int) -> dict[str, object]:
    """Each code's report ``repeats`` times, interleaved (same load for both); medians,
    and whether every code wrote the same tables."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in codes}
    tables: dict[str, dict[str, str]] = {}
    for _ in range(repeats):
        for name, code in codes.items():
            runs[name].append(one_report(folder, code))
            tables[name] = report_files(folder)
    out: dict[str, object] = {}
    for name, rs in runs.items():
        medians = {k: round(statistics.median(r[k] for r in rs), 3) for k in rs[0]}
        out[name] = {
            "median_seconds": medians,
            "total_runs_seconds": [round(r["total"], 3) for r in rs],
            "meets_target": medians["total"] <= TARGET_S,
        }
    first = next(iter(tables.values()))
    out["same_files"] = all(t == first for t in tables.values())
    out["files_compared"] = len(first)
    return out


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def small_files(table: pa.Table, folder: Path, n_trainings: int, trainings: int) -> dict:
    """Reading ``n_trainings`` as one file each, then compacted: per training, in ms, and
    what reading all ``trainings`` as single files would take ({} for 0: not measured)."""
    if n_trainings <= 0:
        return {}
    sink = RecordSink(folder)
    items = [item for items in packs(table.slice(0, 13 * n_trainings), 300) for item in items]
    items = items[:n_trainings]
    batch = PART_AT - 1  # single files: a bigger batch is written as one part
    for start in range(0, len(items), batch):
        sink.write_many(items[start : start + batch])
    single = {"read": timed(lambda: read_records(folder)), "done": timed(sink.done)}
    sink.compact()
    compacted = {"read": timed(lambda: read_records(folder)), "done": timed(sink.done)}
    per = {k: 1000 / len(items) for k in ("read", "done")}
    return {
        "small_trainings": len(items),
        "single_files_ms_per_training": {k: round(v * per[k], 3) for k, v in single.items()},
        "compacted_ms_per_training": {k: round(v * per[k], 4) for k, v in compacted.items()},
        "uncompacted_read_seconds_estimate": round(single["read"] / len(items) * trainings, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", "--rows", type=int, default=1_000_000, dest="records")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pack", type=int, default=100, help="trainings per write_many")
    p.add_argument("--threshold", type=int, default=10_000, help="maybe_compact threshold")
    p.add_argument("--small-files", type=int, default=2000, help="0: not measured")
    p.add_argument("--keep", type=Path, default=None, help="write the sweep here, or reuse it")
    p.add_argument("--against", type=Path, default=None, help="another checkout to time too")
    args = p.parse_args()
    table = synthetic_table(args.records)
    load_before = os.getloadavg()[0]
    codes = {"this": Path(__file__).resolve().parents[1]}
    if args.against:
        codes = {"against": args.against.resolve(), **codes}
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp) / "syn"
        if (folder / "records").is_dir():
            written: dict[str, object] = {"reused": str(folder)}
        else:
            written = write_through_sink(table, folder, args.pack, args.threshold)
        timed_reports = reports(folder, codes, args.repeats)
        trainings = pc.count_distinct(table.column("trial_id")).as_py()
        small = small_files(table, Path(tmp) / "small", args.small_files, trainings)
    out = {
        "benchmark": "analysis_scale",
        "rows": table.num_rows,
        **written,
        "command": "python " + " ".join([*COMMAND[:2], "<sweep dir>", *COMMAND[2:]]),
        "repeats": args.repeats,
        **timed_reports.pop("this"),  # median_seconds, total_runs_seconds, meets_target
        "target_seconds": TARGET_S,
        **timed_reports,  # "against" (with --against), same_files, files_compared
        **small,
        "cpus": os.cpu_count(),
        "loadavg_1min_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
