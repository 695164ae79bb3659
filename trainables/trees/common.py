"""What every tree model and Paillier LR is given and returns, and the tree-model registry.

Why its own module: the model runners (``models.py``) register here and read their data
and parameters from here, and the trial code (``run.py``) imports the runners; with these
pieces below both, neither imports the other back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from trainables.data import Dataset, split_for
from trainables.errors import ConfigError
from trainables.registry import Registry
from trainables.rounds import TrainResult
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


@dataclass(frozen=True)
class TreeData:
    """Columns per party (party order; the last is active) and the active party's labels."""

    X_train: tuple[np.ndarray, ...]  # per party (N, d_k), raw feature values
    X_test: tuple[np.ndarray, ...]  # per party (M, d_k)
    y_train: np.ndarray  # (N,) active party only
    y_test: np.ndarray  # (M,) active party only
    n_classes: int


Runner = Callable[[TrialSpec, TreeData, Placement, bool], TrainResult]
TREE_MODELS: Registry[Runner] = Registry("tree model")
PARAMS: dict[str, tuple[type, ...]] = {}  # model -> its params dataclass(es)
P = TypeVar("P", bound="DataclassInstance")  # a model's params dataclass
FLAGS = ("taylor",)  # 0/1 model_params (``encrypt`` is read by ``encrypt_flag``)


def register(name: str, params: type) -> Callable[[Runner], Runner]:
    def add(fn: Runner) -> Runner:
        TREE_MODELS.register(name, fn)
        PARAMS[name] = (params,)
        return fn

    return add


def model_params(spec: TrialSpec, params: type[P]) -> P:
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
    """Each party's raw columns of the aligned, labeled rows (``split_for``, as NN VFL)."""
    split = split_for(spec, ds)
    rows = split.rows.labeled
    return TreeData(
        X_train=tuple(np.ascontiguousarray(ds.X_train[rows][:, c]) for c in split.columns),
        X_test=tuple(np.ascontiguousarray(ds.X_test[:, c]) for c in split.columns),
        y_train=np.asarray(ds.y_train[rows]),
        y_test=np.asarray(ds.y_test),
        n_classes=ds.n_classes,
    )
