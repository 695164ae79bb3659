"""Tabular datasets read from a data directory laid out like ``shared/datasets``.

Why these: Adult, Credit (Taiwan default), Nursery and Pima Diabetes are the tabular
benchmarks VFL papers and codebases (VFLAIR, label-inference attacks) report on, so results
here can be set next to theirs. Each loader follows the file quirks documented in
``shared/datasets/README.md``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from trainables.data.catalog import DATASETS, classes, data_file, reject_params
from trainables.data.dataset import Dataset, build_dataset, encode_columns, stratified_split
from trainables.errors import ConfigError

ADULT_COLUMNS = (
    "age", "workclass", "fnlwgt", "education", "education-num", "marital-status",
    "occupation", "relationship", "race", "sex", "capital-gain", "capital-loss",
    "hours-per-week", "native-country", "income",
)  # fmt: skip
ADULT_CATEGORICAL = (
    "workclass", "education", "marital-status", "occupation", "relationship", "race",
    "sex", "native-country",
)  # fmt: skip
NURSERY_COLUMNS = (
    "parents", "has_nurs", "form", "children", "housing", "finance", "social", "health",
    "class",
)  # fmt: skip
CREDIT_LABEL = "default.payment.next.month"


def _read_adult(path: Path, skiprows: int) -> pd.DataFrame:
    """One Adult file as strings for categoricals; ``?`` stays a literal category."""
    frame = pd.read_csv(
        path,
        header=None,
        names=list(ADULT_COLUMNS),
        skipinitialspace=True,
        skiprows=skiprows,
        na_filter=False,
        skip_blank_lines=True,
        dtype={c: str for c in (*ADULT_CATEGORICAL, "income")},
    )
    if frame.shape[1] != len(ADULT_COLUMNS) or frame.empty:
        raise ConfigError(f"{path}: expected {len(ADULT_COLUMNS)} comma-separated columns")
    return frame


def _adult_labels(income: pd.Series, path: Path) -> np.ndarray:
    """1 for ``>50K`` and 0 for ``<=50K``; the test file writes both with a trailing '.'."""
    text = income.astype(str).str.strip().str.rstrip(".")
    bad = sorted(set(text) - {">50K", "<=50K"})
    if bad:
        raise ConfigError(f"{path}: income labels must be >50K or <=50K, found {bad[:5]}")
    return (text == ">50K").to_numpy().astype(np.int64)


@DATASETS.register("adult")
@classes(2)
def adult(data_dir: Path | None, **params: object) -> Dataset:
    """UCI Adult with its official split: adult.data (32,561) / adult.test (16,281).

    adult.test starts with a ``|1x3 Cross validator`` line, which is skipped. ``?`` (missing)
    is kept as its own category because missingness is informative here (e.g. occupation
    ``?`` coincides with not working). Categories are fitted on the training file; the
    label is ``income > 50K``. 6 numeric + 8 one-hot fields = 108 columns, 14 groups.
    """
    reject_params("adult", params)
    train_path = data_file(data_dir, "adult/adult.data", "adult")
    test_path = data_file(data_dir, "adult/adult.test", "adult")
    train = _read_adult(train_path, skiprows=0)
    test = _read_adult(test_path, skiprows=1)
    enc = encode_columns(
        train.drop(columns="income"), test.drop(columns="income"), ADULT_CATEGORICAL
    )
    return build_dataset(
        "adult",
        enc.X_train,
        _adult_labels(train["income"], train_path),
        enc.X_test,
        _adult_labels(test["income"], test_path),
        2,
        enc.feature_names,
        feature_groups=enc.feature_groups,
    )


def _numeric_csv(name: str, path: Path, label: str, drop: tuple[str, ...] = ()) -> Dataset:
    """A headered all-numeric CSV with a 0/1 label column, split 80/20 stratified (seed 0)."""
    frame = pd.read_csv(path)
    missing = [c for c in (label, *drop) if c not in frame.columns]
    if missing:
        raise ConfigError(f"{path}: column(s) {missing} not found; header: {list(frame.columns)}")
    features = frame.drop(columns=[label, *drop])
    X = features.to_numpy(dtype=np.float64)
    if np.isnan(X).any():
        raise ConfigError(f"{path}: non-numeric or empty feature values")
    y = frame[label].to_numpy().astype(np.int64)
    if not set(np.unique(y)) <= {0, 1}:
        raise ConfigError(f"{path}: label {label!r} must be 0/1, found {sorted(set(y))[:5]}")
    train, test = stratified_split(y)
    return build_dataset(
        name, X[train], y[train], X[test], y[test], 2, tuple(str(c) for c in features.columns)
    )


@DATASETS.register("credit")
@classes(2)
def credit(data_dir: Path | None, **params: object) -> Dataset:
    """Default of credit card clients (Taiwan): 30,000 rows, 23 features all kept numeric.

    SEX/EDUCATION/MARRIAGE/PAY_* are codes, but VFLAIR and most VFL papers feed them as
    numbers, so we do too for comparability. ``ID`` is dropped. Some money values are
    written like ``5e+05``, hence float parsing.
    """
    reject_params("credit", params)
    path = data_file(data_dir, "credit_card/UCI_Credit_Card.csv", "credit")
    return _numeric_csv("credit", path, CREDIT_LABEL, drop=("ID",))


@DATASETS.register("diabetes")
@classes(2)
def diabetes(data_dir: Path | None, **params: object) -> Dataset:
    """Pima Indians Diabetes: 768 rows, 8 numeric features, label ``Outcome``.

    Zeros in Glucose/BloodPressure/BMI etc. are de facto missing values in this file; they
    are kept as-is (as the usual benchmarks do) rather than imputed.
    """
    reject_params("diabetes", params)
    path = data_file(data_dir, "diabetes/diabetes.csv", "diabetes")
    return _numeric_csv("diabetes", path, "Outcome")


@DATASETS.register("nursery")
@classes(5)
def nursery(data_dir: Path | None, **params: object) -> Dataset:
    """UCI Nursery: 12,960 rows, 8 categorical fields one-hot (27 columns), 5 classes.

    Classes are numbered in name order: not_recom, priority, recommend, spec_prior,
    very_recom. ``recommend`` has only 2 rows; the stratified split puts both in train, so the
    test set holds no ``recommend`` row.
    Blank lines (the trailing one) are dropped.
    """
    reject_params("nursery", params)
    path = data_file(data_dir, "nursery/nursery.data", "nursery")
    frame = pd.read_csv(
        path, header=None, names=list(NURSERY_COLUMNS), dtype=str, na_filter=False,
        skip_blank_lines=True, skipinitialspace=True,
    )  # fmt: skip
    frame = frame[frame["class"].str.strip() != ""]
    classes = sorted(frame["class"].unique())
    if len(classes) < 2:
        raise ConfigError(f"{path}: found {len(classes)} class(es), need at least 2")
    y = pd.Categorical(frame["class"], categories=classes).codes.astype(np.int64)
    train, test = stratified_split(y)
    features = frame.drop(columns="class")
    enc = encode_columns(
        features.iloc[train], features.iloc[test], [c for c in NURSERY_COLUMNS if c != "class"]
    )
    return build_dataset(
        "nursery",
        enc.X_train,
        y[train],
        enc.X_test,
        y[test],
        len(classes),
        enc.feature_names,
        feature_groups=enc.feature_groups,
    )
