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
from sweep_engine.packs import attack_cost, cost, packs_for, pretrain_epochs, slots
from trainables.attacks.tuning import split_adapt, without_adapt
from trainables.data import load_dataset
from trainables.errors import ConfigError, MissingDataError
from trainables.results.labels import adapted_label
from trainables.trial import actor_count, kind_of, run_trial

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from sweep_engine.plan import Plan, Training
    from trainables.records import Record
    from trainables.spec import TrialSpec

STARTUP_S = 12.0  # Ray start, Tune set-up, cold actors, MLflow at the end (smoke: 10-14 s)
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
            how += (
                f"; {self.unprobed} class{'es' * (self.unprobed != 1)} of training not"
                f" measured within the probe budget, {PROBE_ENV} sets it"
            )
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


def _at(spec: TrialSpec, epochs: int, pretrain: bool) -> TrialSpec:
    """``spec`` at ``epochs`` (0: as it is), with one pretraining epoch if ``pretrain``."""
    update: dict[str, object] = {"epochs": epochs} if epochs else {}
    if pretrain:
        update["model_params"] = {**spec.model_params, "pretrain_epochs": 1}
    return spec.model_copy(update=update)


def _timed(records: list[Record]) -> tuple[float, float]:
    """(seconds without pretraining, seconds of pretraining) of a trial's records."""
    pre = float(json.loads(records[0].extra or "{}").get("pretrain_seconds", 0.0))
    return max(0.0, records[0].train_seconds - pre), pre


def _probe_timed(training: Training, costs: Costs, data_dir: str | None) -> None:
    spec = training.spec
    epochs, pre = int(spec.epochs or 0), pretrain_epochs(spec)
    short = _at(spec, 1 if epochs else 0, pre > 0)
    if spec.dataset not in _WARM and epochs:
        run_trial(short, data_dir=data_dir)
        _WARM.add(spec.dataset)
    # one run per attack: an adaptive attacker's tuning is its cost times ``runs``
    records = run_trial(short, data_dir=data_dir, attacks=without_adapt(training.attacks))
    t1, pre_1 = _timed(records)
    for r in records:
        if r.attack not in ("none", spec.train_attack):
            costs.add_evaluation(attack_key(r.attack, spec), r.attack_seconds, "probe")
    pretraining = pre_1 * pre  # its epochs at the one's seconds, in the class's fixed part
    if not epochs:
        costs.add_training(train_key(spec), t1 + pretraining, 0.0, "probe")
        return
    n = min(epochs, max(2, int(PROBE_LONG_S / max(t1, 1e-3))))
    tn, _ = _timed(run_trial(_at(spec, n, pre > 0), data_dir=data_dir))
    per_epoch = max(tn - t1, 0.0) / (n - 1) if n > 1 else t1
    costs.add_training(train_key(spec), max(0.0, t1 - per_epoch) + pretraining, per_epoch, "probe")


def _parts(
    training: Training, costs: Costs, remote: bool
) -> tuple[float | None, list[tuple[str, float | None]]]:
    """(training seconds, or None if not measured; per attack record it writes, its name
    and measured seconds or None). The records are its kind's (``TrialKind.evaluations``:
    FedHSSL's MC runs twice); an adaptive attacker's include its tuning runs."""
    spec = training.spec
    train = None
    got = costs.training(train_key(spec))
    if got is not None:
        fixed, per_epoch = got
        train = fixed + per_epoch * int(spec.epochs or 0)
        if remote and costs.source.get(f"train:{train_key(spec)}") == "probe":
            train += cost(training, remote=True).transport  # actor round trips a probe skips
    adapt_of = {name: split_adapt(params)[1] for name, params in training.attacks}
    evals: list[tuple[str, float | None]] = []
    for name in kind_of(spec).evaluations(spec, [n for n, _ in training.attacks]):
        seconds = costs.evaluation(attack_key(name, spec))
        adapt = adapt_of.get(name)
        if seconds is not None and adapt is not None:  # its tuning: per run as measured
            per_run = costs.evaluation(attack_key(adapted_label(name), spec))
            seconds += (seconds if per_run is None else per_run) * (adapt.trials + 1)
        evals.append((name, seconds))
    return train, evals


def _seconds(training: Training, costs: Costs, remote: bool) -> tuple[float, float] | None:
    """(training seconds, attack seconds) from measured parts; None if any part is not."""
    train, evals = _parts(training, costs, remote)
    if train is None or any(seconds is None for _, seconds in evals):
        return None
    return train, sum(seconds or 0.0 for _, seconds in evals)


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


def levels(t: Training) -> tuple[tuple[str, ...], ...]:
    """Trainings that cost alike against the cost model, nearest first: one kind, dataset,
    SSL variant, protocol and defense (a *family*); the same on any dataset; the kind and
    variant; the kind. The probe measures one class per variant, then per family; the
    cost model of an unmeasured class is scaled by its nearest level's measured ones."""
    spec = t.spec
    kind = kind_of(spec).name
    variant, shape = spec.ssl_variant, (spec.protocol, spec.defense)
    return (kind, spec.dataset, variant, *shape), (kind, variant, *shape), (kind, variant), (kind,)


def _nearest(t: Training, scale: dict[tuple[str, ...], float], overall: float) -> float:
    """The measured / cost-model ratio of ``t``'s nearest measured level; a pretraining
    class looks no further than its variant (a fine-tuning-only class's ratio says nothing
    of pretraining) and else trusts the cost model (``packs.PRETRAIN_ROW_S``)."""
    near = levels(t)
    if pretrain_epochs(t.spec):
        return next((scale[lv] for lv in near[:3] if lv in scale), 1.0)
    return next((scale[lv] for lv in near if lv in scale), overall)


def _to_probe(trainings: list[Training], costs: Costs, remote: bool) -> list[Training]:
    """One training per class whose parts are not measured: first one class of each kind
    and variant, then of each family (the largest first), then the rest by the trainings
    they cover, so that a probe cut short by its budget has reached the most kinds of cost."""
    groups: dict[tuple[str, ...], list[Training]] = {}
    for t in trainings:
        if _seconds(t, costs, remote) is not None:
            continue
        keys = (train_key(t.spec), *(attack_key(a, t.spec) for a, _ in t.attacks))
        groups.setdefault(keys, []).append(t)
    by_size = sorted(groups.values(), key=len, reverse=True)
    order: list[list[Training]] = []
    for level in (2, 0):  # a new kind and variant, then a new family
        covered = {levels(g[0])[level] for g in order}
        for group in by_size:
            key = levels(group[0])[level]
            if key not in covered and all(group is not o for o in order):
                order.append(group)
                covered.add(key)
    order += [g for g in by_size if all(g is not o for o in order)]
    picked, seen = [], set()
    for group in order:
        spec = group[0].spec
        keys = {train_key(spec), *(attack_key(a, spec) for a, _ in group[0].attacks)}
        if keys <= seen:
            continue  # measured by an earlier pick
        seen |= keys
        picked.append(group[0])
    return picked


def _probe_child(trainings: list[Training], data_dir: str | None, conn: Connection) -> None:
    """In a child process: probe each training; send its costs after each one."""
    for t in trainings:
        got = Costs(path=Path(os.devnull))
        try:
            _probe(t, got, data_dir)
        except (ConfigError, RuntimeError, ValueError):
            pass  # the scaled cost model in the parent
        conn.send((got.train, got.attack))
    conn.close()


def probe_in_child(
    trainings: list[Training], costs: Costs, data_dir: str | None, budget_s: float, remote: bool
) -> int:
    """Probe the unmeasured classes of ``trainings`` in a child process and add what it
    measured to ``costs``; the child is stopped once ``budget_s`` has passed, mid-probe if
    need be. Why a child: one probe of an SSL class can take a minute (pretraining), and
    a budget checked between probes let ``--dry-run`` of ssl.yaml take 2.5 min against its
    30 s. Returns the classes measured."""
    import multiprocessing

    picked = _to_probe(trainings, costs, remote)
    if not picked:
        return 0
    deadline = time.perf_counter() + budget_s
    ctx = multiprocessing.get_context("spawn")  # fork after torch's threads can hang
    here, there = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_probe_child, args=(picked, data_dir, there), daemon=True)
    child.start()
    there.close()
    done = 0
    try:
        while done < len(picked) and here.poll(max(0.0, deadline - time.perf_counter())):
            try:
                train, attack = here.recv()
            except EOFError:
                break  # the child died: the rest by the scaled cost model
            for key, slot in train.items():
                for fixed, per_epoch in zip(slot["fixed"], slot["epoch"], strict=True):
                    costs.add_training(key, fixed, per_epoch, "probe")
            for key, seconds in attack.items():
                for one in seconds:
                    costs.add_evaluation(key, one, "probe")
            done += 1
    finally:
        if child.is_alive():
            child.kill()
        child.join(timeout=5)
        here.close()
    return done


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
        probe_in_child(known, costs, data_dir, budget_s, remote)
        costs.save()
    unprobed = len(_to_probe(known, costs, remote)) if probe else 0
    probed_s = time.perf_counter() - start
    total, measured = 0.0, 0
    train_ratio: dict[tuple[str, ...], list[float]] = {}  # measured / cost model, per level
    attack_ratio: dict[str, list[float]] = {}  # per attack, and "" for all
    parts = [(t, _parts(t, costs, remote), cost(t, remote, data_dir)) for t in known]
    for t, (train, evals), model in parts:
        if train is not None and model.total - model.attacks > 0:
            for level in levels(t):
                train_ratio.setdefault(level, []).append(train / (model.total - model.attacks))
        for name, seconds in evals:
            if seconds is not None:
                ratio = seconds / max(attack_cost(name, t.spec, data_dir), 1e-6)
                attack_ratio.setdefault(name, []).append(ratio)
                attack_ratio.setdefault("", []).append(ratio)
    t_scale = {level: statistics.median(rs) for level, rs in train_ratio.items()}
    a_scale = {name: statistics.median(rs) for name, rs in attack_ratio.items()}
    every = [r for level, rs in train_ratio.items() if len(level) == 1 for r in rs]
    overall = statistics.median(every) if every else 1.0
    for t, (train, evals), model in parts:  # what is not measured: the scaled cost model
        measured += train is not None and all(s is not None for _, s in evals)
        if train is None:  # scaled as the nearest level with a measured class
            train = (model.total - model.attacks) * _nearest(t, t_scale, overall)
        for name, seconds in evals:
            if seconds is None:
                seconds = attack_cost(name, t.spec, data_dir) * a_scale.get(
                    name, a_scale.get("", 1.0)
                )
            train += seconds
        total += train + TRAINING_S
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
        seconds, concurrency, n_todo, recorded, unknown, why, min(measured * per, n_todo),
        probed_s, unprobed,
    )  # fmt: skip
