"""A trial kind: which specs it runs, how it checks them and how it turns one into records.

Why a registry of small objects: the planner, the CLI and ``run_trial`` ask the same
questions of every spec (is it valid? can it run on this data? which defenses and attacks
can it host?) and the answers live with the code that runs the kind, in one file per kind
(``nn.py``, ``hssl.py``, ``fedcvt.py``, ``tree.py``). ``run_trial`` has no string
dispatch: it asks ``kind_of(spec)`` and calls the kind.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import ClassVar

from trainables.data import Dataset
from trainables.jobs import AttackSpec, Job, Outcome
from trainables.records import Record
from trainables.schedule import STACKED, Schedule
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement


class TrialKind:
    """Base: subclasses set ``name`` and fill the hooks; one instance is registered."""

    name: ClassVar[str] = "base"
    # the ``ssl_variant`` names this kind serves (``none`` for plain VFL)
    ssl_variants: ClassVar[tuple[str, ...]] = ()
    # True when ``model_params`` are options of this kind (else a spec must leave them empty)
    takes_model_params: ClassVar[bool] = False
    # True when a pack of this kind opens its ``actors(spec)`` party actors first, as one
    # set: its Tune trial then starts them before it imports torch (``sweep_engine/entry.py``)
    prestart: ClassVar[bool] = False
    # True when a training of this kind holds out ``val_ratio`` of its labeled rows and
    # records ``val_mp`` on them; a kind without it refuses ``val_ratio`` > 0 (``refusal``)
    validates: ClassVar[bool] = False
    # True when its trainings follow VFLAIR's training-procedure options (``lr_decay``,
    # ``shuffle``); a kind without it refuses them set away from their defaults
    trains_procedure_options: ClassVar[bool] = False

    def takes(self, spec: TrialSpec) -> bool:
        """Whether ``spec`` is this kind's (exactly one registered kind takes a valid spec)."""
        return spec.ssl_variant in self.ssl_variants

    def actors(self, spec: TrialSpec) -> int:
        """Party actors a trial of ``spec`` holds at once, each reserving ``cpu_per_party``
        (the planner sizes the trial's placement group from it). Coordinators that reserve
        nothing (``Placement.coordinator``) are not counted."""
        return spec.n_parties

    def check(self, spec: TrialSpec) -> None:
        """ConfigError for names or options this kind cannot run (no data is read)."""

    def validation_refusal(self, spec: TrialSpec) -> str | None:
        """Why ``spec``'s ``val_ratio`` or training-procedure options (``lr_decay``,
        ``shuffle``) cannot be honoured by this kind, or None."""
        if spec.val_ratio > 0 and not self.validates:
            return (
                f"val_ratio={spec.val_ratio}: trial kind {self.name!r} records no validation "
                "MP yet (only plain NN VFL does); leave val_ratio at 0 for it"
            )
        if not self.trains_procedure_options:
            if spec.procedure != "standard":
                return (
                    f"procedure={spec.procedure!r}: trial kind {self.name!r} trains with its "
                    "own procedure (only plain NN VFL follows VFLAIR's); leave it at 'standard'"
                )
            for key, value, default in (
                ("lr_decay", spec.lr_decay, "none"),
                ("shuffle", spec.shuffle, True),
                ("weight_init", spec.weight_init, "torch"),
            ):
                if value != default:
                    return (
                        f"{key}={value!r}: trial kind {self.name!r} trains with its own "
                        f"schedule (only plain NN VFL follows {key}); leave it at {default!r}"
                    )
        return None

    def incompatibility(self, spec: TrialSpec, data_dir: str | Path | None) -> str | None:
        """Why ``spec`` cannot run or cannot mean what it says on its data (the planner drops
        the cell with this reason), or None. A missing file raises MissingDataError."""
        return None

    def attack_incompatibility(self, spec: TrialSpec, attack: str) -> str | None:
        """Why inference-time ``attack`` cannot be evaluated on ``spec``, or None."""
        from trainables.attacks import ATTACKS

        family = ATTACKS.get(attack).family
        if family != "nn":
            return f"attack {attack!r} reads {family} messages; trial kind {self.name!r} has none"
        return None

    def evaluations(self, spec: TrialSpec, names: Sequence[str]) -> list[str]:
        """The attack records a training of ``spec`` writes for the attacks ``names`` asks
        for: each once here; a kind that evaluates one at several stages says so (the
        estimate counts every evaluation that runs)."""
        return list(names)

    def run(
        self, spec: TrialSpec, ds: Dataset, placement: Placement, attacks: Sequence[AttackSpec]
    ) -> list[Record]:
        """Train and evaluate: the clean record (unless a training-time attack runs), then one
        record per attack. ``sweep`` / ``trial_id`` are set by ``run_trial``."""
        raise NotImplementedError

    def run_many(
        self, jobs: Sequence[Job], ds: Dataset, placement: Placement, schedule: Schedule = STACKED
    ) -> Iterator[tuple[int, Outcome]]:
        """Run a pack of jobs on ``ds`` (one dataset, one shape), yielding ``(index, outcome)``
        as each finishes. The base runs them one after another on the same placement (its
        warm actors), whatever else ``schedule`` says (it calls its ``stack_done`` after
        each); a kind may advance several at once as
        ``schedule`` allows (``vfl/vectorized.py``) as long as each job's records equal
        what ``run`` gives it."""
        from trainables.defenses.applied import DefenseNeverApplied
        from trainables.errors import ConfigError

        for i, job in enumerate(jobs):
            try:
                yield i, self.run(job.spec, ds, placement, job.attacks)
            except (ConfigError, DefenseNeverApplied) as err:
                yield i, err
            schedule.done_stack()  # each training is a stack of its own here
