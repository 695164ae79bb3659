"""Datasets that ship with scikit-learn or are generated, so they need no files.

Why these three: they make every test and smoke run work offline in seconds — one small
binary tabular set, one small image set (to exercise image splits) and one generator whose
size and difficulty a sweep can vary.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import numpy as np

from trainables.data.cache import cached_arrays
from trainables.data.catalog import DATASETS, builtin, reject_params
from trainables.data.dataset import Dataset, build_dataset, pixel_names, stratified_split
from trainables.errors import ConfigError


def _split_dataset(
    name: str,
    X: np.ndarray,
    y: np.ndarray,
    n_classes: int,
    feature_names: tuple[str, ...],
    image_shape: tuple[int, int] | None = None,
    split: tuple[np.ndarray, np.ndarray] | None = None,
) -> Dataset:
    """``X``, ``y`` as a Dataset, split 80/20 stratified (``split``: those rows, computed
    once already)."""
    train, test = stratified_split(y) if split is None else split
    return build_dataset(
        name, X[train], y[train], X[test], y[test], n_classes, feature_names, image_shape
    )


@DATASETS.register("breast_cancer")
@builtin
def breast_cancer(data_dir: Path | None = None, **params: object) -> Dataset:
    """Wisconsin diagnostic breast cancer: 569 x 30 numeric, binary (0 malignant, 1 benign)."""
    reject_params("breast_cancer", params)
    a = _sklearn_split("load_breast_cancer")
    names = tuple(str(n) for n in a["names"])
    return _split_dataset("breast_cancer", a["X"], a["y"], 2, names, split=(a["train"], a["test"]))


@DATASETS.register("digits")
@builtin
def digits(data_dir: Path | None = None, **params: object) -> Dataset:
    """8x8 handwritten digits: 1797 x 64 pixels valued 0..16, 10 classes, row-major."""
    reject_params("digits", params)
    a, shape = _sklearn_split("load_digits"), (8, 8)
    split = (a["train"], a["test"])
    return _split_dataset("digits", a["X"], a["y"], 10, pixel_names(shape), shape, split)


def _sklearn_split(loader: str) -> dict[str, np.ndarray]:
    """``sklearn.datasets.<loader>()``'s ``X``, ``y`` and feature ``names``, with the rows
    of its stratified 80/20 split (``train``, ``test``); kept in the machine's cache
    (``<cache>/data/<loader>-sklearn<version>.npz``) after the first load.

    Why: importing scikit-learn to load these is ~0.8 s (1.2 CPU-s) in every process that
    needs them: the planner, each Tune trial, each party actor; the npz takes ~1 ms. The
    arrays are the same on every run of one scikit-learn version (the split's seed is
    fixed), so the version is in the file's name."""

    def compute() -> dict[str, np.ndarray]:
        import sklearn.datasets

        bunch = getattr(sklearn.datasets, loader)()
        train, test = stratified_split(bunch.target)
        names = np.asarray([str(n) for n in bunch.feature_names])
        return {"X": bunch.data, "y": bunch.target, "names": names, "train": train, "test": test}

    version = importlib.metadata.version("scikit-learn")
    return cached_arrays(f"data/{loader}-sklearn{version}", compute)


SYNTHETIC_DEFAULTS: dict[str, int] = {
    "n_samples": 2000,
    "n_features": 20,
    "n_classes": 2,
    "n_informative": 10,
    "random_state": 0,
}


def _int_param(key: str, value: object, low: int, high: int | None = None) -> int:
    """An int in [low, high]; bools are refused although Python counts them as ints."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ConfigError(f"synthetic: {key}={value!r} must be an integer")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ConfigError(f"synthetic: {key}={value} must be {bound}")
    return int(value)


@DATASETS.register("synthetic")
@builtin
def synthetic(data_dir: Path | None = None, **params: object) -> Dataset:
    """``make_classification`` with the given sizes; 2 clusters per class as in sklearn.

    ``n_redundant`` is sklearn's 2 where it fits and shrinks when ``n_informative`` leaves
    fewer spare features, so any valid (n_features, n_informative) pair works.
    """
    reject_params("synthetic", params, tuple(SYNTHETIC_DEFAULTS))
    p = {**SYNTHETIC_DEFAULTS, **params}
    n_classes = _int_param("n_classes", p["n_classes"], 2)
    n_features = _int_param("n_features", p["n_features"], 2)
    n_informative = _int_param("n_informative", p["n_informative"], 1, n_features)
    seed = _int_param("random_state", p["random_state"], 0)
    n_samples = _int_param("n_samples", p["n_samples"], 10 * n_classes)
    clusters = 2
    if n_classes * clusters > 2**n_informative:
        raise ConfigError(
            f"synthetic: n_classes={n_classes} needs n_informative >= "
            f"{int(np.ceil(np.log2(n_classes * clusters)))} (n_classes * 2 clusters must be "
            f"<= 2**n_informative), got n_informative={n_informative}"
        )
    from sklearn.datasets import make_classification

    X, y = make_classification(
        n_samples=n_samples,
        n_features=n_features,
        n_informative=n_informative,
        n_redundant=min(2, n_features - n_informative),
        n_classes=n_classes,
        n_clusters_per_class=clusters,
        random_state=seed,
    )
    names = tuple(f"x{i}" for i in range(n_features))
    return _split_dataset("synthetic", X, y, n_classes, names)
