"""One wall-time estimate for a plan: measured parts on this machine, what is left to run.

Why one: there were three (the pack-sizing cost model, ``--estimate``'s epoch timing, and
the sizes a user multiplied out), they disagreed by 3x and none held: they left out attack
evaluations (PMC: 4-20 s each, against 0.5 s of training), counted trainings already
recorded, and shrank silently when a data file was missing.

The estimate of what is left::

    wall = start-up + (sum over trainings not yet recorded of
               (training seconds + seconds of each of its attack evaluations)
               + the start of each pack's processes) / concurrency

(a search: each study's trials, and its Tuner's fresh processes, instead of packs).

Each part comes from the per-machine cache of ``costs.py``: seconds the actors reported in
an earlier sweep here, else a *probe* run now in a child process (``probe.py``: a short
and a longer run of one training per class, then each of its attacks, every part kept as
soon as it is measured; cached, so the next plan is instant), else, past the probe's time
budget, the cost model of ``packs.py`` scaled by how far it was off on the parts that
were probed. Trainings whose data file is missing are counted as *unknown*,
never as free. ``concurrency`` is the trials that fit at once, at most the CPUs: each trial
keeps about one CPU busy (its parties take turns).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sweep_engine.costs import Costs, load
from sweep_engine.packs import (
    STACKED_TRAINING_S,
    attack_cost,
    cost,
    lone_twins,
    packs_for,
    pretrain_epochs,
    slots,
    trains_stacked,
)
from sweep_engine.probe import levels, parts, probe_in_child, to_probe
from trainables.data import load_dataset
from trainables.errors import ConfigError, MissingDataError
from trainables.trial import actor_count

if TYPE_CHECKING:
    from sweep_engine.plan import Plan, Training
    from trainables.spec import TrialSpec

# the whole command's fixed seconds: imports, planning, Ray's start, Tune's set-up, cold
# actors, MLflow and the summary at the end. `python -m benchmarks.estimate_constants`
# (2026-12-07, 2 cores, quiet): the smoke command less its measured parts, 8.1-10.3 s,
# median 10.2 (23.6 on 2026-12-04, before issue 67's start-up cuts; 12 s before that
# counted only the sweep's own wall, not the command's, which a user and
# benchmarks.estimate_accuracy time)
STARTUP_S = 10.2
# probing stops after this (its child process is stopped); the rest uses the cost model
# scaled to its family's probed classes. 20 s: planning ssl.yaml takes ~10 s, and a dry
# run answers within 35 s (issue 45)
PROBE_BUDGET_S = 20.0
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
# CPU seconds of a fresh process importing a trial's or a party's code (Ray's worker,
# torch, the party): `python -m benchmarks.estimate_constants` (2026-12-07), 2.31-2.37,
# median 2.34 (3.3 on 2026-12-04, before the start-up cuts).
# Each study of a search is a Tuner of its own: its trial processes and their party
# actors start again (a grid's Tuner reuses its processes for pack after pack, and its
# per-pack cost is PROCESS_S above)
IMPORT_S = 2.34


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
    unprobed: int = 0  # classes the probe's budget left unmeasured
    bounded: bool = True  # the probe had a budget (not --estimate's none): it left them

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
        if self.unprobed:
            classes = f"{self.unprobed} class{'es' * (self.unprobed != 1)} of training"
            if self.bounded:
                how += f"; {classes} not measured within the probe budget, {PROBE_ENV} sets it"
            else:  # no budget cut them short: their probe failed
                how += f"; {classes} could not be measured here"
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


def _nearest(t: Training, scale: dict[tuple[str, ...], float], overall: float) -> float:
    """The measured / cost-model ratio of ``t``'s nearest measured level; a pretraining
    class looks no further than its variant (a fine-tuning-only class's ratio says nothing
    of pretraining) and else trusts the cost model (``packs.pretrain_cost``)."""
    near = levels(t)
    if pretrain_epochs(t.spec):
        return next((scale[lv] for lv in near[:3] if lv in scale), 1.0)
    return next((scale[lv] for lv in near if lv in scale), overall)


def probe_budget() -> float:
    """``$VFLSWEEP_PROBE_S`` (``inf``: no limit), else ``PROBE_BUDGET_S``. Why a
    ConfigError: a mistyped value is the user's to fix, not a traceback of ``float()``."""
    text = os.environ.get(PROBE_ENV, "").strip()
    try:
        return float(text) if text else PROBE_BUDGET_S
    except ValueError:
        raise ConfigError(f"{PROBE_ENV}={text!r}: not a number of seconds") from None


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
        budget_s = probe_budget()
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
    concurrency = max(1, min(fit, cpus))
    # parties on actors share the CPUs a trial has: pretraining (each party on its own
    # rows) runs up to n at once where each party has a CPU (ssl_iso: cpu_per_party 1)
    parallel = max(1.0, min(float(n), cpus / concurrency)) if remote else 1.0
    start = time.perf_counter()
    if probe and budget_s > 0:
        probe_in_child(known, costs, data_dir, budget_s, remote)
        costs.save()
    unprobed = len(to_probe(known, costs, remote)) if probe else 0
    probed_s = time.perf_counter() - start
    total, measured = 0.0, 0
    train_ratio: dict[tuple[str, ...], list[float]] = {}  # measured / cost model, per level
    attack_ratio: dict[str, list[float]] = {}  # per attack, and "" for all
    known_parts = [(t, parts(t, costs, remote, parallel), cost(t, remote, data_dir)) for t in known]
    for t, (train, evals), model in known_parts:
        if train is not None and model.training(parallel) > 0:
            for level in levels(t):
                train_ratio.setdefault(level, []).append(train / model.training(parallel))
        for name, seconds in evals:
            if seconds is not None:
                ratio = seconds / max(attack_cost(name, t.spec, data_dir), 1e-6)
                attack_ratio.setdefault(name, []).append(ratio)
                attack_ratio.setdefault("", []).append(ratio)
    t_scale = {level: statistics.median(rs) for level, rs in train_ratio.items()}
    a_scale = {name: statistics.median(rs) for name, rs in attack_ratio.items()}
    every = [r for level, rs in train_ratio.items() if len(level) == 1 for r in rs]
    overall = statistics.median(every) if every else 1.0
    grid = plan.space.search is None and bool(known)
    packs = packs_for(known, plan.space.run, fit, data_dir) if grid else []
    vectorize = bool(plan.space.run.vectorize)
    stacked = {  # trainings that train as one stack with others: ``STACKED_TRAINING_S`` each
        t.trial_id
        for p in packs
        if len(p.trainings) > 1 and trains_stacked(p.trainings, vectorize)
        for t in p.trainings
    }
    lone = lone_twins(packs)  # each also trains its unattacked twin
    own: dict[str, float] = {}  # a training's seconds, its fixed cost included
    for t, (train, evals), model in known_parts:  # what is not measured: the scaled cost model
        measured += train is not None and all(s is not None for _, s in evals)
        if train is None:  # scaled as the nearest level with a measured class
            train = model.training(parallel) * _nearest(t, t_scale, overall)
        if t.trial_id in lone:  # its twin: the same training without the attack
            train *= 2
        for name, seconds in evals:
            if seconds is None:
                seconds = attack_cost(name, t.spec, data_dir) * a_scale.get(
                    name, a_scale.get("", 1.0)
                )
            train += seconds
        own[t.trial_id] = train + (STACKED_TRAINING_S if t.trial_id in stacked else TRAINING_S)
        total += own[t.trial_id]
    if plan.space.search is not None:  # each cell is a study of n_trials trainings
        trials = len(todo) * plan.space.search.n_trials
        left = max(0, trials - recorded)
        total = total * plan.space.search.n_trials * left / max(1, trials)
        total += left * SEARCH_TRIAL_S
        studies = math.ceil(left / plan.space.search.n_trials)  # with trials left to run
        total += studies * concurrency * (1 + (n if remote else 0)) * IMPORT_S
    elif known:  # each pack starts its processes: the trial's, and its party actors on ray
        starts = [PROCESS_S * (1 + (p.n_parties if remote else 0)) for p in packs]
        total += sum(starts)
        # a pack runs in one trial: the sweep takes at least its longest pack
        longest = max(
            s + sum(own[t.trial_id] for t in p.trainings)
            for p, s in zip(packs, starts, strict=True)
        )
        total = max(total, longest * concurrency)
    seconds = STARTUP_S + total / concurrency if known else 0.0
    per = plan.space.search.n_trials if plan.space.search is not None else 1  # per cell
    n_todo = len(todo) * per - (recorded if per > 1 else 0)
    if n_todo <= 0:
        return Estimate(0.0, concurrency, 0, recorded)
    unknown = min(n_todo, (len(todo) - len(known)) * per)
    return Estimate(
        seconds, concurrency, n_todo, recorded, unknown, why, min(measured * per, n_todo),
        probed_s, unprobed, budget_s != math.inf,
    )  # fmt: skip
