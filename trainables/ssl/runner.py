"""A FedCVT trial's set-up (FedCVT, or FedSplitNN with the same models): options, rows,
party inits, checks, and the experimenter's measurements; ``trainables.kinds.fedcvt`` runs it.

Rows: ``n_aligned`` (or ``aligned_ratio``) training rows are the overlap, of which
``n_labeled`` (default: all) are labeled; the other training rows are shuffled and split
into A's and B's own non-overlapping rows (at most ``n_local`` each, disjoint). B's own rows
carry labels (B is the label holder, as in the paper); A's are unlabeled. Each party's scaler
is fit on the rows that party holds. FedSplitNN uses the same overlap and models but only the
labeled overlap rows, for the same number of optimizer steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import numpy as np

from trainables.data import (
    Dataset,
    SampleSplit,
    Scaler,
    default_scaler_kind,
    rows_for,
    split_for,
    split_refusal,
)
from trainables.defenses.spec_defenses import SpecDefenses
from trainables.errors import ConfigError
from trainables.jobs import AttackSpec
from trainables.party import PartyConfig
from trainables.protocols.base import HookEntry
from trainables.spec import TrialSpec
from trainables.ssl.cvt_init import CvtLabels, CvtPartyInit
from trainables.ssl.cvt_party import steps_per_epoch
from trainables.ssl.fedcvt import BALANCES, RESCALES, CvtOptions

if TYPE_CHECKING:
    from trainables.ssl.cvt_active import CvtMeasurements

OPTION_KEYS = tuple(f.name for f in fields(CvtOptions) if f.name != "semi")
CHOICES = {"pseudo_balance": BALANCES, "est_rescale": RESCALES}  # the string options


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
    for key, allowed in CHOICES.items():
        if kwargs.get(key, getattr(CvtOptions, key)) not in allowed:
            raise ConfigError(
                f"model_params {key}={spec.model_params[key]!r} is not a FedCVT {key} value; "
                f"allowed: {', '.join(allowed)}"
            )
    return CvtOptions(**kwargs, semi=semi)


@dataclass(frozen=True)
class CvtRows:
    """Training row ids: overlap, which overlap rows are labeled, and each party's own rows."""

    overlap: np.ndarray  # (n_ol,)
    labeled: np.ndarray  # (n_ol,) bool
    own_a: np.ndarray  # (n_nl_A,) passive party's non-overlapping rows
    own_b: np.ndarray  # (n_nl_B,) active party's non-overlapping rows


def choose_rows(spec: TrialSpec, ds: Dataset, n_local: int) -> CvtRows:
    """Deterministic in ``spec.seed``; raises ConfigError when the overlap does not fit.
    The rows of ``split_for(spec, ds)`` (``rows_for``: no columns are drawn for them)."""
    return cvt_rows(spec, rows_for(spec, ds), n_local)


def cvt_rows(spec: TrialSpec, s: SampleSplit, n_local: int) -> CvtRows:
    """The overlap and labels of the trial's split ``s``; its unaligned rows, shuffled in
    ``spec.seed``, dealt to A and B (at most ``n_local`` each, disjoint)."""
    rest = np.random.default_rng([spec.seed, 7]).permutation(s.unaligned)
    k = min(n_local, len(rest) // 2)
    return CvtRows(
        s.aligned, np.isin(s.aligned, s.labeled), np.sort(rest[:k]), np.sort(rest[k : 2 * k])
    )


def party_config(spec: TrialSpec, n_classes: int, local_steps: int) -> PartyConfig:
    """The config both FedCVT parties share (Adam, as FedCVT trains)."""
    return PartyConfig(
        model=str(spec.model), hidden=spec.hidden, dataset=spec.dataset, n_classes=n_classes,
        n_parties=2, partition="fedcvt", optimizer="adam", lr=float(spec.required("lr")),
        batch_size=int(spec.required("batch_size")), seed=spec.seed, local_steps=local_steps,
        device=spec.device,
    )  # fmt: skip


def party_inits(
    spec: TrialSpec,
    ds: Dataset,
    opts: CvtOptions,
    stack: SpecDefenses,
    *,
    local_steps: int = 1,
    codecs: Sequence[HookEntry] = (),
    attacks: Sequence[AttackSpec] = (),
) -> tuple[CvtPartyInit, ...]:
    """(passive A, active B) inits; only B's carries labels (``check_cvt`` ran before).

    Each party gets ``stack``'s defenses for its side (``hook_entries``), then the codecs;
    the attacker party a message log / training-time attack as the ``attacks`` need."""
    from trainables.vfl.training import attack_needs, aux_for

    split = split_for(spec, ds, n_parties=2)  # FedCVT has exactly two parties
    columns = split.columns
    rows = cvt_rows(spec, split.rows, opts.n_local)
    kind = default_scaler_kind(ds)
    parts = []
    for cols, own in zip(columns, (rows.own_a, rows.own_b), strict=True):
        sc = Scaler.fit(ds.X_train[np.concatenate([rows.overlap, own])][:, cols], kind)
        parts.append(
            [sc.transform(X[:, cols]).astype(np.float32)
             for X in (ds.X_train[rows.overlap], ds.X_train[own], ds.X_test)]
        )  # fmt: skip  # this party's scaler, fit on the rows it holds
    labels = CvtLabels(ds.y_train[rows.overlap], rows.labeled, ds.y_train[rows.own_b], ds.y_test)
    config = party_config(spec, ds.n_classes, local_steps)
    steps = steps_per_epoch(len(rows.overlap), len(rows.own_a), len(rows.own_b), config.batch_size)
    record, install = attack_needs(spec, attacks)
    defenses = stack.hook_entries()
    y_ol = ds.y_train[rows.overlap]
    return tuple(
        CvtPartyInit(
            party_id=k, X_ol=parts[k][0], X_nl=parts[k][1], X_test=parts[k][2], config=config,
            options=opts, steps=steps, peer_nl=len(rows.own_a) if k == 1 else len(rows.own_b),
            labels=labels if k == 1 else None, record=k in record,
            install=tuple(
                (name, params, aux_for(name, y_ol, parts[1 - k][0], spec.seed))
                for name, params in install.get(k, ())
            ),
            hooks=(*defenses.get(k, ()), *codecs),
        )
        for k in range(2)
    )  # fmt: skip


def measurements(
    m: CvtMeasurements, rounds: int, ds: Dataset, rows: CvtRows, steps: int, semi: bool
) -> dict[str, object]:
    """AUC (binary tasks), single-party accuracies and pseudo-label counts/accuracy.

    ``m``: the active party's ``measurements()`` (last evaluation and pseudo-label log).
    Pseudo-label accuracy is computed here, by the experimenter, from the dataset's labels of
    A's rows; no party ever holds them.
    """
    pseudo = m["pseudo"]
    proba = np.asarray(m["proba"])
    out: dict[str, object] = {
        "n_aligned": len(rows.overlap), "n_local_a": len(rows.own_a),
        "n_local_b": len(rows.own_b), "metric": "accuracy",
    }  # fmt: skip
    if semi:  # FedSplitNN never trains the single-party heads
        out.update(acc_active_only=m["acc_active_only"], acc_passive_only=m["acc_passive_only"])
    if ds.n_classes == 2 and len(np.unique(ds.y_test)) == 2:
        from sklearn.metrics import roc_auc_score  # lazy: worker start-up

        out["auc"] = float(roc_auc_score(ds.y_test, proba[:, 1]))
    ratios = [r for step, r in m.get("est_ratio", ()) if step >= rounds - steps]
    if ratios:  # B's estimates of r_A vs the overlap's real r_A, last epoch (shrinkage)
        out["est_a_std_ratio"] = round(float(np.mean(ratios)), 4)
    if pseudo:
        last = [p for p in pseudo if p[0] >= rounds - steps]  # last epoch
        picked = np.concatenate([np.asarray(p[1], dtype=np.int64) for p in last])
        labels = np.concatenate([np.asarray(p[2], dtype=np.int64) for p in last])
        truth = ds.y_train[rows.own_a][picked]
        out["pseudo_total"] = int(sum(len(p[1]) for p in pseudo))
        out["pseudo_last_epoch"] = len(picked)
        out["pseudo_last_epoch_acc"] = float((truth == labels).mean()) if len(picked) else None
        share = np.bincount(labels, minlength=ds.n_classes) / max(1, len(labels))
        truth_share = np.bincount(ds.y_train[rows.own_a], minlength=ds.n_classes)
        out["pseudo_class_share"] = [round(float(v), 4) for v in share]  # last epoch
        out["own_a_class_share"] = [round(float(v), 4) for v in truth_share / len(rows.own_a)]
    return out


def check_cvt(spec: TrialSpec) -> None:
    """ConfigError for specs FedCVT cannot run (names and options, before any data);
    defenses, protocols and attacks that are valid but have no place in FedCVT are refused
    by the kind's ``incompatibility`` / ``attack_incompatibility``, with their reason."""
    from trainables.data import DATASETS
    from trainables.models import BOTTOMS
    from trainables.protocols import PROTOCOLS

    DATASETS.get(spec.dataset)
    BOTTOMS.get(str(spec.model))
    cvt_options(spec, True)
    PROTOCOLS.create(spec.protocol, **spec.protocol_params)
    SpecDefenses.compile(spec)
    if spec.n_parties != 2:
        raise ConfigError(
            f"ssl_variant={spec.ssl_variant!r} needs n_parties=2, got n_parties={spec.n_parties}"
        )


def rows_incompatibility(spec: TrialSpec, ds: Dataset) -> str | None:
    """Why the dataset cannot host this spec (too few columns or rows), or None."""
    reason = split_refusal(spec, ds, n_parties=2)
    if reason is not None:
        return reason
    try:
        rows = choose_rows(spec, ds, cvt_options(spec, True).n_local)
    except ConfigError as err:  # options ``check_cvt`` refuses too, when it did not run
        return str(err)
    if len(rows.own_a) == 0:
        return f"no non-overlapping rows left for FedCVT (n_aligned={len(rows.overlap)})"
    return None
