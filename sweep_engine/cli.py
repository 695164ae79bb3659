"""``python sweep.py``: load and validate a space, plan it, run it on Ray Tune, summarize.

Exit codes: 0 all trainings recorded, 1 some training failed after its retries (its
record says ``status='error'``), 2 bad input (nothing was written), 4 the results folder
cannot be written (a file, read-only, permission denied, disk full), 5 the Ray head was
lost (``fault_exits.py``: one ``error:`` line each), 130 interrupted by Ctrl-C
(``interrupted: N of M recorded; re-run to resume``: the records written stay).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from sweep_engine import quiet
from sweep_engine.dropped import dropped_lines, lost_arms
from sweep_engine.experiment import versioned
from sweep_engine.fault_exits import RayHeadWatch, SweepFault, Where, check_writable, end
from sweep_engine.heartbeat import say
from sweep_engine.lock import SweepLock, describe
from sweep_engine.manifest import write_manifest
from sweep_engine.plan import Plan, expand
from sweep_engine.process_exit import exit_process
from sweep_engine.sink import RecordSink
from sweep_engine.space import load_space
from sweep_engine.validate import check_local_fit
from sweep_engine.words import plural
from trainables.errors import ConfigError
from trainables.results.checks import Verified
from trainables.trial import actor_count

if TYPE_CHECKING:
    import pyarrow as pa

    from sweep_engine.heartbeat import Tracker


def build_parser(prog: str = "python sweep.py") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Run a sweep of VFL trials.")
    p.add_argument("--space", required=True, help="a space file, or a name in search_spaces/")
    p.add_argument("--results", default="results", help="results folder (default ./results)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    p.add_argument("--json", action="store_true", help="with --dry-run: one JSON object")
    p.add_argument(
        "--estimate",
        action="store_true",
        help="with --dry-run: measure every training class this machine's cost cache lacks, "
        "without the usual 20 s limit on measuring",
    )
    p.add_argument(
        "--address",
        default=None,
        help="join a Ray cluster: auto, host:port (its head's GCS) or ray://host:10001",
    )
    p.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local Ray (default all)")
    p.add_argument("--data-dir", default=None, help="dataset files (env VFLSWEEP_DATA)")
    p.add_argument(
        "--resume", action="store_true", help="skip recorded trainings (what a re-run does anyway)"
    )
    p.add_argument(
        "--mlflow-uri", default=None, help="MLflow server (default sqlite:///<results>/mlflow.db)"
    )
    p.add_argument("--no-mlflow", action="store_true", help="do not log the sweep to MLflow")
    p.add_argument(
        "--new-version",
        action="store_true",
        help="the space changed since RESULTS/NAME was run: run it beside the old one as "
        "RESULTS/NAME.v2 (.v3, ...) instead of refusing",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also show what Ray, Tune and MLflow log (hidden by default: sweep_engine/quiet.py)",
    )
    return p


def print_plan(plan: Plan, as_json: bool, args: argparse.Namespace) -> float | None:
    """Print the plan and its wall-time estimate; return the estimated seconds of the
    trainings left (start-up excluded: the heartbeat's ETA before a rate exists)."""
    from sweep_engine.estimate import STARTUP_S, estimate

    summary = plan.summary()
    guess = estimate(
        plan,
        args.num_cpus,
        probe=args.dry_run,  # a real run reads the cache only: it is about to measure anyway
        data_dir=args.data_dir,
        sweep_dir=Path(args.results) / plan.space.name,
        budget_s=float("inf") if args.estimate else None,
    )
    summary["estimate_s"] = round(guess.seconds, 1) if guess.todo > guess.unknown else None
    summary["estimate"] = guess.text()
    summary["recorded"] = guess.recorded
    summary["to_run"] = guess.todo
    summary["estimate_unknown"] = guess.unknown
    for message in plan.missing_data:
        print(
            f"warning: {message}; its cells are planned without the checks that read data, "
            "and a real run refuses to start until the file is there",
            file=sys.stderr,
        )
    left_s = max(0.0, guess.seconds - STARTUP_S) if summary["estimate_s"] is not None else None
    if as_json:
        print(json.dumps(summary, default=str))
        return left_s
    print(f"space {summary['space']} ({summary['source']})")
    trial_trainings = summary["attacker_trial_trainings"]
    more = f" (+{trial_trainings} trial trainings of adapted training-time attackers)"
    print(f"  trainings:   {summary['trainings']}{more if trial_trainings else ''}")
    evaluations = plural(summary["evaluations"], "attack evaluation")
    tuned = summary["adapted_evaluations"]
    also = f" ({tuned} also tuned by their attacker: docs/attacks.md)" if tuned else ""
    print(f"  evaluations: {evaluations} on those trainings{also}")
    for key, why in summary["defaults_applied"].items():  # defaults the space asked for
        print(f"  default:     {key}={why}")
    print(f"  dropped:     {plural(summary['dropped'], 'cell')}")
    for line in dropped_lines(summary["dropped_cells"]):  # one line per reason
        print(line)
    for line in lost_arms(plan):
        print(line, file=sys.stderr)
    if summary["search"]:
        s = summary["search"]
        trials = plural(s["trials_per_cell"], "trial")
        print(f"  search:      {plural(s['cells'], 'study')} x {trials}")
    for shape, bundles in summary["trial_resources"].items():
        print(f"  one trial ({shape.replace('_', ' ')}): bundles {bundles}")
    print(f"  wall time:   {summary['estimate']}")
    return left_s


EXIT_INTERRUPTED = 130  # 128 + SIGINT: what a shell reports for a command stopped by Ctrl-C
# Loggers that speak while Tune winds down (stop notices, "Trials did not complete",
# metrics files of trials that never started): silenced once the user asked to stop.
NOISY_LOGGERS = ("ray", "ray.tune", "ray.train", "ray.air")


@contextmanager
def sigint_stops_tune() -> Iterator[None]:
    """The first Ctrl-C stops every trial through ``runner.INTERRUPT``; a second aborts.

    Tune's own SIGINT handler is switched off (``TUNE_DISABLE_SIGINT_HANDLER``): it would
    stop the run too, but log its own instructions (``Tuner.restore``…), which are not how
    a sweep resumes, and leave us unable to tell an interrupted run from a finished one.
    """
    from sweep_engine import runner

    runner.INTERRUPT.clear()
    levels = {name: logging.getLogger(name).level for name in NOISY_LOGGERS}

    def on_sigint(signum: int, frame: object) -> None:
        if runner.INTERRUPT.is_set():
            raise KeyboardInterrupt  # the second Ctrl-C: stop waiting for Tune
        runner.INTERRUPT.set()
        for name in NOISY_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        _say("stopping: Ctrl-C received; Ctrl-C again to abort at once\n")

    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only; nothing to install
        return
    env = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if env is None:
            os.environ.pop("TUNE_DISABLE_SIGINT_HANDLER", None)
        else:
            os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = env
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _say(text: str) -> None:
    """Write to stdout's file descriptor: a ``print`` inside a signal handler can land in
    the middle of another ``print`` and fail (a reentrant call on the same buffer)."""
    try:
        os.write(sys.stdout.fileno(), text.encode())
    except (OSError, ValueError, AttributeError):  # stdout without a descriptor (captured)
        pass


def leave_ray_ignoring_sigint() -> None:
    """After Ctrl-C: disconnect from Ray now, with more Ctrl-Cs ignored meanwhile.

    Otherwise Ray disconnects in its exit handler, where a second Ctrl-C prints a
    ``KeyboardInterrupt`` traceback after our last line.
    """
    import ray

    if threading.current_thread() is not threading.main_thread():
        ray.shutdown()
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ray.shutdown()
    finally:
        signal.signal(signal.SIGINT, previous)


def recorded(plan: Plan, sweep_dir: Path) -> int:
    """Trainings of ``plan`` with a valid finished record now."""
    if plan.space.search is not None:
        from sweep_engine.search import recorded as search_recorded

        return search_recorded(plan, sweep_dir)
    done = RecordSink(sweep_dir).done()
    return sum(1 for t in plan.trainings if t.trial_id in done)


def run_plan(
    plan: Plan, args: argparse.Namespace, sweep_dir: Path, sink: RecordSink | None = None
) -> tuple[int, int, int]:
    """Run what is not recorded yet; returns (recorded now, failed, skipped as done).
    ``sink``: the caller's (a grid writes through it, and it remembers what it wrote).

    A heartbeat (``heartbeat.py``) runs from before Ray starts to the last trial's end: a
    line whenever no training finished for a while, and ``progress.json`` for ``status``.
    """
    from sweep_engine import runner
    from sweep_engine.heartbeat import Heartbeat, Tracker

    watch = RayHeadWatch(getattr(args, "where", None))  # a lost Ray head: exit 5, one line
    if plan.space.search is not None:
        from sweep_engine.search import run_searches

        before = recorded(plan, sweep_dir)
        tracker = Tracker(
            max(plan.n_trainings - before, 0), recorded_before=before, sweep_dir=sweep_dir
        )
        with Heartbeat(tracker, stopping=runner.INTERRUPT), watch:
            start_run(plan, args, sweep_dir, tracker)
            return run_searches(plan, sweep_dir, args.data_dir, tracker)
    done = RecordSink(sweep_dir).done()
    todo = [t for t in plan.trainings if t.trial_id not in done]
    skipped = len(plan.trainings) - len(todo)
    planned = plural(len(plan.trainings), "training")
    say(f"{planned} planned, {skipped} already recorded, {len(todo)} to run")
    if not todo:
        return 0, 0, skipped
    from sweep_engine.grid import run_grid

    estimate_s = getattr(args, "estimate_s", None)  # the plan's, printed above
    tracker = Tracker(
        len(todo), recorded_before=skipped, sweep_dir=sweep_dir, estimate_s=estimate_s
    )
    with Heartbeat(tracker, stopping=runner.INTERRUPT), watch:
        start_run(plan, args, sweep_dir, tracker)
        if runner.INTERRUPT.is_set():  # Ctrl-C while Ray started: no trial starts
            return 0, 0, skipped
        written, failed = run_grid(plan, sweep_dir, todo, args.data_dir, tracker, sink)
    return written, failed, skipped


def start_run(plan: Plan, args: argparse.Namespace, sweep_dir: Path, tracker: Tracker) -> None:
    """Start (or join) Ray and check the plan fits it; then the manifest, so that
    ``vflsweep status`` knows the planned trainings while the first run goes on."""
    from sweep_engine import runner

    runner.start_ray(args.address, args.num_cpus)
    runner.check_fits(plan)  # a cluster too small: ConfigError, exit 2, no manifest
    write_manifest(sweep_dir, plan)
    args.manifest_written = True  # ``execute`` writes it only where this did not run
    tracker.set_phase("running")


def execute(plan: Plan, args: argparse.Namespace) -> int:
    from sweep_engine import runner

    sweep_dir = Path(args.results) / plan.space.name
    sink = RecordSink(sweep_dir)
    sink.clean_temporaries()
    sink.quarantine_bad_files()  # corrupt files are moved aside; their trainings run again
    start = time.perf_counter()
    written = failed = skipped = 0
    try:
        with sigint_stops_tune():
            written, failed, skipped = run_plan(plan, args, sweep_dir, sink)
    except KeyboardInterrupt:  # the second Ctrl-C, or one before the handler was in place
        runner.INTERRUPT.set()
    # the space and its axes, for the analysis; after the run started (bad input: none),
    # where ``start_run`` did not write it (nothing left to run): the same plan, and
    # building it is O(trainings) (0.37 s per 1,000)
    if not getattr(args, "manifest_written", False):
        write_manifest(sweep_dir, plan)
    if runner.INTERRUPT.is_set():
        leave_ray_ignoring_sigint()
        n = recorded(plan, sweep_dir)
        print(f"interrupted: {n} of {plan.n_trainings} recorded; re-run to resume", flush=True)
        return EXIT_INTERRUPTED
    wall = time.perf_counter() - start
    verified = read_once(sink)
    table = None if verified is None else verified.table
    learn_costs(sweep_dir, table)
    if not args.no_mlflow:
        from analysis.tracking import sync_after_sweep

        sync_after_sweep(sweep_dir, args.mlflow_uri, Path(args.results), verified)
    print(
        f"done: {plural(written, 'training')} recorded, {failed} failed, {skipped} skipped "
        f"(already recorded); wall {wall:.1f}s; records in {sink.records_dir}",
        flush=True,
    )
    print_end_summary(plan, args, sweep_dir, table)
    return 1 if failed else 0


def read_once(sink: RecordSink) -> Verified | None:
    """Every record of the finished sweep, verified, for the cost cache, the MLflow sync
    and the summary: one read where each read all files again (three reads were ~5 s
    after 500 tiny trainings, one file each; what this run wrote comes from the sink's
    memory, ``RecordSink.verified``). A damaged file is named once, here. None
    when the folder cannot be read: each then reads, and says why, on its own."""
    try:
        return sink.verified(stacklevel=3)
    except OSError:
        return None


def learn_costs(sweep_dir: Path, table: pa.Table | None = None) -> None:
    """What this sweep's trainings and attacks took here, for the next plan's estimate
    (``sweep_engine/costs.py``); a cache that cannot be written costs only that."""
    from sweep_engine.costs import learn

    try:
        learn(sweep_dir, table=table)
    except Exception as err:  # an estimate aid must never fail a finished sweep
        print(f"note: the cost cache was not updated ({type(err).__name__}: {err})")


def print_end_summary(
    plan: Plan, args: argparse.Namespace, sweep_dir: Path, table: pa.Table | None = None
) -> None:
    """Best cells from the records, then the commands that open the report and MLflow."""
    from analysis.tracking import default_uri
    from sweep_engine.progress import end_summary

    uri = None if args.no_mlflow else (args.mlflow_uri or default_uri(Path(args.results)))
    for line in end_summary(plan, sweep_dir, uri, bool(args.mlflow_uri), table):
        print(f"  {line}", flush=True)


def main(argv: list[str] | None = None, prog: str = "python sweep.py") -> int:
    args = build_parser(prog).parse_args(argv)
    quiet.configure(args.verbose)  # before Ray is imported and started
    args.where = where = Where(Path(args.results))  # how far it got, for a fault's line
    try:
        space = load_space(args.space)
        if args.dry_run:  # plans without the data files (a fresh clone); a real run needs them
            plan = expand(space, args.data_dir, missing_ok=True)
            try:  # a plan that this machine's Ray would refuse says so before anyone waits
                check_writable(where.results, space.name)
                check_fits_before_ray(plan, args)
                versioned(plan, where.results, args.new_version, tell=lambda _: None)
            except (ConfigError, SweepFault) as err:
                print(f"warning: a real run here would stop: {err}", file=sys.stderr)
            print_plan(plan, args.json, args)
            return 0
        if args.estimate:
            raise ConfigError("--estimate goes with --dry-run (it measures, then runs nothing)")
        check_writable(where.results, space.name)  # a file, read-only: exit 4, before Ray
        with SweepLock(where.results / space.name) as first:  # exit 2 if held, before planning
            plan = expand(space, args.data_dir)
            # one experiment per folder: an edited space is refused (exit 2) or versioned
            plan = versioned(plan, where.results, args.new_version)
            check_fits_before_ray(plan, args)
            args.estimate_s = print_plan(plan, False, args)
            sweep_dir = where.results / plan.space.name
            moved = sweep_dir != first.sweep_dir  # --new-version: NAME.v2 has its own lock
            with SweepLock(sweep_dir) if moved else nullcontext(first) as lock:
                stale_holder = lock.stale or first.stale
                if stale_holder:
                    stale = describe(stale_holder)
                    print(f"took over the stale lock of a dead driver: {stale}")
                where.plan, where.sweep_dir, where.lock = plan, sweep_dir, lock
                where.recorded = lambda: recorded(plan, sweep_dir)
                return execute(plan, args)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C while planning or waiting for the lock
        print("interrupted: nothing recorded yet; re-run to start", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:  # a full disk, a lost Ray head: one line (a bug: its traceback)
        return end(err, where)


def check_fits_before_ray(plan: Plan, args: argparse.Namespace) -> None:
    """Refuse resources no trial could get, before Ray starts (exit 2, nothing written).

    A Ray this process already runs is asked; a local Ray still to start is known from
    this machine; a cluster (``--address`` or ``RAY_ADDRESS``) is checked once joined.
    """
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        from sweep_engine.runner import check_fits

        check_fits(plan)
    elif args.address is None and not os.environ.get("RAY_ADDRESS"):
        shapes = [actor_count(t.spec) for t in plan.trainings]
        check_local_fit(plan.space, shapes, args.num_cpus)


if __name__ == "__main__":
    exit_process(main())
