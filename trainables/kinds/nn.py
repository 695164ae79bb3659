"""Plain NN VFL (``ssl_variant: none``): aggVFL / splitVFL under any registered protocol.

The kind is the thin part: which specs it takes, how it checks them, and how a pack runs.
The training itself is the NN-VFL library below the kinds (``trainables/vfl/``):
``vectorized.py``: every training, a pack's together where they stack, the others as
stacks of one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from trainables.data import DATASETS, Dataset, load_dataset, split_refusal
from trainables.defenses.spec_defenses import SpecDefenses
from trainables.jobs import AttackSpec, Job, Outcome
from trainables.kinds.base import TrialKind
from trainables.models import BOTTOMS
from trainables.protocols import PROTOCOLS
from trainables.records import Record
from trainables.schedule import STACKED, Schedule
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.vfl.vectorized import run_vectorized


def plain_nn(specs: Sequence[TrialSpec]) -> bool:
    """Whether every spec is a plain NN training and all have one party count: what a
    vectorized pack needs of its trainings (the planner's pack sizing asks)."""
    return all(NNKind().takes(spec) for spec in specs) and len({s.n_parties for s in specs}) == 1


class NNKind(TrialKind):
    """aggVFL / splitVFL with NN bottoms; every defense, attack and protocol applies."""

    name = "nn"
    ssl_variants = ("none",)
    prestart = True  # every pack path opens its n_parties actors first (open_parties)
    validates = True  # val_ratio: validation rows, val_mp (``vfl/training.py``)
    trains_procedure_options = True  # lr_decay, shuffle: its stacks follow them

    def takes(self, spec: TrialSpec) -> bool:
        return spec.ssl_variant == "none" and str(spec.model) in BOTTOMS

    def check(self, spec: TrialSpec) -> None:
        DATASETS.get(spec.dataset)
        BOTTOMS.get(str(spec.model))
        PROTOCOLS.create(spec.protocol, **spec.protocol_params)
        SpecDefenses.compile(spec)

    def incompatibility(self, spec: TrialSpec, data_dir: str | Path | None) -> str | None:
        reason = SpecDefenses.compile(spec).incompatibility()  # nothing to act on here
        if reason is not None:
            return reason
        return split_refusal(spec, load_dataset(spec.dataset, data_dir, **spec.dataset_params))

    def run(
        self, spec: TrialSpec, ds: Dataset, placement: Placement, attacks: Sequence[AttackSpec]
    ) -> list[Record]:
        """One training: a stack of one (``vfl/vectorized.py``, the code every pack runs)."""
        job = Job(spec, tuple(attacks))
        ((_, outcome),) = run_vectorized([job], ds, placement, STACKED)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def run_many(
        self, jobs: Sequence[Job], ds: Dataset, placement: Placement, schedule: Schedule = STACKED
    ) -> Iterator[tuple[int, Outcome]]:
        """Trainings that stack together run as one stacked training (``vfl/vectorized.py``:
        one batched step per round for all of them; each record equal to the training's
        alone up to float summation order, those stacked with others saying
        ``vectorized``) unless the schedule turns it off; every other one as a stack of
        one."""
        yield from run_vectorized(jobs, ds, placement, schedule)
