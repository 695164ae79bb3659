"""One trial: a TrialSpec in, frozen Records out, whatever its kind.

``run_trial`` asks ``kind_of(spec)`` (``trainables/kinds/``) which code runs the spec,
loads the dataset once and hands both, with the ``Placement`` of the parties, to the kind.
``check_names`` and ``incompatibility`` are the planner's questions, answered by the same
kind. The NN helpers (``prepare_parties``, ``train_local_parties``, ...) live in
``trainables/vfl/training.py`` and are re-exported here for tests and benchmarks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from trainables.data import load_dataset
from trainables.errors import ConfigError
from trainables.jobs import AttackSpec, Job, Outcome
from trainables.kinds import kind_of
from trainables.kinds.base import TrialKind
from trainables.records import Record
from trainables.schedule import STACKED, Schedule
from trainables.spec import TrialSpec
from trainables.transport.placement import LOCAL, TRANSPORTS, Placement
from trainables.vfl.training import (
    PreparedTrial,
    attacks_of,
    prepare_parties,
    train_local,
    train_local_parties,
    train_prepared,
)


def run_trial(
    spec: TrialSpec,
    placement: Placement = LOCAL,
    *,
    data_dir: str | Path | None = None,
    sweep: str = "",
    trial_id: str = "",
    attacks: Sequence[AttackSpec] = (),
    schedule: Schedule = STACKED,
) -> list[Record]:
    """Run ``spec`` to completion: the clean record (``attack='none'``) and one per attack.

    Inference-time ``attacks`` share this training; a spec with a ``train_attack`` gets
    only that attack's record, whose MP is the MP under attack. A pack of one
    (``run_many``), so that a kind that reads ``schedule`` reads it here too (its listener:
    early stopping).
    """
    kind = _checked(spec, attacks)
    ds = load_dataset(spec.dataset, data_dir, **spec.dataset_params)
    ((_, outcome),) = kind.run_many([Job(spec, tuple(attacks))], ds, placement, schedule)
    if isinstance(outcome, BaseException):
        raise outcome
    return _with_ids(outcome, sweep, trial_id or spec.config_hash)


def _checked(spec: TrialSpec, attacks: Sequence[AttackSpec]) -> TrialKind:
    """The spec's kind, after its checks: ConfigError for bad names or an attack the kind
    refuses (the planner drops those cells; a direct call must not run them either)."""
    kind = kind_of(spec)
    kind.check(spec)
    reason = kind.validation_refusal(spec)
    if reason is not None:
        raise ConfigError(reason)
    for name, _ in attacks:
        reason = kind.attack_incompatibility(spec, name)
        if reason is not None:
            raise ConfigError(reason)
    return kind


def _with_ids(records: list[Record], sweep: str, trial_id: str) -> list[Record]:
    return [dataclasses.replace(r, sweep=sweep, trial_id=trial_id) for r in records]


def run_pack(
    jobs: Sequence[Job],
    trial_ids: Sequence[str],
    placement: Placement = LOCAL,
    *,
    data_dir: str | Path | None = None,
    sweep: str = "",
    schedule: Schedule = STACKED,
) -> Iterator[tuple[int, Outcome]]:
    """Run a pack: jobs of one kind on one dataset, on one placement (its warm actors),
    yielding ``(index, records or deterministic error)`` as each finishes (``run_many``).

    The dataset is loaded once for the pack. A fault (a lost actor) is raised; the caller
    re-runs the jobs not yet yielded. Records equal ``run_trial``'s for the same job.
    """
    if not jobs:
        return
    first = jobs[0].spec
    key = (first.dataset, first.dataset_params)
    kind, todo = None, []
    for i, job in enumerate(jobs):
        if (job.spec.dataset, job.spec.dataset_params) != key:
            raise ValueError(f"a pack holds one dataset; job {i} has {job.spec.dataset!r}")
        try:
            job_kind = _checked(job.spec, job.attacks)
        except ConfigError as err:
            yield i, err
            continue
        if kind is not None and job_kind is not kind:
            raise ValueError(f"a pack holds one trial kind; job {i} is {job_kind.name!r}")
        kind = job_kind
        todo.append(i)
    if kind is None:
        return
    ds = load_dataset(first.dataset, data_dir, **first.dataset_params)
    for j, outcome in kind.run_many([jobs[i] for i in todo], ds, placement, schedule):
        i = todo[j]
        if isinstance(outcome, Exception):
            yield i, outcome
        else:
            yield i, _with_ids(outcome, sweep, trial_ids[i] or jobs[i].spec.config_hash)


def summarize(records: list[Record]) -> dict[str, object]:
    """The JSON line ``python -m trainables.run`` prints."""
    clean = records[0]
    out = {k: v for k, v in clean.to_dict().items() if k not in ("spec_json", "created_at")}
    out["mp"] = None if clean.mp is None else float(np.round(clean.mp, 6))
    return out


def check_names(spec: TrialSpec) -> None:
    """Raise ConfigError if a name in ``spec`` is not registered or its parameters are bad."""
    kind_of(spec).check(spec)


def incompatibility(spec: TrialSpec, data_dir: str | Path | None = None) -> str | None:
    """Why ``spec`` cannot run on its dataset (too many parties, too few rows) or cannot
    mean what it says (a defense with nothing to act on in this trial), or None.

    A missing data file is not an incompatibility: it raises MissingDataError.
    """
    kind = kind_of(spec)
    return kind.validation_refusal(spec) or kind.incompatibility(spec, data_dir)


def attack_incompatibility(spec: TrialSpec, attack: str) -> str | None:
    """Why inference-time ``attack`` cannot be evaluated on ``spec``'s kind, or None."""
    return kind_of(spec).attack_incompatibility(spec, attack)


def actor_count(spec: TrialSpec) -> int:
    """How many party bundles a trial of ``spec`` needs (``TrialKind.actors``)."""
    return kind_of(spec).actors(spec)


def prestart_count(spec: TrialSpec) -> int:
    """Party actors a trial of ``spec`` may start before it imports torch (its kind opens
    them first, as one set: ``TrialKind.prestart``); 0 for kinds that open others first."""
    kind = kind_of(spec)
    return kind.actors(spec) if kind.prestart else 0


def takes_model_params(spec: TrialSpec) -> bool:
    """Whether ``spec``'s kind reads ``model_params`` (trees, SSL variants) or refuses them."""
    try:
        return kind_of(spec).takes_model_params
    except ConfigError:  # an unknown name: reported by check_names
        return False


__all__ = [
    "TRANSPORTS",
    "Job",
    "Placement",
    "PreparedTrial",
    "actor_count",
    "attack_incompatibility",
    "attacks_of",
    "check_names",
    "incompatibility",
    "prepare_parties",
    "run_pack",
    "run_trial",
    "summarize",
    "takes_model_params",
    "train_local",
    "train_local_parties",
    "train_prepared",
]
