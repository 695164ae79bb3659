"""One trial: a TrialSpec in, frozen Records out.

``prepare_parties`` turns a dataset into one ``PartyInit`` per party (features split
vertically, scalers fit on training rows, labels given to the active party only);
``run_trial`` trains them under the chosen transport and returns the records.
Party ``K-1`` is the active party (VFLAIR's convention); parties ``0..K-2`` are passive.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainables.data import (
    Dataset,
    Scaler,
    default_scaler_kind,
    load_dataset,
    split_samples,
    vertical_split,
)
from trainables.defenses import stack as defense_stack
from trainables.errors import ConfigError, MissingDataError
from trainables.party import Labels, Party, PartyConfig, PartyInit
from trainables.protocols import PROTOCOLS, Protocol, TrainResult
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.transport import LocalTransport

TRANSPORTS = ("local", "ray")
TREE_MODEL_NAMES = ("xgboost", "secureboost", "rf", "secure_rf", "paillier_lr")


@dataclass(frozen=True)
class PreparedTrial:
    inits: tuple[PartyInit, ...]  # party order; the last one is active
    protocol: Protocol
    n_labeled: int
    target_mp: float | None = None  # rounds_to_target is measured against it


AttackSpec = tuple[str, dict[str, Any]]


def attacks_of(spec: TrialSpec, attacks: Sequence[AttackSpec] = ()) -> list[AttackSpec]:
    """The attacks a trial evaluates: its training-time attack, else the given ones."""
    if spec.train_attack != "none":
        return [(spec.train_attack, dict(spec.train_attack_params))]
    return list(attacks)


def prepare_parties(
    spec: TrialSpec, ds: Dataset, attacks: Sequence[AttackSpec] = ()
) -> PreparedTrial:
    """Split ``ds`` into party inits for ``spec``; raises ConfigError on impossible specs."""
    from trainables.attacks.harness import peer_index

    if spec.ssl_variant != "none":
        raise ConfigError(f"ssl_variant={spec.ssl_variant!r} is not available yet; allowed: none")
    protocol = PROTOCOLS.create(spec.protocol, **spec.protocol_params)
    columns = vertical_split(ds, spec.n_parties, spec.split_scheme)
    samples = split_samples(
        len(ds.y_train), spec.aligned_ratio, spec.n_labeled, seed=spec.seed, y=ds.y_train,
        n_aligned=spec.n_aligned,
    )  # fmt: skip
    rows = samples.labeled  # supervised VFL trains on the aligned, labeled rows
    config = PartyConfig(
        model=str(spec.model),
        hidden=spec.hidden,
        dataset=spec.dataset,
        n_classes=ds.n_classes,
        n_parties=spec.n_parties,
        partition=spec.partition,
        optimizer=spec.optimizer,
        lr=float(spec.lr),  # type: ignore[arg-type]
        batch_size=int(spec.batch_size),  # type: ignore[arg-type]
        seed=spec.seed,
        local_steps=protocol.local_steps,
        device=spec.device,
    )
    kind = default_scaler_kind(ds)
    scalers = [Scaler.fit(ds.X_train[:, cols], kind) for cols in columns]  # train rows only
    X_train = [
        sc.transform(ds.X_train[rows][:, cols]) for sc, cols in zip(scalers, columns, strict=True)
    ]
    y_rows = ds.y_train[rows]
    record, install = _attack_needs(spec, attacks_of(spec, attacks))
    defense_hooks = defense_stack.hook_entries(spec)
    inits = []
    for k, cols in enumerate(columns):
        is_active = k == spec.n_parties - 1
        inits.append(
            PartyInit(
                party_id=k,
                X_train=X_train[k],
                X_test=scalers[k].transform(ds.X_test[:, cols]),
                config=config,
                labels=Labels(y_rows, ds.y_test) if is_active else None,
                columns=tuple(int(c) for c in cols),
                record=k in record,
                install=tuple(
                    (name, params, _aux_for(name, y_rows, X_train[peer_index(k)], spec.seed))
                    for name, params in install.get(k, ())
                ),
                hooks=tuple(defense_hooks.get(k, ())),
            )
        )
    codecs = protocol.codec_hooks()  # last in every stack: encode last, decode first
    inits = [dataclasses.replace(init, hooks=(*init.hooks, *codecs)) for init in inits]
    return PreparedTrial(tuple(inits), protocol, len(rows), spec.target_mp)


def _aux_for(name: str, y: np.ndarray, peer_X: np.ndarray, seed: int) -> object:
    """The auxiliary knowledge a training-time attack is granted (same draw as after)."""
    from trainables.attacks import ATTACKS
    from trainables.attacks.harness import draw_aux

    return draw_aux(ATTACKS.get(name).info, y, peer_X, seed)


def _attack_needs(
    spec: TrialSpec, attacks: Sequence[AttackSpec]
) -> tuple[set[int], dict[int, list[AttackSpec]]]:
    """Which parties keep a message log, and which training-time attacks each installs."""
    from trainables.attacks import ATTACKS
    from trainables.attacks.harness import attacker_index

    record: set[int] = set()
    install: dict[int, list[AttackSpec]] = {}
    for name, params in attacks:
        info = ATTACKS.get(name).info
        who = attacker_index(info, spec.n_parties)
        if info.needs_messages:
            record.add(who)
        if info.training_time:
            install.setdefault(who, []).append((name, params))
    return record, install


def train_local(prepared: PreparedTrial, epochs: int) -> TrainResult:
    """All parties in this process."""
    return train_local_parties(prepared, epochs)[0]


def train_local_parties(prepared: PreparedTrial, epochs: int) -> tuple[TrainResult, list[Party]]:
    """All parties in this process; returns the trained parties too (for attacks)."""
    parties = [init.build() for init in prepared.inits]
    active = parties[-1]
    transport = LocalTransport(parties[:-1])
    result = prepared.protocol.run(active, transport, epochs, prepared.target_mp)  # type: ignore[arg-type]
    return result, parties


def train_ray(
    prepared: PreparedTrial,
    spec: TrialSpec,
    cpu_per_party: float = 1.0,
    gpu_per_party: float = 0.0,
    address: str | None = None,
    reuse_actors: bool = False,
    snapshot: bool = False,
) -> tuple[TrainResult, list[Party], list[Any]]:
    """Each party in its own Ray actor, in the trial's placement group.

    With ``snapshot`` the trained parties are copied back from their actors (for attacks).
    The third item: each party's defense application counts (``Party.defense_applied``).
    """
    from trainables.transport.ray_actors import PartyResources, RayParties, ensure_ray

    ensure_ray(address, num_cpus=None)
    resources = PartyResources(cpu_per_party, gpu_per_party)
    with RayParties(prepared.inits, resources, reuse=reuse_actors) as group:
        result = group.train(
            spec.protocol,
            dict(spec.protocol_params),
            int(spec.epochs),
            spec.target_mp,  # type: ignore[arg-type]
        )
        parties = group.snapshot() if snapshot else []
        return result, parties, group.call_all("defense_applied")


def run_trial(
    spec: TrialSpec,
    *,
    transport: str = "local",
    data_dir: str | Path | None = None,
    cpu_per_party: float = 1.0,
    gpu_per_party: float = 0.0,
    address: str | None = None,
    sweep: str = "",
    trial_id: str = "",
    reuse_actors: bool = False,
    attacks: Sequence[AttackSpec] = (),
) -> list[Record]:
    """Run ``spec`` to completion: the clean record (``attack='none'``) and one per attack.

    Inference-time ``attacks`` share this training; a spec with a ``train_attack`` gets
    only that attack's record, whose MP is the MP under attack.
    """
    if transport not in TRANSPORTS:
        raise ConfigError(f"transport={transport!r} is not one of: {', '.join(TRANSPORTS)}")
    if is_tree_model(spec):  # trees and Paillier models: trainables/trees
        from trainables.trees import run_tree_trial

        return run_tree_trial(
            spec, transport=transport, data_dir=data_dir, cpu_per_party=cpu_per_party,
            gpu_per_party=gpu_per_party, address=address, sweep=sweep, trial_id=trial_id,
            reuse_actors=reuse_actors, attacks=attacks,
        )  # fmt: skip
    if is_ssl_variant(spec):  # FedCVT & co.: trainables/ssl
        from trainables.ssl import run_ssl_trial

        return run_ssl_trial(
            spec, transport=transport, data_dir=data_dir, cpu_per_party=cpu_per_party,
            gpu_per_party=gpu_per_party, address=address, sweep=sweep, trial_id=trial_id,
            reuse_actors=reuse_actors, attacks=attacks,
        )  # fmt: skip
    ds = load_dataset(spec.dataset, data_dir, **spec.dataset_params)
    evaluated = attacks_of(spec, attacks)
    prepared = prepare_parties(spec, ds, evaluated)
    if transport == "local":
        result, parties = train_local_parties(prepared, int(spec.epochs))  # type: ignore[arg-type]
        reports = [p.defense_applied() for p in parties]
    else:
        result, parties, reports = train_ray(
            prepared, spec, cpu_per_party, gpu_per_party, address, reuse_actors, bool(evaluated)
        )
    extra = defense_stack.checked_extra(reports)  # fails a defense that never applied
    sample_rate = min(1.0, int(spec.batch_size) / max(1, prepared.n_labeled))  # type: ignore[arg-type]
    clean = Record.clean(
        spec,
        prepared.n_labeled,
        **defense_stack.record_fields(spec, result.rounds, sample_rate),
        mp=result.mp,
        rounds=result.rounds,
        comm_bytes=result.comm_bytes,
        rounds_to_target=result.rounds_to_target,
        train_seconds=round(result.train_seconds, 4),
        sweep=sweep,
        trial_id=trial_id or spec.config_hash,
        extra=extra,
    )
    records = [] if spec.train_attack != "none" else [clean]
    if evaluated:
        from trainables.attacks.harness import merged_extra, run_attacks

        for out in run_attacks(parties, evaluated, spec.seed):
            records.append(
                dataclasses.replace(
                    clean,
                    attack=out.name,
                    attack_type=out.type,
                    attacker_party=out.attacker,
                    ap=out.ap,
                    mp=out.mp,
                    attack_seconds=round(out.seconds, 4),
                    extra=merged_extra(clean.extra, out.extra),  # + the preset and params
                )
            )
    return records


def summarize(records: list[Record]) -> dict[str, object]:
    """The JSON line ``python -m trainables.run`` prints."""
    clean = records[0]
    out = {k: v for k, v in clean.to_dict().items() if k not in ("spec_json", "created_at")}
    out["mp"] = None if clean.mp is None else float(np.round(clean.mp, 6))
    return out


def is_tree_model(spec: TrialSpec) -> bool:
    """Tree and Paillier models (``trainables.trees.TREE_MODELS``) run their own trials."""
    return str(spec.model) in TREE_MODEL_NAMES


def is_ssl_variant(spec: TrialSpec) -> bool:
    """Semi-/self-supervised variants (``trainables.ssl.SSL_VARIANTS``) run their own trials."""
    from trainables.ssl import SSL_VARIANTS

    return spec.ssl_variant in SSL_VARIANTS


def check_names(spec: TrialSpec) -> None:
    """Raise ConfigError if a name in ``spec`` is not registered or its parameters are bad."""
    from trainables.data import DATASETS

    if is_tree_model(spec):
        from trainables.trees import tree_check

        DATASETS.get(spec.dataset)
        return tree_check(spec)
    if is_ssl_variant(spec):
        from trainables.ssl import ssl_check

        return ssl_check(spec)
    from trainables.models import BOTTOMS

    DATASETS.get(spec.dataset)
    BOTTOMS.get(str(spec.model))
    PROTOCOLS.create(spec.protocol, **spec.protocol_params)
    defense_stack.build(spec)
    if spec.ssl_variant != "none":
        from trainables.ssl import SSL_VARIANTS

        allowed = ", ".join(["none", *SSL_VARIANTS.names()])
        raise ConfigError(f"unknown ssl_variant={spec.ssl_variant!r}; allowed: {allowed}")


def incompatibility(spec: TrialSpec, data_dir: str | Path | None = None) -> str | None:
    """Why ``spec`` cannot run on its dataset (too many parties, too few rows) or cannot
    mean what it says (a defense with nothing to act on in this trial), or None.

    A missing data file is not an incompatibility: it raises MissingDataError.
    """
    if is_tree_model(spec):
        from trainables.trees import tree_incompatibility

        return tree_incompatibility(spec, data_dir)
    if is_ssl_variant(spec):
        from trainables.ssl import ssl_incompatibility

        return ssl_incompatibility(spec, data_dir)
    reason = defense_stack.incompatibility(spec)  # a defense with nothing to act on here
    if reason is not None:
        return reason
    ds = load_dataset(spec.dataset, data_dir, **spec.dataset_params)
    try:
        vertical_split(ds, spec.n_parties, spec.split_scheme)
        split_samples(
            len(ds.y_train), spec.aligned_ratio, spec.n_labeled, seed=spec.seed,
            n_aligned=spec.n_aligned,
        )  # fmt: skip
    except MissingDataError:
        raise
    except ConfigError as err:
        return str(err)
    return None
