"""The NN-VFL library: aggVFL / splitVFL trainings under any registered protocol.

It sits below the trial kinds: ``kinds/nn.py`` (plain NN VFL), FedHSSL fine-tuning and
FedCVT import it, and it imports no kind. ``prepare_parties`` turns a dataset into one
``PartyInit`` per party (features split vertically, scalers fit on training rows, labels
given to the active party only); ``train_prepared`` runs the protocol at the active party
over the placement's transport; ``records_of`` turns the result and the attack outcomes
into records. Other neural kinds (FedHSSL fine-tuning) reuse all three on parties whose
bottoms start pretrained. Party ``K-1`` is the active party (VFLAIR's convention); parties
``0..K-2`` are passive.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainables.attacks import ATTACKS
from trainables.attacks.harness import (
    AttackOutcome,
    attacker_index,
    draw_aux,
    peer_index,
    run_attacks,
)
from trainables.attacks.tuning import split_adapt
from trainables.data import Dataset, Scaler, default_scaler_kind, split_for
from trainables.defenses import spec_defenses
from trainables.defenses.spec_defenses import SpecDefenses
from trainables.jobs import AttackSpec
from trainables.party import Labels, Party, PartyConfig, PartyInit
from trainables.protocols import PROTOCOLS, Protocol, TrainResult
from trainables.records import Record, merged_extra
from trainables.rounds import EpochListener
from trainables.spec import TrialSpec, procedure_params
from trainables.transport.group import PartyGroup
from trainables.transport.open import open_parties
from trainables.transport.placement import LOCAL, Placement
from trainables.vfl.halving import Halving
from trainables.vfl.stacked_party import StackedParty, StackedPartyInit
from trainables.vfl.stacked_rounds import StackedRounds


@dataclass(frozen=True)
class PreparedTrial:
    inits: tuple[PartyInit, ...]  # party order; the last one is active
    protocol: Protocol
    defenses: SpecDefenses  # the spec's, read once: the parties' hooks and the record's columns
    n_labeled: int
    target_mp: float | None = None  # rounds_to_target is measured against it

    @property
    def y_test(self) -> np.ndarray:
        """(n_test,) the test labels the MP is measured on (the active party's)."""
        labels = self.inits[-1].labels
        assert labels is not None, "the last party is the active one"
        return labels.y_test

    @property
    def y_val(self) -> np.ndarray | None:
        """(n_val,) the validation rows' labels (``val_ratio``), or None."""
        labels = self.inits[-1].labels
        assert labels is not None, "the last party is the active one"
        return labels.y_val

    @property
    def metric(self) -> str:
        """What the MP is: ``accuracy``, or ``auc`` (``PartyConfig.metric``)."""
        return self.inits[-1].config.metric


@dataclass(frozen=True)
class Trained:
    """What a training left: the protocol's result, the parties (for attacks), each
    party's defense application counts (``Party.defense_applied``) and the defenses it
    ran (for the record's columns)."""

    result: TrainResult
    parties: list[Any]
    reports: list[Any]
    defenses: SpecDefenses


def attacks_of(spec: TrialSpec, attacks: Sequence[AttackSpec] = ()) -> list[AttackSpec]:
    """The attacks a trial evaluates: its training-time attack, else the given ones (with
    the parameters its ``procedure`` sets where they leave them unset: ``procedure_params``)."""
    if spec.train_attack != "none":
        return [(spec.train_attack, dict(spec.train_attack_params))]
    return [(name, procedure_params(spec, name, params)) for name, params in attacks]


def scored_over_epochs(name: str, params: dict[str, Any]) -> bool:
    """Whether attack ``name`` with ``params`` is judged on every epoch's model."""
    return bool(ATTACKS.create(name, **split_adapt(params)[0]).over_epochs())


def party_config(spec: TrialSpec, n_classes: int, protocol: Protocol) -> PartyConfig:
    return PartyConfig(
        model=str(spec.model),
        hidden=spec.hidden,
        dataset=spec.dataset,
        n_classes=n_classes,
        n_parties=spec.n_parties,
        partition=spec.partition,
        optimizer=spec.optimizer,
        lr=float(spec.required("lr")),
        batch_size=int(spec.required("batch_size")),
        seed=spec.seed,
        local_steps=protocol.local_steps,
        device=spec.device,
        lr_decay=spec.lr_decay,
        shuffle=spec.shuffle,
        weight_init=spec.weight_init,
    )


def prepare_parties(
    spec: TrialSpec,
    ds: Dataset,
    attacks: Sequence[AttackSpec] = (),
    baselines: Sequence[AttackSpec] = (),
) -> PreparedTrial:
    """Split ``ds`` into party inits for ``spec``; raises ConfigError on impossible specs.
    ``baselines``: attacks scored on it that it does not install (``Job.baselines``)."""
    protocol = PROTOCOLS.create(spec.protocol, **spec.protocol_params)
    defenses = SpecDefenses.compile(spec)
    split = split_for(spec, ds)
    columns = split.columns
    rows = split.rows.labeled  # supervised VFL trains on the aligned, labeled rows
    kind = default_scaler_kind(ds)
    scalers = [Scaler.fit(ds.X_train[:, cols], kind) for cols in columns]  # train rows only
    X_train = [
        sc.transform(ds.X_train[rows][:, cols]) for sc, cols in zip(scalers, columns, strict=True)
    ]
    X_test = [sc.transform(ds.X_test[:, cols]) for sc, cols in zip(scalers, columns, strict=True)]
    val = split.rows.val  # validation rows (val_ratio): in no party's training rows
    X_val = [
        sc.transform(ds.X_train[val][:, cols]) for sc, cols in zip(scalers, columns, strict=True)
    ]
    labels = Labels(ds.y_train[rows], ds.y_test, ds.y_train[val] if len(val) else None)
    config = party_config(spec, ds.n_classes, protocol)
    scored = [*attacks_of(spec, attacks), *baselines]
    if any(scored_over_epochs(name, params) for name, params in scored):
        config = dataclasses.replace(config, keep_epochs=True)  # every epoch's model judged
    inits = party_inits(
        spec, config, X_train, X_test, labels, columns,
        attacks, protocol, defenses, X_val if len(val) else None,
    )  # fmt: skip
    return PreparedTrial(inits, protocol, defenses, len(rows), spec.target_mp)


def party_inits(
    spec: TrialSpec,
    config: PartyConfig,
    X_train: Sequence[np.ndarray],
    X_test: Sequence[np.ndarray],
    labels: Labels,
    columns: Sequence[np.ndarray],
    attacks: Sequence[AttackSpec],
    protocol: Protocol,
    defenses: SpecDefenses,
    X_val: Sequence[np.ndarray] | None = None,
) -> tuple[PartyInit, ...]:
    """One init per party from its scaled rows: the message log and training-time attacks
    the ``attacks`` need, the ``defenses``, and the protocol's codecs (last in every
    stack: encode last, decode first). Labels go to the active party (the last) only;
    ``X_val``: each party's validation rows, where the trial has them."""

    record, install = attack_needs(spec, attacks_of(spec, attacks))
    defense_hooks = defenses.hook_entries()
    codecs = protocol.codec_hooks()
    y_rows = labels.y_train
    inits = []
    for k, cols in enumerate(columns):
        inits.append(
            PartyInit(
                party_id=k,
                X_train=X_train[k],
                X_test=X_test[k],
                config=config,
                labels=labels if k == spec.n_parties - 1 else None,
                columns=tuple(int(c) for c in cols),
                record=k in record,
                install=tuple(
                    (name, params, aux_for(name, y_rows, X_train[peer_index(k)], spec.seed))
                    for name, params in install.get(k, ())
                ),
                hooks=(*defense_hooks.get(k, ()), *codecs),
                X_val=None if X_val is None else X_val[k],
            )
        )
    return tuple(inits)


def aux_for(name: str, y: np.ndarray, peer_X: np.ndarray, seed: int) -> object:
    """The auxiliary knowledge a training-time attack is granted (same draw as after)."""
    return draw_aux(ATTACKS.get(name).info, y, peer_X, seed)


def attack_needs(
    spec: TrialSpec, attacks: Sequence[AttackSpec]
) -> tuple[set[int], dict[int, list[AttackSpec]]]:
    """Which parties keep a message log, and which training-time attacks each installs."""

    record: set[int] = set()
    install: dict[int, list[AttackSpec]] = {}
    for name, params in attacks:
        info = ATTACKS.get(name).info
        who = attacker_index(info, spec.n_parties)
        if info.needs_messages:
            record.add(who)
        if info.training_time:
            install.setdefault(who, []).append((name, params))
            active = spec.n_parties - 1
            if who != active and ATTACKS.create(name, **params).colludes():
                install.setdefault(active, []).append((name, params))  # its help (LRB's)
    return record, install


def train_prepared(
    prepared: PreparedTrial,
    epochs: int,
    placement: Placement = LOCAL,
    keep: bool = True,
    group: PartyGroup | None = None,
) -> Trained:
    """One training, as a stack of one (``train_stacked``: the code every pack runs);
    ``keep``: bring the trained parties back (local: the objects themselves; actors:
    copies) for the attack harness. ``group``: parties already open (a later phase of the
    same trial, e.g. FedHSSL fine-tuning on the pretraining actors), rebuilt there.
    Raises what its build or training raised."""
    ((trained, error),) = train_stacked(
        [prepared], epochs, placement, [keep or not placement.remote], group=group
    )
    if error is not None:
        raise error
    assert trained is not None
    return trained


def train_stacked(
    ready: Sequence[PreparedTrial],
    epochs: int,
    placement: Placement,
    keep: Sequence[bool],
    *,
    halving: Halving | None = None,
    cells: Sequence[str] = (),
    listener: EpochListener | None = None,
    group: PartyGroup | None = None,
) -> list[tuple[Trained | None, BaseException | None]]:
    """Every ``ready`` training as one stack per party (``vfl/stacked_party.py``), trained by
    ``StackedRounds`` at the active stack, on ``group`` or on parties opened for it: per
    training, what it left (its parties where ``keep`` says so) or the error its build or
    training raised. ``halving``: successive halving over the ``cells`` (each training's
    spec but its seed); ``listener``: told of each epoch end (early stopping: a stack of
    one only). A lost actor is raised."""
    stacks = [
        StackedPartyInit(tuple(r.inits[k] for r in ready)) for k in range(len(ready[0].inits))
    ]
    if group is not None:
        group.load(stacks)
        return _train_on(group, ready, epochs, keep, halving, cells, listener)
    with open_parties(stacks, placement) as opened:
        return _train_on(opened, ready, epochs, keep, halving, cells, listener)


def _train_on(
    group: PartyGroup,
    ready: Sequence[PreparedTrial],
    epochs: int,
    keep: Sequence[bool],
    halving: Halving | None,
    cells: Sequence[str],
    listener: EpochListener | None,
) -> list[tuple[Trained | None, BaseException | None]]:
    errors, slots = stack_errors(group, len(ready))
    results: list[TrainResult | None] = [None] * len(ready)
    if slots:
        group.call_all(StackedParty.stack, slots)
        run = StackedRounds(
            ready[0].protocol,  # one exchange for the stack (``stack_key``)
            targets=[r.target_mp for r in ready], slots=slots, halving=halving,
            epochs=epochs, cells=cells,
        )  # fmt: skip
        run.listener = listener
        results = group.train(run, epochs)
    return collect_trained(group, ready, results, errors, keep)


def stack_errors(group: PartyGroup, n: int) -> tuple[dict[int, BaseException], list[int]]:
    """The slots whose build raised at some party (the first error each), and the rest."""
    errors: dict[int, BaseException] = {}
    for per_stack in group.call_all(StackedParty.build_errors):
        for slot, err in per_stack.items():
            errors.setdefault(slot, err)
    return errors, [s for s in range(n) if s not in errors]


def collect_trained(
    group: PartyGroup,
    ready: Sequence[PreparedTrial],
    results: list[TrainResult | None],
    errors: dict[int, BaseException],
    keep: Sequence[bool],
) -> list[tuple[Trained | None, BaseException | None]]:
    """Per slot: its result, its parties (copies, only where ``keep`` says so) and each
    party's defense reports, read back before the stacks are emptied."""
    trained = [s for s in range(len(ready)) if s not in errors]
    reports = group.call_all(StackedParty.defense_applied)  # per party: one report per slot
    kept = [s for s in trained if keep[s] and not stopped(results[s])]
    parties = group.call_all(StackedParty.parties_of, kept) if kept else []
    out: list[tuple[Trained | None, BaseException | None]] = []
    for s, prepared in enumerate(ready):
        if s in errors:
            out.append((None, errors[s]))
            continue
        own = [stack[kept.index(s)] for stack in parties] if s in kept else []
        result = results[s]
        assert result is not None, "a slot that built was trained"
        out.append((Trained(result, own, [r[s] for r in reports], prepared.defenses), None))
    return out


def stopped(result: TrainResult | None) -> bool:
    """Whether a training's result is one successive halving stopped."""
    return result is not None and "stopped" in result.extra


def train_local_parties(prepared: PreparedTrial, epochs: int) -> tuple[TrainResult, list[Party]]:
    """All parties in this process; returns the trained parties too (for attacks)."""
    trained = train_prepared(prepared, epochs)
    return trained.result, trained.parties


def train_local(prepared: PreparedTrial, epochs: int) -> TrainResult:
    """All parties in this process."""
    return train_local_parties(prepared, epochs)[0]


def records_of(
    spec: TrialSpec,
    trained: Trained,
    n_labeled: int,
    attacks: Sequence[AttackSpec],
    extra: dict[str, Any] | None = None,
    y_test: np.ndarray | None = None,
    metric: str = "accuracy",
    y_val: np.ndarray | None = None,
    outcomes: Sequence[AttackOutcome] | None = None,
) -> list[Record]:
    """The clean record (unless a training-time attack ran) and one per attack outcome
    (``outcomes`` when the stack evaluated them together, ``run_attacks_many``).

    Fails a defense that never applied (``DefenseNeverApplied``); ``extra`` adds the kind's
    own measurements to the record's ``extra`` JSON. A DP defense's epsilon is worked out
    from the releases its mechanism counted (``Defense.dp_steps``, in ``trained.reports``).
    ``y_test`` (n_test,) and ``metric`` (``accuracy`` / ``auc``): what the clean MP was
    measured on, for its sampling error ``mp_se`` (None without them). Attack records
    carry the judge's score: AP beside its baseline (``attacks/chance.py``), MP and its SE.
    """

    merged = spec_defenses.checked(trained.reports)
    applied = spec_defenses.extra_json(merged)
    sample_rate = min(1.0, int(spec.required("batch_size")) / max(1, n_labeled))
    clean = Record.trained(
        spec,
        n_labeled,
        trained.result,
        y_test=y_test,
        metric=metric,
        y_val=y_val,
        **trained.defenses.record_fields(merged, sample_rate),
        extra=applied if not extra else merged_extra(applied, extra),
    )
    records = [] if spec.train_attack != "none" else [clean]
    if outcomes is None:
        outcomes = run_attacks(trained.parties, attacks, spec.seed) if attacks else []
    records += [clean.attacked(out) for out in outcomes]
    return records
