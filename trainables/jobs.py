"""What a pack of trainings is made of: jobs in, outcomes out (below every kind).

Why its own module: a kind's ``run_many``, the NN-VFL library's packed runners
(``vfl/vectorized.py``) and the SSL trials all speak in these types;
keeping them here lets the library sit below ``kinds/`` with no import back up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainables.records import Record
from trainables.spec import TrialSpec

AttackSpec = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Job:
    """One training of a pack: its spec and the inference-time attacks it evaluates."""

    spec: TrialSpec
    attacks: tuple[AttackSpec, ...] = field(default_factory=tuple)
    # a trial training of an adapted training-time attack (``tuning_trained``): its record
    # carries its attacker's own scores
    tuned: bool = False
    # training-time attacks whose guess is scored on this (unattacked) training as another
    # job's baseline (``vfl/twins.py``): never installed; their records are not its own
    baselines: tuple[AttackSpec, ...] = ()


# What ``run_many`` yields per job: its records, or the deterministic error (a ConfigError
# or DefenseNeverApplied) that the same spec would raise every time. Faults (a lost actor)
# are raised, not yielded: the caller retries the jobs not yet yielded.
Outcome = list[Record] | Exception
