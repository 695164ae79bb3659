"""One wall-time estimate for a plan: measured parts on this machine, what is left to run.

Why one: there were three (the pack-sizing cost model, ``--estimate``'s epoch timing, and
the sizes a user multiplied out), they disagreed by 3x and none held: they left out attack
evaluations (PMC: 4-20 s each, against 0.5 s of training), counted trainings already
recorded, and shrank silently when a data file was missing.

The estimate of what is left::

    wall = start-up + (sum over trainings not yet recorded of
               (training seconds + seconds of each of its attack evaluations)
               + the start of each pack's processes) / concurrency

Each part comes from the per-machine cache of ``costs.py``: seconds the actors reported in
an earlier sweep here, else a *probe* run now in this process (one- and two-epoch runs of one
training per class, with its attacks; cached, so the next plan is instant), else, past the
probe's time budget, the cost model of ``packs.py`` scaled by how far it was off on the
classes that were probed. Trainings whose data file is missing are counted as *unknown*,
never as free. ``concurrency`` is the trials that fit at once, at most the CPUs: each trial
keeps about one CPU busy (its parties take turns).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sweep_engine.costs import Costs, attack_key, load, train_key
from sweep_engine.packs import cost, packs_for, slots
from trainables.attacks.tuning import split_adapt, without_adapt
from trainables.data import load_dataset
from trainables.errors import ConfigError, MissingDataError
from trainables.results.labels import adapted_label
from trainables.trial import actor_count, run_trial

if TYPE_CHECKING:
    from sweep_engine.plan import Plan, Training
    from trainables.spec import TrialSpec

STARTUP_S = 12.0  # Ray start, Tune set-up, cold actors, MLflow at the end (smoke: 10-14 s)
PROBE_BUDGET_S = 30.0  # probing stops after this; the rest uses the scaled cost model
PROBE_ENV = "VFLSWEEP_PROBE_S"  # another budget (0: never probe; the test suite sets 0)
TRAINING_S = 0.15  # per training on the actors beyond its own seconds (reports, records)
# CPU seconds each process of a pack costs before its first training: a Ray worker that
# imports torch and the kinds, a placement group, first calls (issue 30's runs: attacks,
# protocols and trust were 1.3-2.1 s of wall per pack at 2 concurrent trials above the
# sum of their measured parts, i.e. 3-4 CPU-s for a trial process and two party actors)
PROCESS_S = 1.5
# CPU seconds each trial of a search costs beyond its training: one training per Tune trial
# on reused actors (fitted on defense_pareto.yaml, the one shipped search: 72 trials ran
# ~36 s of wall at 2 concurrent trials above their measured parts)
SEARCH_TRIAL_S = 1.0


@dataclass(frozen=True)
class Estimate:
    """``seconds``: of the trainings whose parts are known; ``unknown``: trainings that
    cannot be estimated here (their data file is missing), named by ``why``."""

    seconds: float
    slots: int
    todo: int
    recorded: int
    unknown: int = 0
    why: tuple[str, ...] = ()
    measured: int = 0  # trainings whose every part was measured (cache or probe)
    probed_s: float = 0.0

    def text(self) -> str:
        if self.todo == 0:
            return f"nothing left to run ({self.recorded} recorded)"
        done = f"; {self.recorded} already recorded" if self.recorded else ""
        known = self.todo - self.unknown
        if known == 0:
            return f"unknown: {'; '.join(self.why)}{done}"
        how = f"{self.measured} of {known} from parts measured here"
        if self.measured < known:
            how += "; the rest by the cost model scaled to them"
        text = f"~{human(self.seconds)} for {known} training{'s' * (known != 1)}"
        text += f" on {self.slots} concurrent trial{'s' * (self.slots != 1)} ({how}{done})"
        if self.unknown:
            text += f"; {self.unknown} more unknown ({'; '.join(self.why)})"
        return text


def human(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


_WARM: set[str] = set()  # datasets this process has trained on (first calls are slow)
PROBE_LONG_S = 1.0  # the longer probe run lasts about this long (short ones drown in noise)


def _probe(training: Training, costs: Costs, data_dir: str | None) -> None:
    """Time one training of ``training``'s class at one epoch, with each of its attacks,
    then at enough epochs to last ``PROBE_LONG_S``, in this process; add both to ``costs``
    as ``probe``. A first training on a dataset runs once untimed (imports, caches)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in every party actor: more threads on 2 busy cores is 10x slower
    try:
        _probe_timed(training, costs, data_dir)
    finally:
        torch.set_num_threads(threads)


def _probe_timed(training: Training, costs: Costs, data_dir: str | None) -> None:
    spec = training.spec
    epochs = int(spec.epochs or 0)
    short = spec.model_copy(update={"epochs": 1}) if epochs else spec
    if spec.dataset not in _WARM and epochs:
        run_trial(short, data_dir=data_dir)
        _WARM.add(spec.dataset)
    # one run per attack: an adaptive attacker's tuning is its cost times ``runs``
    records = run_trial(short, data_dir=data_dir, attacks=without_adapt(training.attacks))
    t1 = records[0].train_seconds
    for r in records:
        if r.attack not in ("none", spec.train_attack):
            costs.add_evaluation(attack_key(r.attack, spec), r.attack_seconds, "probe")
    if not epochs:
        costs.add_training(train_key(spec), t1, 0.0, "probe")
        return
    n = min(epochs, max(2, int(PROBE_LONG_S / max(t1, 1e-3))))
    tn = run_trial(spec.model_copy(update={"epochs": n}), data_dir=data_dir)[0].train_seconds
    per_epoch = max(tn - t1, 0.0) / (n - 1) if n > 1 else t1
    costs.add_training(train_key(spec), max(0.0, t1 - per_epoch), per_epoch, "probe")


def _seconds(training: Training, costs: Costs, remote: bool) -> tuple[float, float] | None:
    """(training seconds, attack seconds) from measured parts; None if any part is not."""
    spec = training.spec
    got = costs.training(train_key(spec))
    if got is None:
        return None
    fixed, per_epoch = got
    train = fixed + per_epoch * int(spec.epochs or 0)
    if remote and costs.source.get(f"train:{train_key(spec)}") == "probe":
        train += cost(training, remote=True).transport  # actor round trips a probe skips
    attacks = 0.0
    for name, params in training.attacks:
        seconds = costs.evaluation(attack_key(name, spec))
        if seconds is None:
            return None
        attacks += seconds
        _, adapt = split_adapt(params)
        if adapt is not None:  # its tuning: per run as measured (costs.learn), else a default's
            per_run = costs.evaluation(attack_key(adapted_label(name), spec))
            attacks += (seconds if per_run is None else per_run) * (adapt.trials + 1)
    return train, attacks


def _data_key(spec: TrialSpec) -> str:
    return json.dumps([spec.dataset, dict(spec.dataset_params)], default=str)


def _available(trainings: list[Training], data_dir: str | None) -> dict[str, str | None]:
    """Per dataset (with its parameters): None if it loads here, else why not."""
    out: dict[str, str | None] = {}
    for t in trainings:
        key = _data_key(t.spec)
        if key in out:
            continue
        try:
            load_dataset(t.spec.dataset, data_dir, **t.spec.dataset_params)
            out[key] = None
        except (MissingDataError, ConfigError) as err:
            out[key] = f"no data for {t.spec.dataset}: {str(err).split(';')[0]}"
    return out


def todo_of(plan: Plan, sweep_dir: Path | None) -> tuple[list[Training], int]:
    """Trainings not recorded yet in ``sweep_dir`` (all of them without one), and how many
    are recorded. A search space counts its studies' trials (``search.recorded``)."""
    trainings = list(plan.trainings)
    if sweep_dir is None or not sweep_dir.exists():
        return trainings, 0
    if plan.space.search is not None:
        from sweep_engine.search import recorded as search_recorded

        return trainings, search_recorded(plan, sweep_dir)
    from sweep_engine.sink import RecordSink

    done = RecordSink(sweep_dir).done()
    todo = [t for t in trainings if t.trial_id not in done]
    return todo, len(trainings) - len(todo)


def estimate(
    plan: Plan,
    cpus: int | None = None,
    probe: bool = True,
    data_dir: str | None = None,
    sweep_dir: Path | None = None,
    budget_s: float | None = None,
    costs: Costs | None = None,
) -> Estimate:
    """Wall seconds of what ``plan`` has left to run on a local Ray of ``cpus`` (default:
    this machine's); ``probe``: measure the classes the cache lacks, for up to ``budget_s``
    (default ``$VFLSWEEP_PROBE_S``, else ``PROBE_BUDGET_S``)."""
    costs = costs or load()
    if budget_s is None:
        budget_s = float(os.environ.get(PROBE_ENV, PROBE_BUDGET_S))
    remote = plan.space.run.transport == "ray"
    todo, recorded = todo_of(plan, sweep_dir)
    n = max((actor_count(t.spec) for t in plan.trainings), default=1)
    cpus = cpus or os.cpu_count() or 1
    fit = slots(plan, n, cpus)
    if not todo:
        return Estimate(0.0, fit, 0, recorded)
    missing = _available(todo, data_dir)
    why = tuple(sorted({m for m in missing.values() if m}))

    known = [t for t in todo if missing[_data_key(t.spec)] is None]
    start = time.perf_counter()
    if probe and budget_s > 0:
        for t in known:
            if time.perf_counter() - start > budget_s:
                break
            if _seconds(t, costs, remote) is None:
                try:
                    _probe(t, costs, data_dir)
                except (ConfigError, RuntimeError, ValueError):
                    continue  # the scaled cost model below
        costs.save()
    probed_s = time.perf_counter() - start
    total, measured, ratios, rest = 0.0, 0, [], []
    for t in known:
        got = _seconds(t, costs, remote)
        if got is None:
            rest.append(t)
            continue
        total += sum(got) + TRAINING_S
        measured += 1
        model = cost(t, remote, data_dir)
        if model.total > 0:
            ratios.append(sum(got) / model.total)
    scale = statistics.median(ratios) if ratios else 1.0
    total += sum(cost(t, remote, data_dir).total * scale + TRAINING_S for t in rest)
    if plan.space.search is not None:  # each cell is a study of n_trials trainings
        trials = len(todo) * plan.space.search.n_trials
        left = max(0, trials - recorded)
        total = total * plan.space.search.n_trials * left / max(1, trials)
        total += left * SEARCH_TRIAL_S
    elif known:  # each pack starts its processes: the trial's, and its party actors on ray
        packs = packs_for(known, plan.space.run, fit, data_dir)
        total += sum(PROCESS_S * (1 + (p.n_parties if remote else 0)) for p in packs)
    concurrency = max(1, min(fit, cpus))
    seconds = STARTUP_S + total / concurrency if known else 0.0
    per = plan.space.search.n_trials if plan.space.search is not None else 1  # per cell
    n_todo = len(todo) * per - (recorded if per > 1 else 0)
    if n_todo <= 0:
        return Estimate(0.0, concurrency, 0, recorded)
    unknown = min(n_todo, (len(todo) - len(known)) * per)
    return Estimate(
        seconds, concurrency, n_todo, recorded, unknown, why, min(measured * per, n_todo), probed_s
    )
