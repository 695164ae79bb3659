"""What tree and Paillier-LR trials share: party data, model parameters, checks, records.

Tree trials (``trainables/kinds/tree.py``) and Paillier LR (``kinds/paillier_lr.py``)
evaluate only attacks whose class says ``family = "trees"`` (they read a passive party's
``TreeView``, ``trainables/attacks/tree_grad_li.py``); NN-VFL attacks read bottom models
and embeddings these models do not have, and NN defenses hook NN messages these models
do not send. ``refusal`` and ``attack_refusal`` say so with the reason, so the planner
drops such cells before running.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainables.data import Dataset, check_columns, columns_for, load_dataset, split_samples
from trainables.errors import ConfigError
from trainables.records import Record
from trainables.registry import Registry
from trainables.spec import TrialSpec
from trainables.transport.placement import LOCAL, Placement


@dataclass(frozen=True)
class TreeData:
    """Columns per party (party order; the last is active) and the active party's labels."""

    X_train: tuple[np.ndarray, ...]  # per party (N, d_k), raw feature values
    X_test: tuple[np.ndarray, ...]  # per party (M, d_k)
    y_train: np.ndarray  # (N,) active party only
    y_test: np.ndarray  # (M,) active party only
    n_classes: int


@dataclass
class Outcome:
    mp: float
    rounds: int
    comm_bytes: int
    train_seconds: float
    extra: dict[str, Any] = field(default_factory=dict)
    view: Any = None  # party 0's TreeView (when observed): what that passive party received
    view_labels: np.ndarray | None = None  # the labels of the view's rows (for the judge)


Runner = Callable[[TrialSpec, TreeData, Placement, bool], Outcome]
TREE_MODELS: Registry[Runner] = Registry("tree model")
PARAMS: dict[str, tuple[type, ...]] = {}  # model -> its params dataclass(es)
FLAGS = ("taylor",)  # 0/1 model_params (``encrypt`` is read by ``encrypt_flag``)


def register(name: str, params: type) -> Callable[[Runner], Runner]:
    def add(fn: Runner) -> Runner:
        TREE_MODELS.register(name, fn)
        PARAMS[name] = (params,)
        return fn

    return add


def model_params(spec: TrialSpec, params: type) -> Any:
    """The params dataclass from ``spec.model_params`` (+ ``encrypt``); ConfigError if bad."""
    allowed = {f.name: f.type for f in dataclasses.fields(params)}
    values = {k: v for k, v in spec.model_params.items() if k != "encrypt"}
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise ConfigError(
            f"model_params {unknown} not known for model {spec.model!r}; allowed: "
            + ", ".join(sorted([*allowed, "encrypt"]))
        )
    out = params(**values)
    for f in dataclasses.fields(out):
        value = getattr(out, f.name)
        zero_ok = f.name in FLAGS
        if not isinstance(value, int | float) or value < 0 or (value == 0 and not zero_ok):
            raise ConfigError(f"model_params.{f.name}={value!r} must be a positive number")
    return out


def encrypt_flag(spec: TrialSpec, default: bool) -> bool:
    value = spec.model_params.get("encrypt", int(default))
    if value not in (0, 1):
        raise ConfigError(f"model_params.encrypt={value!r}: allowed 0 or 1")
    return bool(value)


def tree_data(spec: TrialSpec, ds: Dataset) -> TreeData:
    columns = columns_for(spec, ds)
    samples = split_samples(
        len(ds.y_train), spec.aligned_ratio, spec.n_labeled, seed=spec.seed, y=ds.y_train,
        n_aligned=spec.n_aligned,
    )  # fmt: skip
    rows = samples.labeled
    return TreeData(
        X_train=tuple(np.ascontiguousarray(ds.X_train[rows][:, c]) for c in columns),
        X_test=tuple(np.ascontiguousarray(ds.X_test[:, c]) for c in columns),
        y_train=np.asarray(ds.y_train[rows]),
        y_test=np.asarray(ds.y_test),
        n_classes=ds.n_classes,
    )


def refusal(spec: TrialSpec, messages: str) -> str | None:
    """Why ``spec``'s defense, training-time attack or SSL variant cannot run on a model
    whose ``messages`` are as described, or None."""
    if spec.defense != "none" or spec.stack:
        return (f"model={spec.model!r}: defenses are defined for NN-VFL models only (they "
                f"hook NN embeddings and gradients); {messages}; use defense: none")  # fmt: skip
    if spec.train_attack != "none":
        return (f"model={spec.model!r}: training-time attacks are defined for NN-VFL models "
                "only; use train_attack: none")  # fmt: skip
    if spec.ssl_variant != "none":
        return f"model={spec.model!r}: ssl_variant must be none"
    return None


def rows_refusal(spec: TrialSpec, ds: Dataset) -> str | None:
    """Why ``ds`` cannot host ``spec``'s parties and rows, or None."""
    try:
        check_columns(spec, ds)
        split_samples(
            len(ds.y_train), spec.aligned_ratio, spec.n_labeled, seed=spec.seed,
            n_aligned=spec.n_aligned,
        )  # fmt: skip
    except ConfigError as err:
        return str(err)
    return None


def checked_rows_refusal(
    check: Callable[[TrialSpec], None], spec: TrialSpec, data_dir: str | Path | None
) -> str | None:
    """A tree kind's ``incompatibility``: its ``check``'s refusal, else ``rows_refusal``."""
    try:
        check(spec)
    except ConfigError as err:
        return str(err)
    return rows_refusal(spec, load_dataset(spec.dataset, data_dir, **spec.dataset_params))


def attack_refusal(spec: TrialSpec, name: str) -> str | None:
    """Why attack ``name`` cannot be evaluated on a tree / Paillier model, or None."""
    from trainables.attacks import ATTACKS

    if ATTACKS.get(name).family != "trees":
        return (f"attack {name!r} reads NN-VFL models and embeddings; model={spec.model!r} "
                "is a tree / Paillier model (its attacks: tree_grad_li)")  # fmt: skip
    return None


TREE_MESSAGES = (
    "its messages are (encrypted) per-row statistics, per-bin sums, row ids "
    "and routing bits, not NN embeddings or gradients"
)


def tree_check(spec: TrialSpec) -> None:
    """ConfigError if ``spec`` names a tree model with bad parameters or unsupported parts."""
    load_models()
    TREE_MODELS.get(str(spec.model))
    model_params(spec, PARAMS[str(spec.model)][0])
    encrypt_flag(spec, True)
    reason = refusal(spec, TREE_MESSAGES)
    if reason is not None:
        raise ConfigError(reason)


def run_tree_trial(
    spec: TrialSpec,
    placement: Placement = LOCAL,
    *,
    attacks: Sequence[tuple[str, dict[str, Any]]] = (),
    dataset: Dataset | None = None,
    data_dir: str | Path | None = None,
) -> list[Record]:
    """A tree model's trial: the clean record, then one record per tree attack."""
    tree_check(spec)
    ds = dataset if dataset is not None else load_dataset(spec.dataset, data_dir,
                                                          **spec.dataset_params)  # fmt: skip
    data = tree_data(spec, ds)
    runner = TREE_MODELS.get(str(spec.model))
    return records(spec, len(data.y_train), lambda observe: runner(spec, data, placement, observe),
                   attacks, y_test=data.y_test)  # fmt: skip


def records(
    spec: TrialSpec,
    n_labeled: int,
    run: Callable[[bool], Outcome],
    attacks: Sequence[tuple[str, dict[str, Any]]],
    y_test: np.ndarray | None = None,
) -> list[Record]:
    """The clean record of ``run(observe)`` and one record per tree attack on its view.

    ``y_test`` (n_test,): the rows the MP (an accuracy) is measured on, for ``mp_se``."""
    from trainables.attacks.chance import main_task_se  # lazy, as the attacks are

    for name, _ in attacks:
        reason = attack_refusal(spec, name)
        if reason is not None:
            raise ConfigError(reason)
    start = time.perf_counter()
    out = run(bool(attacks))
    wall = time.perf_counter() - start
    extra = {"wall_seconds": round(wall, 4), **out.extra}
    clean = Record.clean(
        spec,
        n_labeled,
        mp=out.mp,
        mp_se=main_task_se(out.mp, y_test),
        rounds=out.rounds,
        comm_bytes=out.comm_bytes,
        train_seconds=round(out.train_seconds, 4),
        extra=json.dumps(extra, sort_keys=True),
        trial_id=spec.config_hash,
    )
    return [clean, *(_attack_record(clean, out, name, params) for name, params in attacks)]


def _attack_record(clean: Record, out: Outcome, name: str, params: dict[str, Any]) -> Record:
    """Run a tree attack on party 0's view; the common label rule scores it, with its
    baseline from the labels of the scored view rows (``chance.score_labels``). The MP
    and its SE stay the clean record's: the attack reads the view, it tampers nothing."""
    from trainables.attacks import ATTACKS
    from trainables.attacks.chance import score_labels
    from trainables.attacks.harness import merged_extra

    attack = ATTACKS.create(name, **params)
    start = time.perf_counter()
    guess = attack.run(out.view)
    assert out.view_labels is not None
    score = score_labels(guess, out.view_labels, np.zeros(0, dtype=np.int64))
    extra = merged_extra(clean.extra, {**attack.record_extra(), "attack_rows": len(guess.rows)})
    return dataclasses.replace(
        clean,
        attack=name,
        attack_type=attack.info.type,
        attacker_party=out.view.party_id,
        **score.ap_fields(),  # ap beside its baseline; mp and mp_se: the clean record's
        attack_seconds=round(time.perf_counter() - start, 4),
        extra=extra,
    )


def load_models() -> None:
    """Import the model modules once (they register themselves)."""
    from trainables.trees import models  # noqa: F401
