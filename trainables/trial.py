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
from trainables.errors import ConfigError, MissingDataError
from trainables.party import Labels, Party, PartyConfig, PartyInit
from trainables.protocols import PROTOCOLS, Protocol, TrainResult
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.transport import LocalTransport

TRANSPORTS = ("local", "ray")


@dataclass(frozen=True)
class PreparedTrial:
    inits: tuple[PartyInit, ...]  # party order; the last one is active
    protocol: Protocol
    n_labeled: int


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
        len(ds.y_train), spec.aligned_ratio, spec.n_labeled, seed=spec.seed, y=ds.y_train
    )
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
            )
        )
    return PreparedTrial(tuple(inits), protocol, len(rows))


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
    result = prepared.protocol.run(active, LocalTransport(parties[:-1]), epochs)  # type: ignore[arg-type]
    return result, parties


def train_ray(
    prepared: PreparedTrial,
    spec: TrialSpec,
    cpu_per_party: float = 1.0,
    gpu_per_party: float = 0.0,
    address: str | None = None,
    reuse_actors: bool = False,
    snapshot: bool = False,
) -> tuple[TrainResult, list[Party]]:
    """Each party in its own Ray actor, in the trial's placement group.

    With ``snapshot`` the trained parties are copied back from their actors (for attacks).
    """
    from trainables.transport.ray_actors import PartyResources, RayParties, ensure_ray

    ensure_ray(address, num_cpus=None)
    resources = PartyResources(cpu_per_party, gpu_per_party)
    with RayParties(prepared.inits, resources, reuse=reuse_actors) as group:
        result = group.train(spec.protocol, dict(spec.protocol_params), int(spec.epochs))  # type: ignore[arg-type]
        return result, group.snapshot() if snapshot else []


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
    ds = load_dataset(spec.dataset, data_dir, **spec.dataset_params)
    evaluated = attacks_of(spec, attacks)
    prepared = prepare_parties(spec, ds, evaluated)
    if transport == "local":
        result, parties = train_local_parties(prepared, int(spec.epochs))  # type: ignore[arg-type]
    else:
        result, parties = train_ray(
            prepared, spec, cpu_per_party, gpu_per_party, address, reuse_actors, bool(evaluated)
        )
    clean = Record.clean(
        spec,
        prepared.n_labeled,
        mp=result.mp,
        rounds=result.rounds,
        comm_bytes=result.comm_bytes,
        train_seconds=round(result.train_seconds, 4),
        sweep=sweep,
        trial_id=trial_id or spec.config_hash,
    )
    records = [] if spec.train_attack != "none" else [clean]
    if evaluated:
        from trainables.attacks.harness import run_attacks

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
                )
            )
    return records


def summarize(records: list[Record]) -> dict[str, object]:
    """The JSON line ``python -m trainables.run`` prints."""
    clean = records[0]
    out = {k: v for k, v in clean.to_dict().items() if k not in ("spec_json", "created_at")}
    out["mp"] = None if clean.mp is None else float(np.round(clean.mp, 6))
    return out


def check_names(spec: TrialSpec) -> None:
    """Raise ConfigError if a name in ``spec`` is not registered or its parameters are bad."""
    from trainables.data import DATASETS
    from trainables.models import BOTTOMS

    DATASETS.get(spec.dataset)
    BOTTOMS.get(str(spec.model))
    PROTOCOLS.create(spec.protocol, **spec.protocol_params)
    if spec.ssl_variant != "none":
        raise ConfigError(f"ssl_variant={spec.ssl_variant!r} is not available yet; allowed: none")


def incompatibility(spec: TrialSpec, data_dir: str | Path | None = None) -> str | None:
    """Why ``spec`` cannot run on its dataset (too many parties, too few rows), or None.

    A missing data file is not an incompatibility: it raises MissingDataError.
    """
    ds = load_dataset(spec.dataset, data_dir, **spec.dataset_params)
    try:
        vertical_split(ds, spec.n_parties, spec.split_scheme)
        split_samples(len(ds.y_train), spec.aligned_ratio, spec.n_labeled, seed=spec.seed)
    except MissingDataError:
        raise
    except ConfigError as err:
        return str(err)
    return None
