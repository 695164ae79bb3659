"""Plain NN VFL (``ssl_variant: none``): aggVFL / splitVFL under any registered protocol.

The kind is the thin part: which specs it takes, how it checks them, and how a pack runs.
The training itself is the NN-VFL library below the kinds (``trainables/vfl/``):
``vectorized.py``: every training that stacks, a pack's or a lone one, as a stack of
trainings; ``prepare_parties``, ``train_prepared`` and ``records_of`` for one that does not.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from trainables.data import DATASETS, Dataset, load_dataset, split_refusal
from trainables.defenses.stack import DefenseStack
from trainables.jobs import AttackSpec, Job, Outcome
from trainables.kinds.base import TrialKind
from trainables.models import BOTTOMS
from trainables.protocols import PROTOCOLS
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.vfl.training import (
    attacks_of,
    prepare_parties,
    records_of,
    train_prepared,
)
from trainables.vfl.vectorized import DETERMINISTIC, run_vectorized


def plain_nn(specs: Sequence[Any]) -> bool:
    """Whether every spec is a plain NN training and all have one party count: what a
    vectorized pack needs of its trainings (the planner's pack sizing asks)."""
    return all(NNKind().takes(spec) for spec in specs) and len({s.n_parties for s in specs}) == 1


class NNKind(TrialKind):
    """aggVFL / splitVFL with NN bottoms; every defense, attack and protocol applies."""

    name = "nn"
    ssl_variants = ("none",)
    prestart = True  # every pack path opens its n_parties actors first (open_parties)
    validates = True  # val_ratio: validation rows, val_mp (``vfl/training.py``)

    def takes(self, spec: TrialSpec) -> bool:
        return spec.ssl_variant == "none" and str(spec.model) in BOTTOMS

    def check(self, spec: TrialSpec) -> None:
        DATASETS.get(spec.dataset)
        BOTTOMS.get(str(spec.model))
        PROTOCOLS.create(spec.protocol, **spec.protocol_params)
        DefenseStack.compile(spec)

    def incompatibility(self, spec: TrialSpec, data_dir: str | Path | None) -> str | None:
        reason = DefenseStack.compile(spec).incompatibility()  # nothing to act on here
        if reason is not None:
            return reason
        return split_refusal(spec, load_dataset(spec.dataset, data_dir, **spec.dataset_params))

    def run(
        self, spec: TrialSpec, ds: Dataset, placement: Placement, attacks: Sequence[AttackSpec]
    ) -> list[Record]:
        """One training: a stack of one (``vfl/vectorized.py``, the code every pack runs)
        where it stacks and the placement vectorizes, else the party objects alone."""
        if not placement.vectorize:
            return self.run_alone(spec, ds, placement, attacks)
        job = Job(spec, tuple(attacks))
        ((_, outcome),) = run_vectorized([job], ds, placement, self.run_unstacked)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def run_alone(
        self, spec: TrialSpec, ds: Dataset, placement: Placement, attacks: Sequence[AttackSpec]
    ) -> list[Record]:
        """One training on party objects (``Party``, ``ActiveParty``): what does not stack
        (a bottom that is not a plain MLP, or starts pretrained)."""
        evaluated = attacks_of(spec, attacks)
        prepared = prepare_parties(spec, ds, evaluated)
        trained = train_prepared(prepared, int(spec.epochs), placement, bool(evaluated))  # type: ignore[arg-type]
        return records_of(
            spec, trained, prepared.n_labeled, evaluated,
            y_test=prepared.y_test, metric=prepared.metric, y_val=prepared.y_val,
        )  # fmt: skip

    def run_many(
        self, jobs: Sequence[Job], ds: Dataset, placement: Placement
    ) -> Iterator[tuple[int, Outcome]]:
        """Trainings that stack run vectorized (``vfl/vectorized.py``: one batched
        step per round for all of them; a lone training is a stack of one; records equal
        one-at-a-time's up to float summation order, and only those stacked with others
        say ``vectorized``) unless the placement turns it off; the rest run unstacked
        (``run_unstacked``)."""
        if placement.vectorize:
            yield from run_vectorized(jobs, ds, placement, self.run_unstacked)
        else:
            yield from self.run_unstacked(jobs, ds, placement)

    def run_unstacked(
        self, jobs: Sequence[Job], ds: Dataset, placement: Placement
    ) -> Iterator[tuple[int, Outcome]]:
        """One training after another on party objects (``run_alone``)."""
        for i, job in enumerate(jobs):
            try:
                yield i, self.run_alone(job.spec, ds, placement, job.attacks)
            except DETERMINISTIC as err:
                yield i, err
