"""The ``Dataset`` record every trial trains on, plus the helpers the loaders share.

Why one frozen record with read-only arrays: loaded datasets are cached in-process and
shared by every trial in a sweep, so no trial may be able to mutate what the next one sees.
Why ``feature_groups``: a vertical split hands whole *original fields* to parties; a
one-hot encoded categorical must never be torn across two parties, because then neither
party holds the field and both learn from a leak-shaped fragment of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

# Fixed so that every trial of every sweep sees the same test rows when a source has no
# official train/test split; comparisons across trials would otherwise mix split noise in.
SPLIT_SEED = 0
TEST_FRACTION = 0.2


@dataclass(frozen=True)
class Dataset:
    """A train/test pair of a numeric feature matrix and integer labels.

    Features are float32, categorical fields already one-hot encoded, and NOT scaled:
    scaling must be fitted on the rows a party actually trains on (see ``Scaler``).
    """

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    feature_names: tuple[str, ...]
    image_shape: tuple[int, int] | None
    feature_groups: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        _check_invariants(self)


def _check_invariants(ds: Dataset) -> None:
    """Fail at construction, not deep inside training, when a loader built a bad record."""
    if ds.X_train.ndim != 2 or ds.X_test.ndim != 2:
        raise ValueError(f"dataset {ds.name!r}: X_train and X_test must be 2-D")
    d = ds.X_train.shape[1]
    if ds.X_test.shape[1] != d:
        raise ValueError(
            f"dataset {ds.name!r}: X_test has {ds.X_test.shape[1]} columns, X_train has {d}"
        )
    if ds.y_train.shape != (ds.X_train.shape[0],) or ds.y_test.shape != (ds.X_test.shape[0],):
        raise ValueError(f"dataset {ds.name!r}: label vectors do not match the row counts")
    if ds.n_classes < 2:
        raise ValueError(f"dataset {ds.name!r}: n_classes={ds.n_classes}, need at least 2")
    for part, y in (("train", ds.y_train), ("test", ds.y_test)):
        if y.size and (y.min() < 0 or y.max() >= ds.n_classes):
            raise ValueError(f"dataset {ds.name!r}: {part} labels outside [0, {ds.n_classes})")
    if len(ds.feature_names) != d:
        raise ValueError(f"dataset {ds.name!r}: {len(ds.feature_names)} names for {d} columns")
    if ds.image_shape is not None and ds.image_shape[0] * ds.image_shape[1] != d:
        raise ValueError(f"dataset {ds.name!r}: image_shape {ds.image_shape} != {d} columns")
    flat = [i for group in ds.feature_groups for i in group]
    if any(not group for group in ds.feature_groups) or sorted(flat) != list(range(d)):
        raise ValueError(f"dataset {ds.name!r}: feature_groups must cover every column once")
    firsts = [min(group) for group in ds.feature_groups]
    if firsts != sorted(firsts):
        raise ValueError(f"dataset {ds.name!r}: feature_groups must be in column order")


def _frozen(arr: np.ndarray, dtype: type) -> np.ndarray:
    out: np.ndarray = np.array(arr, dtype=dtype, order="C", copy=True)
    out.setflags(write=False)
    return out


def build_dataset(
    name: str,
    X_train: np.ndarray,
    y_train: np.ndarray,
    X_test: np.ndarray,
    y_test: np.ndarray,
    n_classes: int,
    feature_names: Sequence[str],
    image_shape: tuple[int, int] | None = None,
    feature_groups: Sequence[Sequence[int]] | None = None,
) -> Dataset:
    """Cast to the canonical dtypes, freeze the arrays and validate; one column per group
    unless ``feature_groups`` says otherwise."""
    d = np.shape(X_train)[1]
    groups = (
        tuple((i,) for i in range(d))
        if feature_groups is None
        else tuple(tuple(int(i) for i in g) for g in feature_groups)
    )
    return Dataset(
        name=name,
        X_train=_frozen(X_train, np.float32),
        y_train=_frozen(y_train, np.int64),
        X_test=_frozen(X_test, np.float32),
        y_test=_frozen(y_test, np.int64),
        n_classes=int(n_classes),
        feature_names=tuple(str(n) for n in feature_names),
        image_shape=None if image_shape is None else (int(image_shape[0]), int(image_shape[1])),
        feature_groups=groups,
    )


def stratified_split(y: np.ndarray, seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (train, test) row indices of a stratified 80/20 split.

    Sorted so that rows keep their file order; training shuffles on its own.
    """
    idx = np.arange(len(y))
    from sklearn.model_selection import train_test_split  # lazy: worker start-up

    train, test = train_test_split(idx, test_size=TEST_FRACTION, random_state=seed, stratify=y)
    return np.sort(train).astype(np.int64), np.sort(test).astype(np.int64)


@dataclass(frozen=True)
class EncodedColumns:
    """Result of ``encode_columns``: matrices, names, groups, and how many test cells held
    a category unseen in training (encoded as an all-zero one-hot group)."""

    X_train: np.ndarray
    X_test: np.ndarray
    feature_names: tuple[str, ...]
    feature_groups: tuple[tuple[int, ...], ...]
    unseen_test_values: int


def encode_columns(
    train: pd.DataFrame, test: pd.DataFrame, categorical: Sequence[str]
) -> EncodedColumns:
    """One-hot the ``categorical`` columns, keep the rest numeric, in the frame's column order.

    Categories are fitted on ``train`` only (sorted), so the test matrix has exactly the
    training columns; a test value never seen in training becomes an all-zero group rather
    than a new column, because a model cannot have weights for a column it never saw.
    """
    cat = set(categorical)
    train_parts: list[np.ndarray] = []
    test_parts: list[np.ndarray] = []
    names: list[str] = []
    groups: list[tuple[int, ...]] = []
    unseen = 0
    col = 0
    for field in train.columns:
        if field in cat:
            levels = sorted(str(v) for v in pd.unique(train[field].astype(str)))
            parts = []
            for frame in (train, test):
                codes = pd.Categorical(frame[field].astype(str), categories=levels).codes
                onehot = np.zeros((len(frame), len(levels)), dtype=np.float32)
                hit = codes >= 0
                onehot[np.flatnonzero(hit), codes[hit]] = 1.0
                parts.append(onehot)
            unseen += int((parts[1].sum(axis=1) == 0).sum())
            names.extend(f"{field}={level}" for level in levels)
            width = len(levels)
        else:
            parts = [
                frame[field].to_numpy(dtype=np.float32).reshape(-1, 1) for frame in (train, test)
            ]
            names.append(str(field))
            width = 1
        train_parts.append(parts[0])
        test_parts.append(parts[1])
        groups.append(tuple(range(col, col + width)))
        col += width
    return EncodedColumns(
        X_train=np.hstack(train_parts),
        X_test=np.hstack(test_parts),
        feature_names=tuple(names),
        feature_groups=tuple(groups),
        unseen_test_values=unseen,
    )


def pixel_names(image_shape: tuple[int, int]) -> tuple[str, ...]:
    """``px_<row>_<col>`` for row-major pixel columns, so a split can be read off its names."""
    h, w = image_shape
    return tuple(f"px_{r}_{c}" for r in range(h) for c in range(w))
