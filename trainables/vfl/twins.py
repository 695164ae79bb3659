"""Unattacked twins: the no-information baseline of a training-time attack whose guess a
model may follow without having learned the attack (``AttackInfo.unattacked_baseline``).

Why: LRB stamps a trigger (a few of its columns at their training maximum) on test rows
and counts the rows the backdoored model sends to the target. On breast_cancer a model
trained *without* LRB sends every such row there too (``benchmarks.lrb_rows``): the
trigger alone does it, and the backdoored model's untriggered rows, the only baseline
its own training has, say nothing about that. The baseline is the same guess on the same
spec trained without the attack, same seed: same rows, same trigger.

That twin is usually a training the jobs already hold (the cell's clean training, which
runs its inference-time attacks; a pack holds one shape's trainings): it scores the
attack's guess beside its own attacks (``Job.baselines``: never installed, never
recorded). Where the jobs do not hold it, a twin trains for it alone (the plan's
estimate does not count it). The attack's record then has ``ap_chance`` = the twin's
AP, the advantage over it and an unpaired error. A FedHSSL-family trial fine-tunes its
twin from the same pretrained encoders (``ssl/hssl/trial.py``). Through the harness
alone they stay NaN (``harness.outcome_of``): unknown, not the backdoored model's own.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Iterator, Sequence

from trainables.attacks import ATTACKS
from trainables.attacks.chance import at_least_wilson, gain
from trainables.jobs import AttackSpec, Job, Outcome
from trainables.records import Record
from trainables.sampling import accuracy_se
from trainables.spec import TrialSpec


def baseline_attack(job: Job) -> AttackSpec | None:
    """The training-time attack of ``job`` whose baseline an unattacked twin gives (an
    adapted attacker's trials too: each with its own setting, on the one twin)."""
    spec = job.spec
    if spec.train_attack == "none":
        return None
    if not ATTACKS.get(spec.train_attack).info.unattacked_baseline:
        return None
    return spec.train_attack, dict(spec.train_attack_params)


def unattacked(spec: TrialSpec) -> TrialSpec:
    """``spec`` without its training-time attack: its twin."""
    bare = {"train_attack": "none", "train_attack_params": {}, "train_attack_adapt": {}}
    return TrialSpec.build(**{**spec.model_dump(), **bare})


def with_baseline(record: Record, chance: float | None) -> Record:
    """``record`` (the attack's, on the attacked training) beside ``chance``, the AP of
    its guess on the twin, over the same rows; the error unpaired (the two trainings'
    rows move together, so this overstates it), each side's no smaller than its Wilson
    error (``at_least_wilson``). Where the twin already sends nearly every row to the
    target, the advantage rests on the few rows left and its error may pass 0.5 (1.3 on
    breast_cancer at 20 % of its test rows, 5 epochs: the twin sends 12 of 13 there): it
    cannot be told from 0, and the record says so."""
    n = int(json.loads(record.extra).get("scored_rows", 0))
    ap = record.ap
    if ap is None or chance is None or math.isnan(ap) or math.isnan(chance) or n == 0:
        return record  # unknown stays unknown

    def se(rate: float) -> float:
        return at_least_wilson(accuracy_se(rate, n), round(rate * n), n)

    error = 0.0 if chance >= 1.0 else math.hypot(se(ap), se(chance)) / (1.0 - chance)
    return dataclasses.replace(
        record, ap_chance=chance, ap_advantage=gain(ap, chance), ap_advantage_se=error
    )


class Twins:
    """The jobs with each baseline's carrier, and the outcomes matched back.

    ``jobs``: the given jobs, then the twins that train for a baseline alone;
    ``carrier``: attacked job -> (job that scores its baseline, position among its
    baselines)."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        self.given = len(jobs)
        self.jobs = list(jobs)
        self.carrier: dict[int, tuple[int, int]] = {}
        clean = {
            job.spec.config_hash: k for k, job in enumerate(jobs) if job.spec.train_attack == "none"
        }
        for k, job in enumerate(jobs):
            attack = baseline_attack(job)
            if attack is None:
                continue
            twin = unattacked(job.spec)
            c = clean.setdefault(twin.config_hash, len(self.jobs))
            if c == len(self.jobs):
                self.jobs.append(Job(twin))
            if attack not in self.jobs[c].baselines:
                baselines = (*self.jobs[c].baselines, attack)
                self.jobs[c] = dataclasses.replace(self.jobs[c], baselines=baselines)
            self.carrier[k] = (c, self.jobs[c].baselines.index(attack))

    def matched(self, stream: Iterable[tuple[int, Outcome]]) -> Iterator[tuple[int, Outcome]]:
        """The given jobs' outcomes from ``stream`` (outcomes of ``self.jobs``): each
        carrier's without its baseline rows, each attacked job's beside its baseline
        (held until its carrier is done; unchanged where the carrier failed)."""
        held: dict[int, Outcome] = {}
        rows: dict[int, list[Record] | None] = {}  # carrier -> its baseline records
        for k, outcome in stream:
            if self.jobs[k].baselines:
                outcome, rows[k] = self._split(k, outcome)
                for p in [p for p in held if self.carrier[p][0] == k]:
                    yield p, self._patched(p, held.pop(p), rows)
            if k in self.carrier and self.carrier[k][0] not in rows:
                held[k] = outcome
            elif k in self.carrier:
                yield k, self._patched(k, outcome, rows)
            elif k < self.given:
                yield k, outcome
        yield from held.items()  # only where a carrier never came back (a fault)

    def _split(self, k: int, outcome: Outcome) -> tuple[Outcome, list[Record] | None]:
        """A carrier's own records and its baseline rows (the last ones, in order); None
        where it has none (an error, or a training successive halving stopped)."""
        n = len(self.jobs[k].baselines)
        if isinstance(outcome, BaseException) or len(outcome) < n:
            return outcome, None
        own, base = outcome[:-n], outcome[-n:]
        if [r.attack for r in base] != [a for a, _ in self.jobs[k].baselines]:
            return outcome, None
        return own, base

    def _patched(self, k: int, outcome: Outcome, rows: dict[int, list[Record] | None]) -> Outcome:
        c, at = self.carrier[k]
        base = rows[c]
        if isinstance(outcome, BaseException) or base is None:
            return outcome
        name = self.jobs[k].spec.train_attack
        return [with_baseline(r, base[at].ap) if r.attack == name else r for r in outcome]
