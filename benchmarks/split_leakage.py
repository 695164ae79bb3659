"""``python -m benchmarks.split_leakage [--results DIR]``: does label leakage depend on how
much of the signal the passive party holds? Prints one JSON object.

Runs ``search_spaces/split_leakage.yaml`` (VertiBench's importance split, α in {0.1, 1,
10, 100}; breast_cancer, adult, digits; none vs G-DP 0.01; PMC, MC, NS, DLI; 3 seeds;
about 10 min on 2 cores, adult's data file needed from ../shared) into ``--results``
(resuming: trainings already recorded there are not run again), then reads its records:

- ``alpha``: per dataset and α, the measured passive importance (mean, min, max over
  seeds): how spread the draws of each knob value are;
- ``slopes``: per (dataset, attack, defense) the slope of the chance-aware advantage on
  the measured passive importance with its 95 % interval, Spearman's ρ and a one-line
  verdict (``analysis/split_leakage.py``);
- ``bins``: mean advantage ± half-width per importance quintile (none below 3 trainings);
- ``seconds``: the sweep's wall time (short when everything was recorded already);
- ``first_use_seconds``: per dataset, what the once-per-machine measurements cost in a
  fresh cache folder (importance: XGBoost + SHAP; icor_range: VertiBench's min/max Icor
  search at the default 100 generations, 2 parties).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks import ROOT, run_space


def run_sweep(results: Path) -> float:
    return run_space("split_leakage", results)


def measure(sweep_dir: Path) -> dict[str, object]:
    from analysis import split_leakage
    from analysis.load import read_records

    records = read_records(sweep_dir, with_spec=False)
    clean = records[(records["attack"] == "none") & (records["defense"] == "none")]
    alpha = (
        clean.groupby(["dataset", "split_param"])["split_importance"]
        .agg(["mean", "min", "max", "count"])
        .round(3)
        .reset_index()
    )
    slopes = split_leakage.slopes(records)
    slopes["verdict"] = slopes.apply(split_leakage.verdict, axis=1)
    bins = split_leakage.bins(records)
    mp = clean.groupby(["dataset", "split_param"])["mp"].mean().round(4).reset_index()
    return {
        "trainings": int(records["trial_id"].nunique()),
        "alpha": alpha.to_dict("records"),
        "mp_undefended": mp.to_dict("records"),
        "slopes": slopes.round(4).to_dict("records"),
        "bins": bins[[*split_leakage.KEYS, "importance_bin", "mean", "trainings", "half"]]
        .round(4)
        .to_dict("records"),
    }


def first_use(datasets: tuple[str, ...] = ("breast_cancer", "digits")) -> dict[str, object]:
    import tempfile

    import vertibench.Evaluator  # noqa: F401  (its shap/numba import is not a first-use cost)

    from trainables.data import load_dataset
    from trainables.data import vertibench_split as vs

    out: dict[str, object] = {}
    before = os.environ.get("VFLSWEEP_CACHE")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["VFLSWEEP_CACHE"] = cache
        for name in datasets:
            ds = load_dataset(name)
            start = time.perf_counter()
            vs.field_importance(ds)
            middle = time.perf_counter()
            vs.icor_range(ds, 2, 100)
            end = time.perf_counter()
            out[name] = {
                "fields": len(ds.feature_groups),
                "importance": round(middle - start, 1),
                "icor_range": round(end - middle, 1),
            }
    if before is None:
        os.environ.pop("VFLSWEEP_CACHE")
    else:
        os.environ["VFLSWEEP_CACHE"] = before
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "bench-split")
    args = parser.parse_args()
    seconds = run_sweep(args.results)
    out = {"seconds": round(seconds, 1), **measure(args.results / "split_leakage")}
    out["first_use_seconds"] = first_use()
    print(json.dumps(out, default=lambda v: None if v != v else v))


if __name__ == "__main__":
    main()
