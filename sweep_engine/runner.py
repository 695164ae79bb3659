"""Run a plan on Ray Tune: one Tune trial per pack of trainings (``packs.py``; a search:
one per training), records written once by the driver.

The trainable runs its trainings (their parties as actors inside the trial's placement
group), posts each batch of finished trainings' records to the run's inbox (``inbox.py``)
and reports its key; a driver-side callback takes the batch and writes it atomically, so
results land on the driver's disk whichever node trained. Grid cells go through Tune's
grid; a ``search:`` block runs one Optuna study per cell (``search.py``).

Two kinds of failure: a ConfigError inside the trainable (a spec the data or model cannot
run) or a ``DefenseNeverApplied`` (a defense that changed nothing) is deterministic, so
it is recorded as ``status='error'`` at once and never retried; anything else (an actor
or node lost) is a fault, retried up to ``run.max_failures``.
``INTERRUPT`` (set by the CLI on Ctrl-C) stops every trial through ``InterruptStopper``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import traceback
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Records go to the sink; Tune's default JSON / CSV / TensorBoard loggers would write every
# reported batch of records again into each trial folder, in the driver.
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
# Keeping one checkpoint per pack (``run_config``) makes Tune snapshot its experiment state
# at every checkpoint, by design (a retry needs the newest checkpoint only); its warning
# that snapshots come often would repeat all run long.
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")

import ray
from ray import tune

if os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] == "1":
    # without the result files, Tune's end-of-run ResultGrid warns, per trial, that it
    # found no result.json: nothing reads them (records are the sink's)
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)

from sweep_engine import memtrace, progress, quiet, tune_state, tune_usage
from sweep_engine.context import SweepContext
from sweep_engine.heartbeat import Tracker, say
from sweep_engine.inbox import Inbox
from sweep_engine.plan import Plan
from sweep_engine.sink import RecordSink
from sweep_engine.space import apply_value
from sweep_engine.words import plural
from trainables.defenses.applied import DefenseNeverApplied
from trainables.errors import ConfigError, MissingDataError
from trainables.records import Record
from trainables.schedule import Schedule
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.trial import actor_count, run_trial
from trainables.vfl.halving import Halving

quiet.configure(quiet.VERBOSE)  # what Ray, Tune and MLflow print: quiet.py (--verbose: all)
tune_state.install()  # Tune's state snapshots wait for their upload: tune_state.py
tune_usage.install()  # no mlflow import to count callbacks for usage stats that are off

# Single record files at which the driver folds them into part files (``RecordSink.
# maybe_compact``): small sweeps keep one readable file per training.
COMPACT_AT = 1000

# Set by the CLI's SIGINT handler: Tune stops every trial at its next step (about 0.1 s);
# trainings in flight are dropped, records already written stay.
INTERRUPT = threading.Event()


class InterruptStopper(tune.Stopper):
    """Stops the whole experiment once ``INTERRUPT`` is set, never a single trial."""

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return INTERRUPT.is_set()


def spec_of(config: dict[str, Any], ctx: SweepContext) -> TrialSpec:
    """A search trial's spec: the cell's fixed fields + the values Optuna sampled."""
    fields = dict(ctx.cell)
    for key, value in config.items():
        fields = apply_value(fields, key, value)
    return TrialSpec.build(**fields)


def train_one(config: dict[str, Any], ctx: SweepContext) -> None:
    """The Tune trainable of a search: one training, its records reported (the driver
    writes them); grids run packs (``pack_trial.train_pack``).

    A ConfigError is reported as an error record instead of raised: Tune would retry it,
    and a bad spec fails the same way every time.
    """
    spec = spec_of(config, ctx)
    attacks = list(ctx.attacks)
    trial_id = spec.config_hash

    def run(schedule: Schedule) -> list[Record]:
        return run_trial(
            spec,
            ctx.placement,
            data_dir=ctx.data_dir,
            sweep=ctx.sweep,
            trial_id=trial_id,
            attacks=attacks,
            schedule=schedule,
        )

    try:
        if ctx.early_stop:  # each epoch end to Tune as it happens (early_stop.py)
            from sweep_engine.early_stop import train_reporting

            also = epoch_fields([name for name, _ in attacks])
            records = train_reporting(run, ctx, spec, also)
        else:
            records = run(ctx.schedule)
    except MissingDataError:
        raise  # this node lacks a data file: a fault of the node, retried (maybe elsewhere)
    except (ConfigError, DefenseNeverApplied) as err:  # deterministic: same spec, same error
        records = [error_record(spec, trial_id, ctx.sweep, error_text(err))]
    result = _result(trial_id, records, [name for name, _ in attacks])
    tune.report(result | {"records_key": ctx.inbox.post([(trial_id, records)])})


# the metrics a search may select on (with each attack's ``ap:<name>``), NaN in every
# epoch-end result: Tune wants the searcher's metrics in every result
_ALSO = ("mp", "comm_bytes", "train_seconds")


def epoch_fields(attacks: list[str]) -> dict[str, float]:
    """What an epoch-end result carries besides its own fields (``early_stop``): every
    metric a search may select on, NaN (Tune refuses a result without its searcher's)."""
    return _result("", [], attacks)


def _result(trial_id: str, records: list[Record], attacks: list[str]) -> dict[str, Any]:
    """What Tune sees of a training (``final``: its last result; epoch ends report before
    it, ``early_stop.py``). An error record reports NaN metrics, so a search's Optuna
    study marks the trial failed instead of taking 0 bytes or 0 s as a result; without
    records, NaN everywhere (the shape of an epoch-end result's other metrics)."""
    nan = float("nan")
    if not records:
        return {k: nan for k in _ALSO} | {f"ap:{name}": nan for name in attacks}
    clean = records[0]
    ok = clean.status == "ok"
    spec = TrialSpec.model_validate_json(clean.spec_json)
    return {
        "config_hash": trial_id,
        "final": True,
        "epoch": spec.epochs,
        "status": clean.status,
        "mp": nan if clean.mp is None else clean.mp,
        "val_mp": nan if clean.val_mp is None or not ok else clean.val_mp,
        "rounds": clean.rounds if ok else nan,
        "comm_bytes": clean.comm_bytes if ok else nan,
        "train_seconds": clean.train_seconds if ok else nan,
        **{f"ap:{name}": nan for name in attacks},
        **{f"ap:{r.label}": r.ap for r in records if r.attack != "none"},
    }


class Progress(tune.Callback):
    """Writes each finished training's records and prints one line per training.

    The line names the training in the sweep's terms: the grid axes that vary (``labels``:
    trial_id -> ``defense=gdp@0.01 seed=2``, from ``progress.cell_labels``) or a search
    trial's sampled parameters, then its MP, the attacks evaluated with their AP, seconds
    of training and of attacks. It also tells ``tracker`` what runs and what finished (the
    heartbeat line and ``progress.json``); ``packs``: pack_id -> its trainings' ids.
    """

    def __init__(
        self,
        sink: RecordSink,
        inbox: Inbox,
        total: int,
        label: str = "",
        labels: dict[str, str] | None = None,
        tracker: Tracker | None = None,
        packs: dict[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.sink, self.total, self.label = sink, total, label
        self.inbox = inbox
        self.labels = labels or {}
        self.tracker = tracker or Tracker(total)
        self.tracker.labels.update(self.labels)
        self.packs = packs or {}
        self.written: set[str] = set()
        self.failed: dict[str, str] = {}
        self.repeats = 0  # trainings a retried pack reported again (written once)
        self.start = time.perf_counter()
        self.trace = memtrace.from_env()  # VFLSWEEP_TRACEMALLOC: memory by trainings done
        self.stopped_by = ""  # the scheduler or pruner that may stop trainings (early_stop)
        self.stopped: set[str] = set()

    @property
    def seen(self) -> set[str]:
        """Trainings this run has written (finished, stopped or with their error record)."""
        return self.written | set(self.failed) | self.stopped

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **_: Any
    ) -> None:
        key = result.get("records_key")
        if key is None:  # an epoch end, or a checkpoint's own report
            return
        items = self.inbox.take(key)
        if "cell" in trial.config:  # a pack: several trainings at once
            self.finished(items, [self.labels.get(t, t[:8]) for t, _ in items])
        else:  # a search trial: one training
            self.finished(items, [self.describe(trial.config)] * len(items))

    def take_rest(self) -> None:
        """Write what trials posted but never reported (they died after posting): when Tune
        has ended, so nothing is posted meanwhile."""
        items = self.inbox.rest()
        self.finished(items, [self.labels.get(t, t[:8]) for t, _ in items])

    def finished(self, items: list[tuple[str, list[Record]]], names: list[str]) -> None:
        """Write trainings' records in one batch and print a line for each; once only: a
        retried pack may report a training again. Compacts when single files pile up."""
        seen = self.seen  # one set per batch: the property builds a new one each call
        fresh = []
        for item, name in zip(items, names, strict=True):
            if item[0] not in seen:  # nor twice in one batch: what a trial posted twice
                seen.add(item[0])  # (``take_rest``) is the same training's records
                fresh.append((item, name))
        self.repeats += len(items) - len(fresh)
        if not fresh:
            return
        self.sink.write_many([item for item, _ in fresh])
        for (trial_id, records), name in fresh:
            self.tracker.training_finished(trial_id, records[0].status in ("ok", "stopped"))
            self.line(trial_id, records, name)
        self.sink.maybe_compact(COMPACT_AT)
        if self.trace is not None:
            self.trace.tick(len(self.written) + len(self.failed))

    def line(self, trial_id: str, records: list[Record], name: str) -> None:
        clean = records[0]
        if clean.status == "stopped":  # early stopping: a record, not a failure
            self.stopped.add(trial_id)
            extra = json.loads(clean.extra)
            say(
                f"[stopped] {self.label}{name} after {plural(extra['epochs_run'], 'epoch')} "
                f"at val_mp={clean.val_mp:.4f} by {extra['stopped_by']} (id {trial_id[:8]})"
            )
            return
        if clean.status != "ok":  # a ConfigError: recorded at once, not retried
            self.failed[trial_id] = clean.error or ""
            say(
                f"[error] {self.label}{name} ({trial_id}): {clean.error} "
                "(a bad spec fails the same way every time: recorded, not retried)"
            )
            return
        self.written.add(trial_id)
        done = len(self.written) + len(self.failed)
        words = [
            f"[{done}/{self.total}]",
            f"{self.label}{name}".strip(),
            "mp=nan" if clean.mp is None else f"mp={clean.mp:.4f}",
            progress.ap_text(records),
            progress.seconds_text(records),
            f"({time.perf_counter() - self.start:.0f}s elapsed; id {trial_id[:8]})",
        ]
        say(" ".join(w for w in words if w))

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **_: Any) -> None:
        cell = trial.config.get("cell")
        if cell is None:  # a search trial: one training
            what = f"{self.label}{self.describe(trial.config)}"
            self.tracker.trial_started(trial.trial_id, "trial", what, ())
            return
        pack = self.packs.get(cell["pack_id"], ())
        self.tracker.trial_started(trial.trial_id, "pack", f"pack {cell['pack_id']}", pack)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **_: Any) -> None:
        """A trial Tune stopped at an epoch end (a scheduler, a pruner) gets its record
        here, ``status: stopped``, from its last report: it never reported records."""
        last = trial.last_result or {}
        if last.get("final") is False and self.stopped_by:
            from sweep_engine.early_stop import stopped_record

            record = stopped_record(last, self.stopped_by)
            self.finished([(record.trial_id, [record])], [self.describe(trial.config)])
        self.tracker.trial_ended(trial.trial_id)

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **_: Any) -> None:
        """A failed attempt that Tune retries (``run.max_failures``): say so, record nothing."""
        done = (trial.last_result or {}).get("n_reported")
        where = "" if done is None else f" after {plural(done, 'training')}; retrying from the next"
        text = f"[retry] {self.label}{self.describe(trial.config)} failed"
        say(text + (where or "; retrying"))

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **_: Any) -> None:
        self.tracker.trial_ended(trial.trial_id)
        say(f"[error] {self.label}{self.describe(trial.config)} failed after retries")

    def describe(self, config: dict[str, Any]) -> str:
        """A grid training's varying axes, or a search trial's sampled parameters."""
        cell = config.get("cell")
        if cell is None:
            return progress.params_text(config)
        return f"pack {cell['pack_id']}"  # a grid trial


def trial_dirname(trial: Any) -> str:
    return f"trial_{trial.trial_id}"


# start_ray calls this process made: a refused space must make none (tests check it)
START_CALLS = 0


def start_ray(address: str | None, num_cpus: int | None) -> None:
    global START_CALLS
    START_CALLS += 1
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": quiet.log_to_driver(),
        "logging_level": quiet.ray_logging_level(),
    }
    if address is None and not os.environ.get("RAY_ADDRESS"):
        # "local": a fresh Ray of our own. None would join any cluster a `ray start` left
        # running on this machine (and then refuse num_cpus).
        address = "local"
        kwargs["num_cpus"] = num_cpus
        # No idle workers prestarted at init (one per CPU): Tune gives trainables, and so
        # their party actors, a runtime_env of their own, so a sweep never uses them; each
        # costs ~0.5 CPU-s while the first trials start, and 80 MB for the whole run.
        kwargs["_system_config"] = {"prestart_worker_first_driver": False}
    ray.init(address=address, **kwargs)


def check_fits(plan: Plan) -> None:
    """Refuse a trial that no amount of waiting could schedule on this Ray."""
    from sweep_engine.validate import check_resource_fit

    available = ray.cluster_resources()
    shapes = [actor_count(t.spec) for t in plan.trainings]
    cpus, gpus = available.get("CPU", 0.0), available.get("GPU", 0.0)
    check_resource_fit(plan.space, shapes, cpus, gpus, "this Ray")


def context(
    plan: Plan,
    data_dir: str | None,
    cell: dict[str, Any] | None = None,
    attacks: tuple[tuple[str, dict[str, Any]], ...] = (),
) -> SweepContext:
    res, run = plan.space.resources, plan.space.run
    return SweepContext(
        sweep=plan.space.name,
        placement=Placement(
            run.transport, res.cpu_per_party, res.gpu_per_party, reuse_actors=run.reuse_actors
        ),
        schedule=Schedule(
            vectorize=run.vectorize,
            halving=None
            if run.halving is None
            else Halving(run.halving.grace_epochs, run.halving.reduction_factor),
        ),
        data_dir=data_dir,
        cell=cell or {},
        attacks=attacks,
        early_stop=run.scheduler is not None
        or (plan.space.search is not None and plan.space.search.pruner != "none"),
    )


def plain_trial_actors() -> None:
    """Tune's trial actors, and so the party actors they start, without a runtime_env.

    Tune gives every trainable ``runtime_env={"env_vars": {"PL_DISABLE_FORK": "1"}}``
    (``ray/tune/execution/class_cache.py``), for PyTorch Lightning, which nothing here uses.
    A non-empty runtime_env starts such an actor, and each actor it starts, through Ray's
    ``setup_worker.py`` and runtime-env agent: 1.3-1.5 CPU-s an actor against 0.7-0.8
    without (2 cores, 8 actors each way, 2026-12-07), about 0.6 s more of a trial's
    start-up per actor. Variables Tune passes on from the driver's environment (AWS keys,
    Ray Train's) still go. A Ray without this table is left as it is."""
    try:
        from ray.tune.execution import class_cache
    except ImportError:
        return
    class_cache.DEFAULT_ENV_VARS.pop("PL_DISABLE_FORK", None)


def run_config(plan: Plan, sweep_dir: Path, callback: Progress, tag: str) -> tune.RunConfig:
    plain_trial_actors()
    return tune.RunConfig(
        name=f"{time.strftime('%Y%m%d-%H%M%S')}-{tag}",
        storage_path=str((sweep_dir / "_tune").resolve()),
        failure_config=tune.FailureConfig(max_failures=plan.space.run.max_failures),
        # a retried pack needs only its newest checkpoint (it lists every training reported
        # so far); Tune would keep every one, each with the metrics of its report.
        checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
        callbacks=[callback],
        stop=InterruptStopper(),
        verbose=quiet.tune_verbosity(),  # 0 prints nothing with quiet.py's legacy output
    )


def error_record(spec: TrialSpec, trial_id: str, sweep: str, error: str) -> Record:
    """The one record of a training that failed: ``status='error'`` and the error text."""
    return Record.clean(
        spec,
        spec.n_labeled or 0,
        mp=None,
        rounds=0,
        comm_bytes=0,
        train_seconds=0.0,
        sweep=sweep,
        trial_id=trial_id,
        status="error",
        error=error[-4000:],
    )


def record_failures(
    sink: RecordSink, failures: list[tuple[str, TrialSpec, str]], sweep: str
) -> int:
    """Write a ``status='error'`` record for each training that kept failing."""
    if not failures:  # most sweeps: no need to read every record file back
        return 0
    done = sink.done()
    count = 0
    for trial_id, spec, error in failures:
        if trial_id in done:
            continue
        sink.write(trial_id, [error_record(spec, trial_id, sweep, error)])
        count += 1
    return count


def error_text(error: BaseException | None) -> str:
    if error is None:
        return ""
    return "".join(traceback.format_exception_only(type(error), error)).strip()
