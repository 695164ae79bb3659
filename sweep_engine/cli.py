"""``python sweep.py``: load and validate a space, plan it, run it on Ray Tune, summarize.

Exit codes: 0 all trainings recorded, 1 some training failed after its retries (its
record says ``status='error'``), 2 bad input (nothing was written).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from sweep_engine.lock import SweepLock, describe
from sweep_engine.plan import Plan, expand
from sweep_engine.sink import RecordSink
from sweep_engine.space import load_space
from trainables.errors import ConfigError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python sweep.py", description="Run a sweep of VFL trials.")
    p.add_argument("--space", required=True, help="a space file, or a name in search_spaces/")
    p.add_argument("--results", default="results", help="results folder (default ./results)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    p.add_argument("--json", action="store_true", help="with --dry-run: one JSON object")
    p.add_argument("--address", default=None, help="join a Ray cluster: auto or ray://host:10001")
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local Ray (default all)")
    p.add_argument("--data-dir", default=None, help="dataset files (env VFLSWEEP_DATA)")
    p.add_argument(
        "--resume", action="store_true", help="skip recorded trainings (what a re-run does anyway)"
    )
    p.add_argument(
        "--mlflow-uri", default=None, help="MLflow server (default sqlite:///<results>/mlflow.db)"
    )
    p.add_argument("--no-mlflow", action="store_true", help="do not log the sweep to MLflow")
    return p


def print_plan(plan: Plan, as_json: bool) -> None:
    summary = plan.summary()
    if as_json:
        print(json.dumps(summary, default=str))
        return
    print(f"space {summary['space']} ({summary['source']})")
    print(f"  trainings:   {summary['trainings']}")
    print(f"  evaluations: {summary['evaluations']} attack evaluations on those trainings")
    print(f"  dropped:     {summary['dropped']} cells")
    for d in summary["dropped_cells"]:
        print(f"    - {d['cell']}: {d['reason']}")
    if summary["search"]:
        s = summary["search"]
        print(f"  search:      {s['cells']} studies x {s['trials_per_cell']} trials")
    for shape, bundles in summary["trial_resources"].items():
        print(f"  one trial ({shape.replace('_', ' ')}): bundles {bundles}")


def execute(plan: Plan, args: argparse.Namespace) -> int:
    from sweep_engine import runner

    sweep_dir = Path(args.results) / plan.space.name
    sink = RecordSink(sweep_dir)
    sink.clean_temporaries()
    sink.quarantine_bad_files()  # corrupt files are moved aside; their trainings run again
    done = sink.done()
    start = time.perf_counter()
    if plan.space.search is not None:
        from sweep_engine.search import run_searches

        runner.start_ray(args.address, args.num_cpus)
        runner.check_fits(plan)
        written, failed, skipped = run_searches(plan, sweep_dir, args.data_dir)
    else:
        todo = [t for t in plan.trainings if t.trial_id not in done]
        skipped = len(plan.trainings) - len(todo)
        print(
            f"{len(plan.trainings)} trainings planned, {skipped} already recorded, "
            f"{len(todo)} to run",
            flush=True,
        )
        written = failed = 0
        if todo:
            runner.start_ray(args.address, args.num_cpus)
            runner.check_fits(plan)
            written, failed = runner.run_grid(plan, sweep_dir, todo, args.data_dir)
    wall = time.perf_counter() - start
    if not args.no_mlflow:
        from sweep_engine.tracking import sync_after_sweep

        sync_after_sweep(sweep_dir, args.mlflow_uri, Path(args.results))
    print(
        f"done: {written} trainings recorded, {failed} failed, {skipped} skipped "
        f"(already recorded); wall {wall:.1f}s; records in {sink.records_dir}",
        flush=True,
    )
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        plan = expand(load_space(args.space), args.data_dir)
        if args.dry_run:
            print_plan(plan, args.json)
            return 0
        print_plan(plan, as_json=False)
        with SweepLock(Path(args.results) / plan.space.name) as lock:  # exit 2 if held
            if lock.stale:
                print(f"took over the stale lock of a dead driver: {describe(lock.stale)}")
            return execute(plan, args)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
