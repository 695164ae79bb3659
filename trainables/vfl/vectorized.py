"""Vectorized packs: K same-shape NN trainings of a pack as one stacked training.

``run_vectorized`` prepares every job as ``NNKind.run`` would, groups the jobs that can
stack (``stacks``, ``stack_key``: same model, data shapes, batch size, epochs, optimizer,
partition, a protocol that declares it stacks, the same Q, the same defenses with model
hooks), and trains every group on ``StackedParty``s (``stacked_party.py``, through
``training.train_stacked``), local or one actor per party as the placement says. Every
other training is a stack of one of the same code: a bottom that is not a plain MLP or
starts pretrained (``stacked.ModuleStack``), a plugin's defense or training-time attack
without a stacked form. Records of a training stacked with others say so
(``extra.vectorized`` is true); a stack of one has no such key.

Seeds, learning rates, aligned and labeled rows (the data of each training) may differ
inside a group: each training keeps its own. Defenses and codecs that act on messages
(G-DP, L-DP, GS, ISO, DCAE's discretization, Quantize, Top-k) run per training on its
slice, with its own random stream and counts. Defenses that reach into the model, the
loss or its gradients (MID, CAE, DCAE, dCor, GPer) run in the stacked form each declares
(``Defense.stacked``, ``defenses/stacked.py``), each training at its own strength;
CELU-VFL's workset likewise (``StackedWorkset``), and the training-time attacks that
declare ``Attack.stacks`` (LRB, AMC), each training with its own aux data.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, cast

from trainables.attacks import ATTACKS
from trainables.attacks.harness import AttackOutcome, run_attacks_many
from trainables.attacks.tuning_trained import budget, combine, own_extra, trainings, trial_specs
from trainables.data import Dataset
from trainables.defenses.applied import DefenseNeverApplied
from trainables.defenses.base import DEFENSES
from trainables.defenses.spec_defenses import entries
from trainables.errors import ConfigError
from trainables.jobs import AttackSpec, Job, Outcome
from trainables.models import build_bottom
from trainables.protocols import CODECS
from trainables.records import Record
from trainables.schedule import Schedule
from trainables.spec import TrialSpec
from trainables.stacked import stackable_module
from trainables.transport.placement import Placement
from trainables.vfl.halving import Halving
from trainables.vfl.training import (
    PreparedTrial,
    Trained,
    attacks_of,
    prepare_parties,
    stopped,
    train_stacked,
)
from trainables.vfl.training import records_of as nn_records_of
from trainables.vfl.twins import Twins

DETERMINISTIC = (ConfigError, DefenseNeverApplied)  # the same spec raises them every time
# The most party data (features of every party) one stacked run holds
STACK_BYTES = 256 * 2**20
# The most trainings in a pack's first stack (without successive halving, which compares a
# stack's cells): its records come out while the rest of the pack trains, instead of after
# the whole stack (a MID pack of 250 tiny trainings: first record 17.1 s). A training's
# numbers do not depend on its stack, except to float rounding (~1e-5 in the weights)
# where a stack mixes learning rates and so takes the optimizer's vector-rate path
# (``tests/test_vectorized.py``)
FIRST_STACK = 16


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


@cache
def _stackable_bottom(model: str, hidden: tuple[int, ...] | None, dataset: str, n_in: int) -> bool:

    return stackable_module(build_bottom(model, n_in, 2, hidden, dataset))


def stacks(spec: TrialSpec, attacks: Sequence[AttackSpec]) -> bool:
    """Whether ``spec``, evaluating ``attacks``, may share a stack with other trainings,
    from the spec alone, by what each part declares: every defense a stacked form
    (``Defense.stacked``), a training-time attack only if it declares ``Attack.stacks``.
    One that may not trains alone, as a stack of one."""
    if any(DEFENSES.get(e.name).stacked is None for e in entries(spec)):
        return False
    if any((cls := ATTACKS.get(name)).info.training_time and not cls.stacks for name, _ in attacks):
        return False
    return True


def model_signature(prepared: PreparedTrial) -> tuple[Any, ...]:
    """The hooks with a stacked form past the messages, by name and parameters: defenses
    with model hooks (strengths may differ inside a stack; their shapes and arithmetic may
    not) and the protocol's such codecs (CELU-VFL's workset); message-only ones stack with
    any."""
    named: list[tuple[str, dict[str, Any]]] = [
        (e.name, e.params)
        for e, d in zip(prepared.defenses.entries, prepared.defenses.defenses, strict=True)
        if d.stacked is not None and d.stacked.model
    ]
    named += [
        (name, params)
        for _, name, params in prepared.protocol.codec_hooks()
        if (form := getattr(CODECS.get(name), "stacked", None)) is not None and form.model
    ]
    named += [  # a training-time attack's parameters (its aux data may differ), but for
        # one whose stacked form keeps each training's own (``Attack.stacks_params``)
        (name, {} if ATTACKS.get(name).stacks_params else params)
        for init in prepared.inits
        for name, params, _ in init.install
    ]
    return tuple((name, json.dumps(params, sort_keys=True, default=str)) for name, params in named)


def stack_key(spec: TrialSpec, prepared: PreparedTrial) -> tuple[Any, ...] | None:
    """What the trainings of one stacked run share (given ``stacks``), or None when the
    prepared parties stack with no other (a pretrained bottom, one that is not a plain
    MLP: ``ModuleStack``)."""
    if any(i.bottom is not None for i in prepared.inits):
        return None
    cfg = prepared.inits[-1].config
    if not all(
        _stackable_bottom(cfg.model, cfg.hidden, cfg.dataset, i.X_train.shape[1])
        for i in prepared.inits
    ):
        return None
    shapes = tuple(
        (i.X_train.shape, i.X_test.shape, None if i.X_val is None else i.X_val.shape)
        for i in prepared.inits
    )
    return (
        cfg.model, cfg.hidden, cfg.partition, cfg.n_parties, cfg.n_classes, cfg.batch_size,
        cfg.optimizer, cfg.local_steps, cfg.device, cfg.metric, cfg.emb_dim,
        type(prepared.protocol).exchange,  # the stack's round: one protocol's
        int(spec.required("epochs")),
        cfg.lr_decay, cfg.keep_epochs,
        shapes, model_signature(prepared),
    )  # fmt: skip


def run_vectorized(
    jobs: Sequence[Job], ds: Dataset, placement: Placement, schedule: Schedule
) -> Iterator[tuple[int, Outcome]]:
    """``run_jobs``, where a job whose training-time attacker tunes (``tuning_trained``)
    is its ``trials`` trainings, trained with the others (as one stack where they can
    stack) and yielded as one outcome: its default and ``@adapted`` records, or the first
    error of its trials; and where a training-time attack's baseline is its guess on an
    unattacked twin (``twins.py``), that twin scores it."""
    expanded: list[Job] = []
    parent: list[int] = []  # expanded job -> the job it is a trial of (or itself)
    for i, job in enumerate(jobs):
        adapted = budget(job.spec) is not None  # trials: 1 too (its default, kept)
        specs = trial_specs(job.spec) if adapted else [job.spec]
        expanded += [Job(s, job.attacks, tuned=adapted) for s in specs]
        parent += [i] * len(specs)
    twins = Twins(expanded)
    waiting: dict[int, dict[int, Outcome]] = {}
    first = {i: parent.index(i) for i in set(parent)}
    for k, outcome in twins.matched(run_jobs(twins.jobs, ds, placement, schedule)):
        i = parent[k]
        if not expanded[k].tuned:
            yield i, outcome
            continue
        got = waiting.setdefault(i, {})
        got[k - first[i]] = outcome
        if len(got) == trainings(jobs[i].spec):
            trials = [got[j] for j in range(len(got))]
            error = next((o for o in trials if isinstance(o, BaseException)), None)
            records = cast("list[list[Record]]", trials)  # no error among them
            yield i, error if error is not None else combine(jobs[i].spec, records)


def run_jobs(
    jobs: Sequence[Job], ds: Dataset, placement: Placement, schedule: Schedule
) -> Iterator[tuple[int, Outcome]]:
    """Train ``jobs``: those that stack together as one stacked run, each other one as a
    stack of one (a bottom that is not a plain MLP or starts pretrained, a plugin's
    defense or training-time attack without a stacked form; every one where the
    schedule does not vectorize); yield ``(index, records or deterministic error)``; a
    fault is raised at the end."""
    faults: list[BaseException] = []
    groups: dict[tuple[Any, ...], list[_Prepared]] = {}
    for i, job in enumerate(jobs):
        evaluated = attacks_of(job.spec, job.attacks)
        try:
            prepared = prepare_parties(job.spec, ds, evaluated, job.baselines)
        except DETERMINISTIC as err:
            yield i, err
            continue
        together = schedule.vectorize and stacks(job.spec, evaluated)
        key = stack_key(job.spec, prepared) if together else None
        item = _Prepared(i, prepared, [*evaluated, *job.baselines])  # baselines scored last
        if key is None:  # alone, a stack of one: trained now, so no other's data waits
            yield from _run_chunk(jobs, [item], placement, schedule, faults)
            schedule.done_stack()
            continue
        groups.setdefault(key, []).append(item)
    first = FIRST_STACK if schedule.halving is None else None
    for group in groups.values():  # a lone training too: K = 1 of the same code
        for chunk in _chunks(group, first):
            first = None
            yield from _run_chunk(jobs, chunk, placement, schedule, faults)
            schedule.done_stack()  # its records leave before the next stack trains
    if faults:
        raise faults[0]


def _chunks(group: list[_Prepared], first: int | None = None) -> Iterator[list[_Prepared]]:
    """Runs whose party data stay under ``STACK_BYTES`` (a stack holds them all at once),
    the first of at most ``first`` trainings (None: no such limit)."""
    chunk: list[_Prepared] = []
    held = 0  # bytes of ``chunk``: a running sum (summing the chunk per item was quadratic,
    # ~0.2 s of a pack of 1,000 tiny trainings)
    for item in group:
        full = first is not None and len(chunk) == first
        if chunk and (full or held + item.nbytes > STACK_BYTES):
            yield chunk
            chunk, first, held = [], None, 0
        chunk.append(item)
        held += item.nbytes
    if chunk:
        yield chunk


def _run_chunk(
    jobs: Sequence[Job],
    chunk: Sequence[_Prepared],
    placement: Placement,
    schedule: Schedule,
    faults: list[BaseException],
) -> Iterator[tuple[int, Outcome]]:
    ready = [c.prepared for c in chunk]
    epochs = int(jobs[chunk[0].index].spec.required("epochs"))
    trained_all = train_stacked(
        ready, epochs, placement, [bool(c.attacks) for c in chunk],
        halving=halving_of(schedule, ready), cells=[cell_of(jobs[c.index].spec) for c in chunk],
        listener=schedule.listener,
    )  # fmt: skip
    done = [
        (item, trained)
        for item, (trained, error) in zip(chunk, trained_all, strict=True)
        if error is None and trained is not None and not stopped(trained.result)
    ]
    outcomes = _stacked_outcomes(jobs, done)
    for item, (trained, error) in zip(chunk, trained_all, strict=True):
        if isinstance(error, DETERMINISTIC):
            yield item.index, error
        elif error is not None:
            faults.append(error)
        elif trained is None:
            raise AssertionError("a training with neither a result nor an error")
        elif stopped(trained.result):  # successive halving: a record, no attacks
            yield item.index, [stopped_record(jobs[item.index].spec, item.prepared, trained)]
        else:
            try:
                extra: dict[str, Any] = {"vectorized": True} if len(chunk) > 1 else {}
                skipped = None if schedule.halving is None else halving_skipped(item.prepared)
                if skipped is not None:  # asked for, and not done: say why
                    extra["halving_skipped"] = skipped
                if jobs[item.index].tuned:  # a trial of an adapted training-time attack
                    extra.update(own_extra(jobs[item.index].spec, trained.parties))
                yield item.index, nn_records_of(
                    jobs[item.index].spec, trained, item.prepared.n_labeled, item.attacks,
                    extra=extra or None,
                    y_test=item.prepared.y_test, metric=item.prepared.metric,
                    y_val=item.prepared.y_val, outcomes=outcomes.get(item.index),
                )  # fmt: skip
            except DETERMINISTIC as err:
                yield item.index, err


def _stacked_outcomes(
    jobs: Sequence[Job], done: Sequence[tuple[_Prepared, Trained]]
) -> dict[int, list[AttackOutcome]]:
    """The attack outcomes of a stack's finished trainings, each attack's evaluations run
    together (``run_attacks_many``), by job index; empty for a stack of one, and where an
    evaluation fails (each training then runs its own attacks, so the error is its own)."""
    done = [(item, trained) for item, trained in done if item.attacks]  # parties kept
    if len(done) < 2:
        return {}
    trainings = [
        (trained.parties, item.attacks, jobs[item.index].spec.seed) for item, trained in done
    ]
    try:
        outcomes = run_attacks_many(trainings)
    except DETERMINISTIC:
        return {}
    return {item.index: out for (item, _), out in zip(done, outcomes, strict=True)}


def halving_of(schedule: Schedule, ready: Sequence[PreparedTrial]) -> Halving | None:
    """The schedule's successive halving, for a stack it can cut: one whose parties have
    no hooks past the messages (no MID, CAE, DCAE, dCor, GPer, CELU-VFL workset or
    training-time attack: their stacked state is theirs to cut) and trains on validation
    rows (``halving_skipped`` says why another is not cut)."""
    halving = schedule.halving
    if halving is None or halving_skipped(ready[0]) is not None:
        return None
    return halving


def halving_skipped(prepared: PreparedTrial) -> str | None:
    """Why successive halving leaves this training's stack whole, or None."""
    if model_signature(prepared):
        return "model hooks (a defense, codec or attack with stacked state) are not cut"
    if prepared.y_val is None:
        return "no validation rows (val_ratio 0)"
    return None


def cell_of(spec: TrialSpec) -> str:
    """What successive halving judges a training by together with its seeds: its spec but
    its seed."""
    return spec.model_copy(update={"seed": 0}).config_hash


def stopped_record(spec: TrialSpec, prepared: PreparedTrial, trained: Trained) -> Record:
    """A training successive halving stopped: ``status: stopped``, its validation MP at
    the rung, the epochs it ran (``extra.epochs_run``, ``extra.stopped_by``); no test MP."""
    info = trained.result.extra["stopped"]
    extra = {"epochs_run": info["epochs_run"], "stopped_by": info["by"]}
    return Record.trained(
        spec, prepared.n_labeled, trained.result, y_val=prepared.y_val, metric=prepared.metric,
        mp=None, mp_se=None, status="stopped", extra=json.dumps(extra, sort_keys=True),
    )  # fmt: skip
