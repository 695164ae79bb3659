"""Run a plan on Ray Tune: one Tune trial per training, records written once by the driver.

The trainable runs one VFL trial (its parties as actors inside the trial's placement
group) and reports the records; a driver-side callback writes them atomically, so
results land on the driver's disk whichever node trained. Grid cells go through Tune's
grid; a ``search:`` block runs one Optuna study per cell (``search.py``).
"""

from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray
from ray import tune

from sweep_engine.plan import Plan, Training
from sweep_engine.sink import RecordSink
from sweep_engine.space import SpaceError, apply_value
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.trial import run_trial


@dataclass(frozen=True)
class SweepContext:
    """What every trainable of a sweep needs besides its config (sent once per trial)."""

    sweep: str
    transport: str
    cpu_per_party: float
    gpu_per_party: float
    reuse_actors: bool
    data_dir: str | None
    cell: dict[str, Any] = field(default_factory=dict)  # a search cell's fixed fields
    attacks: tuple[tuple[str, dict[str, Any]], ...] = ()  # a search cell's shared attacks


def _grid_config(training: Training) -> dict[str, str]:
    return {
        "spec": training.spec.model_dump_json(),
        "attacks": json.dumps(list(training.attacks)),
        "trial_id": training.trial_id,
    }


def spec_of(config: dict[str, Any], ctx: SweepContext) -> TrialSpec:
    """The trial's spec: given whole for grid trials, cell + sampled values for searches."""
    config = config.get("cell", config)
    if "spec" in config:
        return TrialSpec.model_validate_json(config["spec"])
    fields = dict(ctx.cell)
    for key, value in config.items():
        fields = apply_value(fields, key, value)
    return TrialSpec.build(**fields)


def train_one(config: dict[str, Any], ctx: SweepContext) -> None:
    """The Tune trainable: one training, its records reported (the driver writes them)."""
    spec = spec_of(config, ctx)
    cell = config.get("cell", {})
    attacks = [tuple(a) for a in json.loads(cell["attacks"])] if cell else list(ctx.attacks)
    trial_id = cell.get("trial_id", spec.config_hash)
    records = run_trial(
        spec,
        transport=ctx.transport,
        data_dir=ctx.data_dir,
        cpu_per_party=ctx.cpu_per_party,
        gpu_per_party=ctx.gpu_per_party,
        sweep=ctx.sweep,
        trial_id=trial_id,
        reuse_actors=ctx.reuse_actors,
        attacks=attacks,  # type: ignore[arg-type]
    )
    clean = records[0]
    tune.report(
        {
            "config_hash": trial_id,
            "mp": clean.mp,
            "rounds": clean.rounds,
            "comm_bytes": clean.comm_bytes,
            "train_seconds": clean.train_seconds,
            "records_json": json.dumps([r.to_json() for r in records]),
            **{f"ap:{r.attack}": r.ap for r in records if r.attack != "none"},
        }
    )


class Progress(tune.Callback):
    """Writes each finished training's records and prints one line per training."""

    def __init__(self, sink: RecordSink, total: int, label: str = "") -> None:
        self.sink, self.total, self.label = sink, total, label
        self.written: set[str] = set()
        self.failed: dict[str, str] = {}
        self.start = time.perf_counter()

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **_: Any
    ) -> None:
        if "records_json" not in result:
            return
        records = [Record.from_json(r) for r in json.loads(result["records_json"])]
        trial_id = result["config_hash"]
        self.sink.write(trial_id, records)
        self.written.add(trial_id)
        done = len(self.written) + len(self.failed)
        print(
            f"[{done}/{self.total}] {self.label}{trial_id} mp={result['mp']:.4f} "
            f"rounds={result['rounds']} {result['train_seconds']:.1f}s "
            f"({time.perf_counter() - self.start:.0f}s elapsed) {_short(trial.config)}",
            flush=True,
        )

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **_: Any) -> None:
        """A failed attempt that Tune retries (``run.max_failures``): say so, record nothing."""
        print(f"[retry] {self.label}{_short(trial.config)} failed; retrying", flush=True)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **_: Any) -> None:
        print(f"[error] {self.label}{_short(trial.config)} failed after retries", flush=True)


def trial_dirname(trial: Any) -> str:
    return f"trial_{trial.trial_id}"


def _short(config: dict[str, Any]) -> str:
    config = config.get("cell", config)
    if "spec" not in config:
        return json.dumps(config, default=str)
    spec = json.loads(config["spec"])
    keys = ("dataset", "partition", "protocol", "protocol_params", "n_parties", "seed")
    return " ".join(f"{k}={spec[k]}" for k in keys if k in spec)


def start_ray(address: str | None, num_cpus: int | None) -> None:
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if address is None:
        kwargs["num_cpus"] = num_cpus
    ray.init(address=address, **kwargs)


def check_fits(plan: Plan) -> None:
    """Refuse a trial that no amount of waiting could schedule on this Ray."""
    available = ray.cluster_resources()
    for n in sorted({t.spec.n_parties for t in plan.trainings}):
        need: dict[str, float] = {}
        for bundle in plan.bundles(n):
            for key, value in bundle.items():
                need[key] = need.get(key, 0.0) + value
        for key in ("CPU", "GPU"):
            if need.get(key, 0.0) > available.get(key, 0.0) + 1e-9:
                raise SpaceError(
                    f"{plan.space.source}: resources: a {n}-party trial needs {need[key]:g} {key}"
                    f" but this Ray has {available.get(key, 0.0):g}; lower resources.cpu_per_party"
                    " / gpu_per_party or join a bigger cluster with --address"
                )


def context(
    plan: Plan,
    data_dir: str | None,
    cell: dict[str, Any] | None = None,
    attacks: tuple[tuple[str, dict[str, Any]], ...] = (),
) -> SweepContext:
    res, run = plan.space.resources, plan.space.run
    return SweepContext(
        sweep=plan.space.name,
        transport=run.transport,
        cpu_per_party=res.cpu_per_party,
        gpu_per_party=res.gpu_per_party,
        reuse_actors=run.reuse_actors,
        data_dir=data_dir,
        cell=cell or {},
        attacks=attacks,
    )


def trainable(plan: Plan, ctx: SweepContext, n_parties: int | None = None) -> Any:
    def bundles(config: dict[str, Any]) -> tune.PlacementGroupFactory:
        k = n_parties if n_parties is not None else json.loads(config["cell"]["spec"])["n_parties"]
        return tune.PlacementGroupFactory(plan.bundles(k))

    return tune.with_resources(tune.with_parameters(train_one, ctx=ctx), bundles)


def run_config(plan: Plan, sweep_dir: Path, callback: Progress, tag: str) -> tune.RunConfig:
    return tune.RunConfig(
        name=f"{time.strftime('%Y%m%d-%H%M%S')}-{tag}",
        storage_path=str((sweep_dir / "_tune").resolve()),
        failure_config=tune.FailureConfig(max_failures=plan.space.run.max_failures),
        callbacks=[callback],
        verbose=0,
    )


def record_failures(
    sink: RecordSink, failures: list[tuple[str, TrialSpec, str]], sweep: str
) -> int:
    """Write a ``status='error'`` record for each training that kept failing."""
    done = sink.done()
    count = 0
    for trial_id, spec, error in failures:
        if trial_id in done:
            continue
        record = Record.clean(
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
        sink.write(trial_id, [record])
        count += 1
    return count


def run_grid(
    plan: Plan, sweep_dir: Path, todo: list[Training], data_dir: str | None
) -> tuple[int, int]:
    """Run the grid trainings in ``todo``; returns (written, failed)."""
    sink = RecordSink(sweep_dir)
    callback = Progress(sink, len(todo))
    tuner = tune.Tuner(
        trainable(plan, context(plan, data_dir)),
        param_space={"cell": tune.grid_search([_grid_config(t) for t in todo])},
        tune_config=tune.TuneConfig(
            max_concurrent_trials=plan.space.run.max_concurrent_trials,
            reuse_actors=plan.space.run.reuse_actors,
            trial_dirname_creator=trial_dirname,
        ),
        run_config=run_config(plan, sweep_dir, callback, "grid"),
    )
    results = tuner.fit()
    failures = [
        (
            r.config["cell"]["trial_id"],
            spec_of(r.config, context(plan, data_dir)),
            error_text(r.error),
        )
        for r in results
        if r.error is not None
    ]
    return len(callback.written), record_failures(sink, failures, plan.space.name)


def error_text(error: BaseException | None) -> str:
    if error is None:
        return ""
    return "".join(traceback.format_exception_only(type(error), error)).strip()
