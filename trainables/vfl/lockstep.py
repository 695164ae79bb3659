"""A pack of NN trainings in lockstep: one actor call per round advances several of them.

Why: on the ``ray`` transport a tiny training is dominated by actor round trips (~6 ms a
round), not arithmetic. ``run_lockstep`` opens the pack's parties once, as stacks (party
k of every training in the actor of party k, ``transport/hub.py``), and runs every
training's unchanged ``Protocol.run`` there, coalescing each round's calls into one
message per passive actor per ``GROUP_SIZE`` trainings. Each training's records equal
``NNKind.run``'s for its job (timing fields aside): same arithmetic in the same order,
rounds and bytes counted per training by its own transport; attacks run per training on
its own parties afterwards.

``NNKind.run_many`` uses it where ``eligible`` says so; the contract is ``run_many``'s:
deterministic errors (ConfigError, DefenseNeverApplied) are yielded as values, faults
raised (after the trainings that did finish are yielded).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from trainables.data import Dataset
from trainables.defenses.applied import DefenseNeverApplied
from trainables.errors import ConfigError
from trainables.jobs import AttackSpec, Job, Outcome
from trainables.transport.group import PartyGroup
from trainables.transport.hub import LockstepRun, StackInit
from trainables.transport.open import open_parties
from trainables.transport.placement import Placement
from trainables.vfl.training import PreparedTrial, Trained, attacks_of, prepare_parties
from trainables.vfl.training import records_of as nn_records_of

DETERMINISTIC = (ConfigError, DefenseNeverApplied)  # the same spec raises them every time
# The most party data (features of every party) one lockstep run holds (``run_lockstep``)
STACK_BYTES = 256 * 2**20
GROUP_SIZE = 4  # trainings per coalesced call (``groups_for``)


def eligible(jobs: Sequence[Job], placement: Placement) -> bool:
    """Whether ``run_lockstep`` should run ``jobs`` (plain NN trainings: the caller,
    ``NNKind.run_many``, hands only those): at least two with the same number of parties,
    on actors (in one process a round costs no round trip, so lockstep would gain nothing
    there)."""
    return placement.remote and len(jobs) >= 2 and len({job.spec.n_parties for job in jobs}) == 1


def groups_for(k: int, size: int = GROUP_SIZE) -> int:
    """Coalesced calls per round for ``k`` trainings (``Hub.groups``): one per ``size``
    trainings, so the passive parties compute one group while the active party computes
    the next (``benchmarks.lockstep --group-sizes``)."""
    return max(1, k // size)


@dataclass(frozen=True)
class _Prepared:
    """One job ready to train: its parties' inits and the attacks it evaluates."""

    index: int  # in ``jobs``
    prepared: PreparedTrial
    attacks: list[AttackSpec]

    @property
    def nbytes(self) -> int:
        """The party data this training holds (features of every party)."""
        return sum(i.X_train.nbytes + i.X_test.nbytes for i in self.prepared.inits)


def run_lockstep(
    jobs: Sequence[Job], ds: Dataset, placement: Placement, *, group_size: int = 0
) -> Iterator[tuple[int, Outcome]]:
    """Train ``jobs`` (one dataset, one party count) together and yield ``(index, records
    or deterministic error)`` per job; a fault is raised once the rest are yielded.

    Jobs are prepared as they are reached and trained in runs whose party data stay under
    ``STACK_BYTES`` (a stack holds every training's rows at once, one at a time holds one
    training's): a pack of big trainings runs as several lockstep runs on the same actors.
    ``group_size``: trainings per coalesced call (0: ``GROUP_SIZE``; benchmarks vary it).
    """
    faults: list[BaseException] = []
    chunk: list[_Prepared] = []
    for i, job in enumerate(jobs):
        evaluated = attacks_of(job.spec, job.attacks)
        try:
            item = _Prepared(i, prepare_parties(job.spec, ds, evaluated), evaluated)
        except DETERMINISTIC as err:
            yield i, err
            continue
        if chunk and sum(c.nbytes for c in chunk) + item.nbytes > STACK_BYTES:
            yield from _run_chunk(jobs, chunk, placement, faults, group_size)
            chunk = []
        chunk.append(item)
    if chunk:
        yield from _run_chunk(jobs, chunk, placement, faults, group_size)
    if faults:
        raise faults[0]


def _run_chunk(
    jobs: Sequence[Job],
    chunk: Sequence[_Prepared],
    placement: Placement,
    faults: list[BaseException],
    group_size: int,
) -> Iterator[tuple[int, Outcome]]:
    """Train ``chunk`` in lockstep; yield each job's outcome, keep faults in ``faults``."""
    for item, (trained, error) in zip(
        chunk, _train_stacked(jobs, chunk, placement, group_size), strict=True
    ):
        if isinstance(error, DETERMINISTIC):
            yield item.index, error
        elif error is not None:
            faults.append(error)
        else:
            try:
                yield item.index, _records(jobs[item.index], item, trained)
            except DETERMINISTIC as err:
                yield item.index, err


def _records(job: Job, item: _Prepared, trained: Trained | None) -> list[Any]:
    assert trained is not None
    prepared = item.prepared
    return nn_records_of(
        job.spec, trained, prepared.n_labeled, item.attacks,
        y_test=prepared.y_test, metric=prepared.metric,
    )  # fmt: skip


def _train_stacked(
    jobs: Sequence[Job], ready: Sequence[_Prepared], placement: Placement, group_size: int
) -> list[tuple[Trained | None, BaseException | None]]:
    """Every ready job trained on one set of stacked parties: per job, what it left or
    the error its build or training raised. A lost actor is raised."""
    n_parties = len(ready[0].prepared.inits)
    stacks = [StackInit(tuple(r.prepared.inits[k] for r in ready)) for k in range(n_parties)]
    with open_parties(stacks, placement) as group:
        errors, slots = stack_errors(group, len(ready))
        run = LockstepRun(
            protocols=[r.prepared.protocol for r in ready],
            epochs=[int(jobs[r.index].spec.epochs) for r in ready],  # type: ignore[arg-type]
            targets=[r.prepared.target_mp for r in ready],
            slots=slots,
            groups=groups_for(len(slots), group_size or GROUP_SIZE),
        )
        results = group.train(run, 0) if slots else [None] * len(ready)
        for s in slots:
            if isinstance(results[s], BaseException):
                errors[s] = results[s]
        return collect_trained(group, ready, results, errors)


def stack_errors(group: PartyGroup, n: int) -> tuple[dict[int, BaseException], list[int]]:
    """The slots whose build raised at some party (the first error each), and the rest."""
    errors: dict[int, BaseException] = {}
    for per_stack in group.call_all("build_errors"):
        for slot, err in per_stack.items():
            errors.setdefault(slot, err)
    return errors, [s for s in range(n) if s not in errors]


def collect_trained(
    group: PartyGroup,
    ready: Sequence[_Prepared],
    results: list[Any],
    errors: dict[int, BaseException],
) -> list[tuple[Trained | None, BaseException | None]]:
    """Per slot: its result, its parties (copies, only where it evaluates attacks) and
    each party's defense reports, read back before the stacks are emptied."""
    trained = [s for s in range(len(ready)) if s not in errors]
    reports = group.call_all("defense_applied")  # per party: one report per slot
    attacked = [s for s in trained if ready[s].attacks]
    parties = group.call_all("parties_of", attacked) if attacked else []
    out: list[tuple[Trained | None, BaseException | None]] = []
    for s in range(len(ready)):
        if s in errors:
            out.append((None, errors[s]))
            continue
        own = [stack[attacked.index(s)] for stack in parties] if s in attacked else []
        defenses = ready[s].prepared.defenses
        out.append((Trained(results[s], own, [r[s] for r in reports], defenses), None))
    return out
