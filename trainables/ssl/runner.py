"""One semi-supervised trial (FedCVT, or FedSplitNN with the same models): spec in, Records out.

Rows: ``n_aligned`` (or ``aligned_ratio``) training rows are the overlap, of which
``n_labeled`` (default: all) are labeled; the other training rows are shuffled and split
into A's and B's own non-overlapping rows (at most ``n_local`` each, disjoint). B's own rows
carry labels (B is the label holder, as in the paper); A's are unlabeled. Each party's scaler
is fit on the rows that party holds. FedSplitNN uses the same overlap and models but only the
labeled overlap rows, for the same number of optimizer steps.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
from sklearn.metrics import roc_auc_score

from trainables.data import Dataset, Scaler, default_scaler_kind, split_samples, vertical_split
from trainables.errors import ConfigError
from trainables.messages import Message
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.ssl.cvt_party import CvtLabels, CvtPartyInit, steps_per_epoch
from trainables.ssl.fedcvt import CvtOptions, CvtResult, train_cvt
from trainables.transport import LocalTransport, Transport

OPTION_KEYS = tuple(f.name for f in fields(CvtOptions) if f.name != "semi")


def cvt_options(spec: TrialSpec, semi: bool) -> CvtOptions:
    """``CvtOptions`` from ``spec.model_params``; unknown keys fail with the allowed ones."""
    bad = sorted(set(spec.model_params) - set(OPTION_KEYS))
    if bad:
        raise ConfigError(
            f"model_params key(s) {bad} are not FedCVT options; allowed: {', '.join(OPTION_KEYS)}"
        )
    try:
        kwargs = {k: type(getattr(CvtOptions, k))(v) for k, v in spec.model_params.items()}
    except (TypeError, ValueError) as err:
        raise ConfigError(f"model_params={spec.model_params}: {err}") from None
    return CvtOptions(**kwargs, semi=semi)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CvtRows:
    """Training row ids: overlap, which overlap rows are labeled, and each party's own rows."""

    overlap: np.ndarray  # (n_ol,)
    labeled: np.ndarray  # (n_ol,) bool
    own_a: np.ndarray  # (n_nl_A,) passive party's non-overlapping rows
    own_b: np.ndarray  # (n_nl_B,) active party's non-overlapping rows


def choose_rows(spec: TrialSpec, ds: Dataset, n_local: int) -> CvtRows:
    """Deterministic in ``spec.seed``; raises ConfigError when the overlap does not fit."""
    n = len(ds.y_train)
    s = split_samples(
        n, spec.aligned_ratio, spec.n_labeled, seed=spec.seed, y=ds.y_train,
        n_aligned=spec.n_aligned,
    )  # fmt: skip
    rest = np.random.default_rng([spec.seed, 7]).permutation(s.unaligned)
    k = min(n_local, len(rest) // 2)
    return CvtRows(
        s.aligned, np.isin(s.aligned, s.labeled), np.sort(rest[:k]), np.sort(rest[k : 2 * k])
    )


def party_inits(spec: TrialSpec, ds: Dataset, opts: CvtOptions) -> tuple[CvtPartyInit, ...]:
    """(passive A, active B) inits; only B's carries labels (``check_cvt`` ran before)."""
    columns = vertical_split(ds, 2, spec.split_scheme)
    rows = choose_rows(spec, ds, opts.n_local)
    kind = default_scaler_kind(ds)
    inits = []
    for k, (cols, own) in enumerate(zip(columns, (rows.own_a, rows.own_b), strict=True)):
        held = np.concatenate([rows.overlap, own])
        sc = Scaler.fit(ds.X_train[held][:, cols], kind)  # this party's rows only

        def part(X: np.ndarray, sc: Scaler = sc, cols: np.ndarray = cols) -> np.ndarray:
            return sc.transform(X[:, cols]).astype(np.float32)

        labels = CvtLabels(
            ds.y_train[rows.overlap], rows.labeled, ds.y_train[rows.own_b], ds.y_test
        )
        inits.append(
            CvtPartyInit(
                party_id=k, X_ol=part(ds.X_train[rows.overlap]), X_nl=part(ds.X_train[own]),
                X_test=part(ds.X_test), n_classes=ds.n_classes, model=str(spec.model),
                hidden=spec.hidden, dataset=spec.dataset, lr=float(spec.lr),  # type: ignore[arg-type]
                batch_size=int(spec.batch_size), seed=spec.seed, options=opts,  # type: ignore[arg-type]
                peer_nl=len(rows.own_a) if k == 1 else len(rows.own_b),
                labels=labels if k == 1 else None, device=spec.device,
            )
        )  # fmt: skip
    return tuple(inits)


@contextmanager
def wires(
    inits: tuple[CvtPartyInit, ...], transport: str, cpu: float, gpu: float,
    address: str | None, reuse: bool,
) -> Iterator[tuple[Transport, Transport]]:  # fmt: skip
    """(to A, to B): one-peer transports to local objects or to the parties' actors."""
    if transport == "local":
        yield LocalTransport([inits[0].build()]), LocalTransport([inits[1].build()])  # type: ignore[list-item]
        return
    from trainables.transport.ray_actors import (
        PartyResources,
        RayParties,
        RayTransport,
        ensure_ray,
    )

    ensure_ray(address, num_cpus=None)
    with RayParties(inits, PartyResources(cpu, gpu), reuse=reuse) as group:  # type: ignore[arg-type]
        yield RayTransport([group.actors[0]]), RayTransport([group.actors[1]])


def run_cvt_trial(
    spec: TrialSpec, ds: Dataset, semi: bool, *, transport: str = "local",
    cpu_per_party: float = 1.0, gpu_per_party: float = 0.0, address: str | None = None,
    reuse_actors: bool = False, sweep: str = "", trial_id: str = "",
    log: list[Message] | None = None,
) -> list[Record]:  # fmt: skip
    """Train and evaluate; one clean record (FedCVT measurements in ``extra``)."""
    opts = cvt_options(spec, semi)
    inits = party_inits(spec, ds, opts)
    a, b = inits
    steps = steps_per_epoch(len(a.X_ol), len(a.X_nl), len(b.X_nl), int(spec.batch_size))  # type: ignore[arg-type]
    start = time.perf_counter()
    where = (transport, cpu_per_party, gpu_per_party, address, reuse_actors)
    with wires(inits, *where) as (to_a, to_b):
        result = train_cvt(to_a, to_b, int(spec.epochs), steps, semi, log)  # type: ignore[arg-type]
    seconds = time.perf_counter() - start
    rows = choose_rows(spec, ds, opts.n_local)
    extra = measurements(result, ds, rows, steps, semi)
    return [
        Record.clean(
            spec, int(rows.labeled.sum()), mp=float(result.metrics["acc"]),  # type: ignore[arg-type]
            rounds=result.rounds, comm_bytes=result.comm_bytes,
            train_seconds=round(seconds, 4), extra=json.dumps(extra, sort_keys=True),
            sweep=sweep, trial_id=trial_id or spec.config_hash,
        )
    ]  # fmt: skip


def measurements(
    result: CvtResult, ds: Dataset, rows: CvtRows, steps: int, semi: bool
) -> dict[str, object]:
    """AUC (binary tasks), single-party accuracies and pseudo-label counts/accuracy.

    Pseudo-label accuracy is computed here, by the experimenter, from the dataset's labels of
    A's rows; no party ever holds them.
    """
    m = result.metrics
    proba = np.asarray(m["proba"])
    out: dict[str, object] = {
        "n_aligned": len(rows.overlap), "n_local_a": len(rows.own_a),
        "n_local_b": len(rows.own_b), "metric": "accuracy",
    }  # fmt: skip
    if semi:  # FedSplitNN never trains the single-party heads
        out.update(acc_active_only=m["acc_active_only"], acc_passive_only=m["acc_passive_only"])
    if ds.n_classes == 2 and len(np.unique(ds.y_test)) == 2:
        out["auc"] = float(roc_auc_score(ds.y_test, proba[:, 1]))
    if result.pseudo:
        last = [p for p in result.pseudo if p[0] >= result.rounds - steps]  # last epoch
        picked = np.concatenate([np.asarray(p[1], dtype=np.int64) for p in last])
        labels = np.concatenate([np.asarray(p[2], dtype=np.int64) for p in last])
        truth = ds.y_train[rows.own_a][picked]
        out["pseudo_total"] = int(sum(len(p[1]) for p in result.pseudo))
        out["pseudo_last_epoch"] = len(picked)
        out["pseudo_last_epoch_acc"] = float((truth == labels).mean()) if len(picked) else None
        share = np.bincount(labels, minlength=ds.n_classes) / max(1, len(labels))
        truth_share = np.bincount(ds.y_train[rows.own_a], minlength=ds.n_classes)
        out["pseudo_class_share"] = [round(float(v), 4) for v in share]  # last epoch
        out["own_a_class_share"] = [round(float(v), 4) for v in truth_share / len(rows.own_a)]
    return out


def check_cvt(spec: TrialSpec) -> None:
    """ConfigError for specs FedCVT cannot run (names and options, before any data)."""
    from trainables.data import DATASETS
    from trainables.models import BOTTOMS

    DATASETS.get(spec.dataset)
    BOTTOMS.get(str(spec.model))
    cvt_options(spec, True)
    if spec.n_parties != 2:
        raise ConfigError(
            f"ssl_variant={spec.ssl_variant!r} needs n_parties=2, got n_parties={spec.n_parties}"
        )
    if spec.defense != "none" or spec.stack or spec.train_attack != "none":
        raise ConfigError(f"ssl_variant={spec.ssl_variant!r} runs without defenses/attacks here")


def cvt_incompatibility(spec: TrialSpec, data_dir: str | Path | None) -> str | None:
    """Why the dataset cannot host this spec (too few rows), or None."""
    from trainables.data import load_dataset

    ds = load_dataset(spec.dataset, data_dir, **spec.dataset_params)
    try:
        vertical_split(ds, spec.n_parties, spec.split_scheme)
        rows = choose_rows(spec, ds, cvt_options(spec, True).n_local)
    except ConfigError as err:
        return str(err)
    if len(rows.own_a) == 0:
        return f"no non-overlapping rows left for FedCVT (n_aligned={len(rows.overlap)})"
    return None
