"""Measuring what a plan's training classes cost on this machine: the estimate's probe.

Why its own module: the probe is the estimate's only part that trains. It times one short
training per class (and each of its attacks) in a child process that is stopped at the
budget (``probe_in_child``), and ``parts`` reads what the cost cache holds for a
training. ``estimate.py`` adds them up.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sweep_engine.costs import Costs, attack_key, train_key
from sweep_engine.packs import attack_cost, cost, pretrain_epochs
from trainables.attacks.tuning import runs, split_adapt, without_adapt
from trainables.attacks.tuning_trained import trainings
from trainables.errors import ConfigError
from trainables.results.labels import adapted_label
from trainables.trial import kind_of, run_trial

if TYPE_CHECKING:
    from collections.abc import Callable, Set
    from multiprocessing.connection import Connection

    from sweep_engine.plan import Training
    from trainables.records import Record
    from trainables.spec import TrialSpec


_WARM: set[str] = set()  # datasets this process has trained on (first calls are slow)
PROBE_LONG_S = 1.0  # the longer probe run lasts about this long (short ones drown in noise)
POLL_S = 1.0  # the parent waits for the probe child's next message in slices this long


def _nothing() -> None:
    return None


def _probe(
    training: Training,
    costs: Costs,
    data_dir: str | None,
    report: Callable[[], None] = _nothing,
    known: Set[str] = frozenset(),
) -> None:
    """Time one training of ``training``'s class at one epoch and at enough epochs to last
    ``PROBE_LONG_S``, then each of its attacks, in this process; add them to ``costs`` as
    ``probe``, calling ``report`` after each part. Keys in ``known`` are measured already
    and skipped. A first training on a dataset runs once untimed (imports, caches)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in every party actor: more threads on 2 busy cores is 10x slower
    try:
        _probe_timed(training, costs, data_dir, report, known)
    finally:
        torch.set_num_threads(threads)


def _at(spec: TrialSpec, epochs: int, pretrain: bool) -> TrialSpec:
    """``spec`` at ``epochs`` (0: as it is), with one pretraining epoch if ``pretrain``; one
    training of an adapted training-time attacker (``parts`` multiplies by its trials)."""
    update: dict[str, object] = {"epochs": epochs} if epochs else {}
    if spec.train_attack_adapt:
        update["train_attack_adapt"] = {}
    if pretrain:
        update["model_params"] = {**spec.model_params, "pretrain_epochs": 1}
    return spec.model_copy(update=update)


def _timed(records: list[Record]) -> tuple[float, float]:
    """(seconds without pretraining, seconds of pretraining) of a trial's records."""
    pre = float(json.loads(records[0].extra or "{}").get("pretrain_seconds", 0.0))
    return max(0.0, records[0].train_seconds - pre), pre


def _evaluations(records: list[Record], spec: TrialSpec, costs: Costs) -> None:
    for r in records:
        if r.attack not in ("none", spec.train_attack):
            costs.add_evaluation(attack_key(r.attack, spec), r.attack_seconds, "probe")


def _probe_timed(
    training: Training,
    costs: Costs,
    data_dir: str | None,
    report: Callable[[], None],
    known: Set[str],
) -> None:
    spec = training.spec
    epochs, pre = int(spec.epochs or 0), pretrain_epochs(spec)
    short = _at(spec, 1 if epochs else 0, pre > 0)
    # one run per attack: an adaptive attacker's tuning is its cost times ``runs``
    attacks = without_adapt(training.attacks)
    if spec.dataset not in _WARM and epochs:
        run_trial(short, data_dir=data_dir)
        _WARM.add(spec.dataset)
    if pre or not epochs or spec.train_attack != "none":
        # one run with every attack: pretraining (seconds to a minute) is not repeated per
        # attack, a training-time attack is part of its training, a tree has no epochs
        records = run_trial(short, data_dir=data_dir, attacks=attacks)
        t1, pre_1 = _timed(records)
        _evaluations(records, spec, costs)
        _add_training(spec, t1, pre_1 * pre, epochs, costs, data_dir, pre > 0)
        report()
        return
    # part by part, each reported as it is measured: a probe stopped at its budget keeps
    # what it finished (defenses.yaml's first digits class with eight attacks takes ~20 s,
    # the whole budget). The training, then its attacks, costliest first by the cost model;
    # each attack on its own one-epoch training (digits: ~0.1 s each)
    if train_key(spec) not in known:
        t1, _ = _timed(run_trial(short, data_dir=data_dir))
        _add_training(spec, t1, 0.0, epochs, costs, data_dir, False)
        report()
    for name, params in sorted(attacks, key=lambda a: -attack_cost(a[0], spec, data_dir)):
        if attack_key(name, spec) in known:
            continue
        _evaluations(run_trial(short, data_dir=data_dir, attacks=[(name, params)]), spec, costs)
        report()


def _add_training(
    spec: TrialSpec,
    t1: float,
    pretraining: float,
    epochs: int,
    costs: Costs,
    data_dir: str | None,
    pretrain: bool,
) -> None:
    """Add the class's (fixed, per-epoch) seconds from ``t1``, its one-epoch run, and a run
    long enough to time an epoch; ``pretraining``: its pretraining epochs' seconds, kept
    apart (``parts`` divides them among parties that pretrain side by side)."""
    key = train_key(spec)
    if not epochs:
        costs.add_training(key, t1, 0.0, "probe", pretrain=pretraining)
        return
    n = min(epochs, max(2, int(PROBE_LONG_S / max(t1, 1e-3))))
    tn, _ = _timed(run_trial(_at(spec, n, pretrain), data_dir=data_dir))
    per_epoch = max(tn - t1, 0.0) / (n - 1) if n > 1 else t1
    costs.add_training(key, max(0.0, t1 - per_epoch), per_epoch, "probe", pretrain=pretraining)


def parts(
    training: Training, costs: Costs, remote: bool, parallel: float = 1.0
) -> tuple[float | None, list[tuple[str, float | None]]]:
    """(training seconds, or None if not measured; per attack record it writes, its name
    and measured seconds or None). The records are its kind's (``TrialKind.evaluations``:
    FedHSSL's MC runs twice); an adaptive attacker's include its tuning runs. A probe's
    pretraining (one process) counts ``parallel`` times faster: parties on actors with a
    CPU each pretrain side by side (ssl_iso: adult's local SimSiam 54 s in one process,
    28 s on the actors)."""
    spec = training.spec
    train = None
    key = train_key(spec)
    got = costs.training(key)
    if got is not None:
        fixed, per_epoch = got
        train = fixed + per_epoch * int(spec.epochs or 0) + costs.pretraining(key) / parallel
        train *= trainings(spec)  # an adapted training-time attacker trains once per trial
        if remote and costs.source.get(f"train:{key}") == "probe":
            train += cost(training, remote=True).transport  # actor round trips a probe skips
    # an adapted evaluation's runs past the default: each trial on each fold, and the choice
    # (``tuning.runs``, as the cost model and ``costs.tuning_runs`` count them)
    tuning = {
        name: runs(params) - 1
        for name, params in training.attacks
        if split_adapt(params)[1] is not None
    }
    evals: list[tuple[str, float | None]] = []
    for name in kind_of(spec).evaluations(spec, [n for n, _ in training.attacks]):
        seconds = costs.evaluation(attack_key(name, spec))
        if seconds is not None and name in tuning:  # its tuning: per run as measured
            per_run = costs.evaluation(attack_key(adapted_label(name), spec))
            seconds += (seconds if per_run is None else per_run) * tuning[name]
        evals.append((name, seconds))
    return train, evals


def seconds_of(training: Training, costs: Costs, remote: bool) -> tuple[float, float] | None:
    """(training seconds, attack seconds) from measured parts; None if any part is not."""
    train, evals = parts(training, costs, remote)
    if train is None or any(seconds is None for _, seconds in evals):
        return None
    return train, sum(seconds or 0.0 for _, seconds in evals)


def levels(t: Training) -> tuple[tuple[str, ...], ...]:
    """Trainings that cost alike against the cost model, nearest first: one kind, dataset,
    SSL variant, protocol and defense (a *family*); the same on any dataset; the kind and
    variant; the kind. The probe measures one class per variant, then per family; the
    cost model of an unmeasured class is scaled by its nearest level's measured ones."""
    spec = t.spec
    kind = kind_of(spec).name
    variant, shape = spec.ssl_variant, (spec.protocol, spec.defense)
    return (kind, spec.dataset, variant, *shape), (kind, variant, *shape), (kind, variant), (kind,)


def to_probe(trainings: list[Training], costs: Costs, remote: bool) -> list[Training]:
    """One training per class whose parts are not measured: first one class of each kind
    and variant, then of each family (the largest first), then the rest by the trainings
    they cover, so that a probe cut short by its budget has reached the most kinds of cost."""
    groups: dict[tuple[str, ...], list[Training]] = {}
    for t in trainings:
        if seconds_of(t, costs, remote) is not None:
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
    picked: list[Training] = []
    seen: set[str] = set()
    for group in order:
        spec = group[0].spec
        needs = {train_key(spec), *(attack_key(a, spec) for a, _ in group[0].attacks)}
        if needs <= seen:
            continue  # measured by an earlier pick
        seen |= needs
        picked.append(group[0])
    return picked


def _probe_child(
    trainings: list[Training],
    data_dir: str | None,
    known: frozenset[str],
    conn: Connection,
    verbose: bool = False,
) -> None:
    """In a child process: probe each training; send each part's costs as it is measured
    (``("part", train, attack)``), then ``("class",)`` after each training. A part one
    class measured is not timed again for the next. ``verbose``: the parent's
    ``--verbose`` (a spawned child starts quiet's settings afresh; a tree class starts Ray)."""
    from sweep_engine import quiet

    quiet.configure(verbose)
    seen = set(known)
    for t in trainings:
        got = Costs(path=Path(os.devnull))

        def report(got: Costs = got) -> None:
            conn.send(("part", got.train, got.attack))
            seen.update(got.train, got.attack)
            got.train, got.attack = {}, {}

        try:
            _probe(t, got, data_dir, report, seen)
        except (ConfigError, RuntimeError, ValueError):
            pass  # the scaled cost model in the parent
        except Exception as err:  # any other: one line, not a traceback that ends the probe
            print(f"warning: {_failed(t, err)}", file=sys.stderr, flush=True)
        report()
        conn.send(("class",))
    conn.close()


def _failed(t: Training, err: Exception) -> str:
    """Why the probe of ``t``'s class measured nothing, in one line: the estimate carries on
    with the scaled cost model, and the rest of the classes are still probed."""
    spec = t.spec
    what = [spec.dataset, kind_of(spec).name, spec.ssl_variant, spec.model or "none"]
    line = f"{type(err).__name__}: {err}".splitlines()[0]
    name = " ".join(w for w in what if w != "none")
    return f"the probe of a {name} training failed ({line}); its cost model stands in"


def _poll(conn: Connection, deadline: float) -> bool:
    """Whether the child sent something (or ended) before ``deadline``. Why in slices of
    ``POLL_S``: ``Connection.poll`` turns its timeout into whole milliseconds, so
    ``--estimate``'s infinite budget (or a year's) raised OverflowError before anything was
    probed (issue 63)."""
    while (left := deadline - time.perf_counter()) > 0:
        if conn.poll(min(left, POLL_S)):
            return True
    return False


def probe_in_child(
    trainings: list[Training], costs: Costs, data_dir: str | None, budget_s: float, remote: bool
) -> int:
    """Probe the unmeasured classes of ``trainings`` in a child process and add what it
    measured to ``costs``; the child is stopped once ``budget_s`` has passed, mid-probe if
    need be (``inf``, as ``--estimate`` asks: once every class is probed). Why a child: one
    probe of an SSL class can take a minute (pretraining), and a budget checked between
    probes let ``--dry-run`` of ssl.yaml take 2.5 min against its 30 s. Each part (a
    training, an attack) counts as soon as it is measured, so a class the budget cuts short
    still informs the estimate. Returns the classes finished."""
    import multiprocessing

    picked = to_probe(trainings, costs, remote) if budget_s > 0 else []  # 0 or NaN: none
    if not picked:
        return 0
    deadline = time.perf_counter() + budget_s  # inf for --estimate: no deadline
    ctx = multiprocessing.get_context("spawn")  # fork after torch's threads can hang
    here, there = ctx.Pipe(duplex=False)
    known = frozenset(
        [k for k in costs.train if costs.training(k) is not None]
        + [k for k in costs.attack if costs.evaluation(k) is not None]
    )  # a class a budget cut short last time: its measured parts are not timed again
    from sweep_engine import quiet

    args = (picked, data_dir, known, there, quiet.VERBOSE)
    child = ctx.Process(target=_probe_child, args=args, daemon=True)
    child.start()
    there.close()
    done = 0
    try:
        while done < len(picked) and _poll(here, deadline):
            try:
                message = here.recv()
            except EOFError:
                break  # the child died: the rest by the scaled cost model
            if message[0] == "class":
                done += 1
                continue
            _, train, attack = message
            for key, slot in train.items():
                pre = slot.get("pretrain") or [0.0] * len(slot["fixed"])
                for fixed, per_epoch, p in zip(slot["fixed"], slot["epoch"], pre, strict=True):
                    costs.add_training(key, fixed, per_epoch, "probe", pretrain=p)
            for key, seconds in attack.items():
                for one in seconds:
                    costs.add_evaluation(key, one, "probe")
    finally:
        if child.is_alive():
            child.kill()
        child.join(timeout=5)
        here.close()
    return done
