"""Search beyond grids: one Optuna study per grid cell, run through Ray Tune's OptunaSearch.

Why OptunaSearch rather than Optuna's own study with shared storage: trials then get the
same placement groups, retries, progress and record sink as grid trials, and Tune
schedules them next to each other. Tune's grid and a searcher do not mix, so each grid
cell gets its own Tuner and study. The study's trials, best trial (one objective) or
Pareto set (several) are written to ``<sweep>/search/<cell>.json`` (``studies.py``) from
the records on disk, so a resumed search counts what earlier runs finished and runs only
the rest. The file also holds each searched parameter's Optuna distribution
(``distribution_to_json``): ``analysis/optuna_report.py`` rebuilds the study from it with
Optuna's own ``create_trial`` for importances and plots, so no second store can disagree
with the records (an Optuna RDB would keep trials that were interrupted or never
recorded).
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, cast

import optuna
from ray import tune

from sweep_engine import early_stop, progress, quiet, runner
from sweep_engine.context import SweepContext
from sweep_engine.entry import start_one
from sweep_engine.heartbeat import Tracker, say
from sweep_engine.parts import write_json_atomic
from sweep_engine.plan import Plan, Training
from sweep_engine.sink import RecordSink
from sweep_engine.space import SearchBlock, SearchParam
from sweep_engine.studies import cell_id, study_path
from sweep_engine.words import plural
from trainables.spec import TrialSpec
from trainables.trial import actor_count, prestart_count

quiet.configure(quiet.VERBOSE)  # Optuna set its logger's level as it was imported


def trainable(plan: Plan, ctx: SweepContext, n_parties: int) -> Any:
    """A search's trainable: one training per Tune trial of ``n_parties`` party bundles
    (``entry.start_one``: its party actors started first, then ``runner.train_one``)."""
    factory = tune.PlacementGroupFactory(plan.bundles(n_parties))
    return tune.with_resources(tune.with_parameters(start_one, ctx=ctx), factory)


def distribution(param: SearchParam) -> optuna.distributions.BaseDistribution:
    if param.choices is not None:
        return optuna.distributions.CategoricalDistribution(param.choices)
    assert param.low is not None and param.high is not None
    if param.integer:
        step = int(param.step or 1)
        return optuna.distributions.IntDistribution(
            int(param.low), int(param.high), log=param.log, step=step
        )
    return optuna.distributions.FloatDistribution(
        param.low, param.high, log=param.log, step=param.step
    )


class PicklableNSGAII(optuna.samplers.NSGAIISampler):
    """NSGA-II that Tune can pickle. Optuna 5.1's genetic samplers hold a
    ``threading.Lock`` (their generation cache), and ``tune.Tuner`` pickles its search
    algorithm into ``tuner.pkl``: every ``sampler: nsga2`` study failed before its first
    trial (defense_pareto.yaml, 2026-12-04). The lock is left out and made anew."""

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_thread_lock"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._thread_lock = threading.Lock()  # unused by an Optuna without one


for _key in ("_GENERATION_KEY", "_PARENT_CACHE_KEY_PREFIX"):  # Optuna's own study keys
    if hasattr(optuna.samplers.NSGAIISampler, _key):  # named by class since Optuna 4.x
        setattr(PicklableNSGAII, _key, getattr(optuna.samplers.NSGAIISampler, _key))


def sampler(search: SearchBlock, offset: int) -> optuna.samplers.BaseSampler:
    seed = search.seed + offset  # a resumed study samples new points, not the same ones again
    if search.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if search.sampler == "nsga2":
        return PicklableNSGAII(seed=seed)
    return optuna.samplers.TPESampler(seed=seed)


def _value(spec: dict[str, Any], key: str) -> Any:
    head, _, tail = key.partition(".")
    return spec.get(head, {}).get(tail) if tail else spec.get(head)


def study_trials(sink: RecordSink, cell: Training, search: SearchBlock) -> list[dict[str, Any]]:
    """Finished trials of ``cell``'s study, from the records on disk."""
    searched = list(search.params)
    target = cell_id(cell.spec.model_dump(mode="json"), searched)
    table = sink.read().to_pylist()
    rows_by_trial: dict[str, list[dict[str, Any]]] = {}
    for row in table:
        rows_by_trial.setdefault(row["trial_id"], []).append(row)
    trials = []
    for row in sorted(table, key=lambda r: r["created_at"]):  # trial order: when it finished
        spec = json.loads(row["spec_json"])
        done = row["status"] in ("ok", "stopped")  # stopped early: a trial, never the best
        if not done or row["attack"] != "none" or cell_id(spec, searched) != target:
            continue
        trial = {"trial_id": row["trial_id"], "params": {k: _value(spec, k) for k in searched}}
        if row["status"] == "stopped":
            extra = json.loads(row["extra"] or "{}")
            trial.update(stopped=True, epochs_run=extra.get("epochs_run"), val_mp=row["val_mp"])
        else:
            trial["values"] = [_metric(row, rows_by_trial, o.metric) for o in search.objectives]
            trial["test_mp"] = row["mp"]  # reported beside, never selected on
        trials.append(trial)
    return trials


def _metric(
    row: dict[str, Any], rows_by_trial: dict[str, list[dict[str, Any]]], metric: str
) -> Any:
    """A record metric of the clean row (``mp``: its validation MP, ``selected``), or
    ``ap:<attack>`` from the trial's attack row."""
    if metric.startswith("ap:"):
        attack = metric[3:]
        return next(r["ap"] for r in rows_by_trial[row["trial_id"]] if r["attack"] == attack)
    return row.get(selected(metric))


def selected(metric: str) -> str:
    """What a search optimizes for an objective: MP is chosen on the validation rows
    (``val_mp``), so the test MP a study reports was never the one it maximized."""
    return "val_mp" if metric == "mp" else metric


def pareto(trials: list[dict[str, Any]], modes: Sequence[str]) -> list[dict[str, Any]]:
    """Trials no other trial beats on every objective (and strictly on one)."""
    sign = [1.0 if m == "max" else -1.0 for m in modes]

    def key(t: dict[str, Any]) -> list[float]:
        return [s * float(v) for s, v in zip(sign, t["values"], strict=True)]

    front = []
    for t in trials:
        kt = key(t)
        dominated = any(
            all(a >= b for a, b in zip(key(o), kt, strict=True)) and key(o) != kt for o in trials
        )
        if not dominated:
            front.append(t)
    return front


def write_summary(sweep_dir: Path, cell: Training, search: SearchBlock, sink: RecordSink) -> Path:
    trials = study_trials(sink, cell, search)
    finished = [t for t in trials if not t.get("stopped")]
    modes = [o.mode for o in search.objectives]
    summary: dict[str, Any] = {
        "cell": cell.cell,
        "objectives": [o.model_dump() for o in search.objectives],
        "n_trials": len(trials),
        "n_stopped": len(trials) - len(finished),
        "trials": trials,
        "pareto": pareto(finished, modes),
        "distributions": {
            k: optuna.distributions.distribution_to_json(distribution(p))
            for k, p in search.params.items()
        },
    }
    if len(modes) == 1 and finished:
        pick = max if modes[0] == "max" else min
        summary["best"] = pick(finished, key=lambda t: t["values"][0])
    summary["selected_on"] = [selected(o.metric) for o in search.objectives]
    path = study_path(sweep_dir, cell.spec.model_dump(mode="json"), list(search.params))
    return write_json_atomic(path, summary)


def run_searches(
    plan: Plan, sweep_dir: Path, data_dir: str | None, tracker: Tracker | None = None
) -> tuple[int, int, int]:
    """One study per cell; returns (trainings recorded, failed, skipped as already done).
    ``tracker``: the run's (heartbeat, progress.json), told of every study's trials."""
    search = plan.space.search
    assert search is not None
    sink = RecordSink(sweep_dir)
    written = failed = skipped = 0
    names = progress.cell_labels(plan)
    for i, cell in enumerate(plan.trainings):
        done = len(study_trials(sink, cell, search))
        remaining = search.n_trials - done
        skipped += min(done, search.n_trials)
        label = f"study {i + 1}/{len(plan.trainings)} " + (names[cell.trial_id] + " ").lstrip()
        recorded_text = f"{plural(done, 'trial')} recorded, {max(remaining, 0)} to run"
        say(f"{label}{cell.cell}: {recorded_text}")
        if remaining > 0:
            w, f = _run_study(
                plan, sweep_dir, cell, search, remaining, done, data_dir, label, tracker
            )
            written, failed = written + w, failed + f
        path = write_summary(sweep_dir, cell, search, sink)
        say(f"{label}summary: {path}")
        if runner.INTERRUPT.is_set():  # Ctrl-C: no further study starts
            break
    return written, failed, skipped


def recorded(plan: Plan, sweep_dir: Path) -> int:
    """Trials of the plan's studies recorded so far (each study counts up to n_trials)."""
    search = plan.space.search
    assert search is not None
    sink = RecordSink(sweep_dir)
    return sum(min(len(study_trials(sink, c, search)), search.n_trials) for c in plan.trainings)


def _run_study(
    plan: Plan,
    sweep_dir: Path,
    cell: Training,
    search: SearchBlock,
    n: int,
    offset: int,
    data_dir: str | None,
    label: str,
    tracker: Tracker | None = None,
) -> tuple[int, int]:
    metrics = [selected(o.metric) for o in search.objectives]
    modes = [o.mode for o in search.objectives]
    single = len(metrics) == 1
    epochs = int(cell.spec.required("epochs"))
    searcher = early_stop.PrunedSearch(
        space={k: distribution(p) for k, p in search.params.items()},
        metric=metrics[0] if single else metrics,
        mode=modes[0] if single else modes,
        sampler=sampler(search, offset),
        pruner=early_stop.optuna_pruner(plan.space, epochs),
    )
    ctx = dataclasses.replace(
        runner.context(plan, data_dir, cell.spec.model_dump(mode="json"), cell.attacks),
        prestart=prestart_count(cell.spec),
    )
    sink = RecordSink(sweep_dir)
    callback = runner.Progress(sink, ctx.inbox, n, label, tracker=tracker)
    stopper = early_stop.scheduler(plan.space, searcher, epochs)
    if ctx.early_stop:
        callback.stopped_by = early_stop.stopped_by(plan.space)
    tuner = tune.Tuner(
        trainable(plan, ctx, n_parties=actor_count(cell.spec)),
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            scheduler=stopper,
            num_samples=n,
            max_concurrent_trials=plan.space.run.max_concurrent_trials,
            reuse_actors=plan.space.run.reuse_actors,
            trial_dirname_creator=runner.trial_dirname,
        ),
        run_config=runner.run_config(plan, sweep_dir, callback, f"search{offset}"),
    )
    # a ResultGrid iterates through __getitem__ (no __iter__), which mypy does not see
    results = cast("Iterable[tune.Result]", tuner.fit())
    callback.take_rest()
    failures: list[tuple[str, TrialSpec, str]] = []
    unplaced = 0  # failed before its first report: Ray has no config for it (no record)
    for r in results:
        if r.error is None:
            continue
        if not r.config:
            unplaced += 1
            say(f"a search trial failed before its first report: {runner.error_text(r.error)}")
        else:
            params = {k: v for k, v in r.config.items() if k in search.params}
            spec = runner.spec_of(params, ctx)
            failures.append((spec.config_hash, spec, runner.error_text(r.error)))
    failed = len(callback.failed) + runner.record_failures(sink, failures, plan.space.name)
    failed += unplaced
    return len(callback.written) + len(callback.stopped), failed  # stopped: recorded too
