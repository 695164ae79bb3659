"""``python -m benchmarks.lr_sweep``: docs/analysis.md's hyperparameter walk-through, end to end.

Runs ``search_spaces/lr_sweep.yaml`` (lr x optimizer x 4 seeds on breast_cancer) through
``sweep.py`` into a fresh results folder, then ``python -m analysis`` on it, and prints
one JSON object: the best cell for MP from ``best.json`` with its mean and CI, the cells
whose CI overlaps it, the rows of ``by_axis.csv`` (mean MP, CI, n per cell) and the wall
seconds of the sweep and of the analysis. ``--keep DIR`` keeps the results (docs/analysis.md's
figure is ``DIR/lr_sweep/report/axis_lr.png``).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import tempfile
import time
from pathlib import Path

from analysis.cli import main as analysis_main
from sweep_engine.cli import main as sweep_main


def run(results: Path) -> dict[str, object]:
    """Sweep and analyse into ``results``; the summary printed."""
    clock = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = sweep_main(["--space", "lr_sweep", "--results", str(results), "--no-mlflow"])
    sweep_s = time.perf_counter() - clock
    if code != 0:
        raise SystemExit(f"sweep.py exited {code}")
    clock = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = analysis_main([str(results / "lr_sweep"), "--no-mlflow"])
    analysis_s = time.perf_counter() - clock
    if code != 0:
        raise SystemExit(f"python -m analysis exited {code}")
    report = results / "lr_sweep" / "report"
    best = json.loads((report / "best.json").read_text())
    keep = ("cell", "mp_mean", "mp_ci_lo", "mp_ci_hi", "mp_n")
    with (report / "by_axis.csv").open() as f:
        rows = [{k: r[k] for k in keep} for r in csv.DictReader(f)]
    return {
        "space": "lr_sweep",
        "best_mp": best["metrics"]["mp"],
        "by_axis_mp": rows,
        "sweep_seconds": round(sweep_s, 1),
        "analysis_seconds": round(analysis_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", default=None, help="results folder to keep (default: temp)")
    args = parser.parse_args()
    if args.keep:
        print(json.dumps(run(Path(args.keep)), default=str))
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run(Path(tmp)), default=str))


if __name__ == "__main__":
    main()
