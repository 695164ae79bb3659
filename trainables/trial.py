"""One trial: a TrialSpec in, frozen Records out.

``prepare_parties`` turns a dataset into one ``PartyInit`` per party (features split
vertically, scalers fit on training rows, labels given to the active party only);
``run_trial`` trains them under the chosen transport and returns the records.
Party ``K-1`` is the active party (VFLAIR's convention); parties ``0..K-2`` are passive.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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
from trainables.party import Labels, PartyConfig, PartyInit
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


def prepare_parties(spec: TrialSpec, ds: Dataset) -> PreparedTrial:
    """Split ``ds`` into party inits for ``spec``; raises ConfigError on impossible specs."""
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
    inits = []
    for k, cols in enumerate(columns):
        scaler = Scaler.fit(ds.X_train[:, cols], kind)  # this party's training rows only
        is_active = k == spec.n_parties - 1
        inits.append(
            PartyInit(
                party_id=k,
                X_train=scaler.transform(ds.X_train[rows][:, cols]),
                X_test=scaler.transform(ds.X_test[:, cols]),
                config=config,
                labels=Labels(ds.y_train[rows], ds.y_test) if is_active else None,
                columns=tuple(int(c) for c in cols),
            )
        )
    return PreparedTrial(tuple(inits), protocol, len(rows))


def train_local(prepared: PreparedTrial, epochs: int) -> TrainResult:
    """All parties in this process."""
    parties = [init.build() for init in prepared.inits]
    active = parties[-1]
    return prepared.protocol.run(active, LocalTransport(parties[:-1]), epochs)  # type: ignore[arg-type]


def train_ray(
    prepared: PreparedTrial,
    spec: TrialSpec,
    cpu_per_party: float = 1.0,
    gpu_per_party: float = 0.0,
    address: str | None = None,
    reuse_actors: bool = False,
) -> TrainResult:
    """Each party in its own Ray actor, in the trial's placement group."""
    from trainables.transport.ray_actors import PartyResources, RayParties, ensure_ray

    ensure_ray(address, num_cpus=None)
    resources = PartyResources(cpu_per_party, gpu_per_party)
    with RayParties(prepared.inits, resources, reuse=reuse_actors) as group:
        return group.train(spec.protocol, dict(spec.protocol_params), int(spec.epochs))  # type: ignore[arg-type]


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
) -> list[Record]:
    """Run ``spec`` to completion; returns the clean (``attack='none'``) record."""
    if transport not in TRANSPORTS:
        raise ConfigError(f"transport={transport!r} is not one of: {', '.join(TRANSPORTS)}")
    ds = load_dataset(spec.dataset, data_dir, **spec.dataset_params)
    prepared = prepare_parties(spec, ds)
    if transport == "local":
        result = train_local(prepared, int(spec.epochs))  # type: ignore[arg-type]
    else:
        result = train_ray(prepared, spec, cpu_per_party, gpu_per_party, address, reuse_actors)
    record = Record.clean(
        spec,
        prepared.n_labeled,
        mp=result.mp,
        rounds=result.rounds,
        comm_bytes=result.comm_bytes,
        train_seconds=round(result.train_seconds, 4),
        sweep=sweep,
        trial_id=trial_id or spec.config_hash,
    )
    return [record]


def summarize(records: list[Record]) -> dict[str, object]:
    """The JSON line ``python -m trainables.run`` prints."""
    clean = next(r for r in records if r.attack == "none")
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
