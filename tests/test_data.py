"""Tests of the dataset layer on real data (sklearn built-ins and shared/datasets files)."""

from __future__ import annotations

import dataclasses
import gzip
import re
from pathlib import Path

import numpy as np
import pytest

from trainables.data import (
    DATASETS,
    Dataset,
    SampleSplit,
    Scaler,
    default_data_dir,
    default_scaler_kind,
    load_dataset,
    read_idx,
    split_samples,
    vertical_split,
)
from trainables.errors import ConfigError, MissingDataError


def _check_dataset(ds: Dataset, n_features: int, n_classes: int) -> None:
    assert ds.X_train.shape[1] == ds.X_test.shape[1] == n_features
    assert ds.X_train.dtype == ds.X_test.dtype == np.float32
    assert ds.y_train.dtype == ds.y_test.dtype == np.int64
    assert ds.n_classes == n_classes
    assert set(np.unique(ds.y_train)) <= set(range(n_classes))
    assert len(ds.feature_names) == n_features
    flat = [i for group in ds.feature_groups for i in group]
    assert sorted(flat) == list(range(n_features)) and len(flat) == n_features
    assert not ds.X_train.flags.writeable and not ds.y_test.flags.writeable


def _check_partition(parts: list[np.ndarray], d: int) -> None:
    for p in parts:
        assert p.dtype == np.int64 and np.all(np.diff(p) > 0)
    flat = np.concatenate(parts)
    assert len(flat) == d and np.array_equal(np.sort(flat), np.arange(d))


def _data_dir() -> Path:
    """The shared datasets directory, or skip: file-backed tests need the offline data."""
    path = default_data_dir()
    if path is None or not path.is_dir():
        pytest.skip("no data directory: set VFLSWEEP_DATA or provide ../shared/datasets")
    return path


def _file_dataset(name: str, relative: str) -> Dataset:
    path = _data_dir()
    if not (path / relative).is_file():
        pytest.skip(f"{path / relative} is absent")
    return load_dataset(name, path)


# --- built-in datasets -------------------------------------------------------------------


def test_breast_cancer_shapes() -> None:
    ds = load_dataset("breast_cancer")
    _check_dataset(ds, 30, 2)
    assert len(ds.y_train) + len(ds.y_test) == 569 and len(ds.y_test) == 114
    assert ds.image_shape is None
    assert load_dataset("breast_cancer") is ds  # cached


def test_digits_shapes() -> None:
    ds = load_dataset("digits")
    _check_dataset(ds, 64, 10)
    assert len(ds.y_train) + len(ds.y_test) == 1797
    assert ds.image_shape == (8, 8)
    assert ds.X_train.max() == 16.0  # unscaled pixels
    assert ds.feature_names[9] == "px_1_1"


def test_synthetic_params_and_errors() -> None:
    ds = load_dataset("synthetic")
    _check_dataset(ds, 20, 2)
    assert len(ds.y_train) == 1600 and len(ds.y_test) == 400
    small = load_dataset("synthetic", n_samples=300, n_features=6, n_classes=3, n_informative=3)
    _check_dataset(small, 6, 3)
    assert len(small.y_train) + len(small.y_test) == 300
    with pytest.raises(ConfigError, match="n_informative=30"):
        load_dataset("synthetic", n_informative=30)
    with pytest.raises(ConfigError, match="n_classes=9"):
        load_dataset("synthetic", n_classes=9, n_informative=2)
    with pytest.raises(ConfigError, match="n_sample"):
        load_dataset("synthetic", n_sample=100)


def test_unknown_dataset_lists_known_names() -> None:
    with pytest.raises(ConfigError) as err:
        load_dataset("cifar99")
    msg = str(err.value)
    assert "cifar99" in msg
    for name in ("adult", "breast_cancer", "credit", "digits", "mnist", "nursery", "synthetic"):
        assert name in msg and name in DATASETS


def test_builtin_rejects_unknown_params() -> None:
    with pytest.raises(ConfigError, match="foo"):
        load_dataset("digits", foo=1)


# --- vertical_split ----------------------------------------------------------------------


def test_digits_halves_are_left_and_right() -> None:
    ds = load_dataset("digits")
    parts = vertical_split(ds, 2)
    _check_partition(parts, 64)
    left = [r * 8 + c for r in range(8) for c in range(4)]
    assert parts[0].tolist() == left
    assert parts[1].tolist() == [r * 8 + c for r in range(8) for c in range(4, 8)]
    assert [ds.feature_names[i] for i in parts[0][:5]] == [
        "px_0_0", "px_0_1", "px_0_2", "px_0_3", "px_1_0",
    ]  # fmt: skip
    halves = vertical_split(ds, 2, "halves")
    assert all(np.array_equal(a, b) for a, b in zip(parts, halves, strict=True))


def test_image_bands_are_vflairs_top_and_bottom_halves() -> None:
    ds = load_dataset("digits")  # 8 x 8
    top, bottom = vertical_split(ds, 2, "bands")
    _check_partition([top, bottom], 64)
    assert top.tolist() == list(range(32)) and bottom.tolist() == list(range(32, 64))
    assert [len(b) for b in vertical_split(ds, 3, "bands")] == [24, 24, 16]  # 3, 3, 2 rows
    with pytest.raises(ConfigError, match="image rows"):
        vertical_split(ds, 9, "bands")


def test_digits_quarters_and_stripes() -> None:
    ds = load_dataset("digits")
    quarters = vertical_split(ds, 4)
    _check_partition(quarters, 64)
    expected = [
        [r * 8 + c for r in rows for c in cols]
        for rows in (range(4), range(4, 8))
        for cols in (range(4), range(4, 8))
    ]
    assert [q.tolist() for q in quarters] == expected
    stripes = vertical_split(ds, 3)
    _check_partition(stripes, 64)
    assert [len(s) for s in stripes] == [24, 24, 16]  # widths 3, 3, 2 columns of 8 rows
    assert stripes[0].tolist()[:4] == [0, 1, 2, 8]


def test_blocks_on_tabular() -> None:
    ds = load_dataset("breast_cancer")
    parts = vertical_split(ds, 4)
    _check_partition(parts, 30)
    assert [len(p) for p in parts] == [8, 8, 7, 7]
    assert parts[0].tolist() == list(range(8))


def test_split_errors() -> None:
    digits = load_dataset("digits")
    tab = load_dataset("breast_cancer")
    with pytest.raises(ConfigError, match=r"n_parties=9.*'digits'.*\[2, 8\]"):
        vertical_split(digits, 9)
    with pytest.raises(ConfigError, match=r"n_parties=31.*'breast_cancer'.*\[2, 30\]"):
        vertical_split(tab, 31)
    with pytest.raises(ConfigError, match="n_parties=1"):
        vertical_split(tab, 1)
    with pytest.raises(ConfigError, match=r"diagonal.*blocks.*halves.*quarters"):
        vertical_split(tab, 2, "diagonal")
    with pytest.raises(ConfigError, match=r"'halves' needs an image dataset.*breast_cancer"):
        vertical_split(tab, 2, "halves")
    with pytest.raises(ConfigError, match="needs n_parties=4, got n_parties=2"):
        vertical_split(digits, 2, "quarters")


def _assert_groups_intact(ds: Dataset, parts: list[np.ndarray]) -> None:
    owner = np.empty(ds.X_train.shape[1], dtype=np.int64)
    for k, cols in enumerate(parts):
        owner[cols] = k
    for group in ds.feature_groups:
        assert len(set(owner[list(group)].tolist())) == 1, group


@pytest.mark.shared_data
def test_blocks_never_split_one_hot_groups() -> None:
    ds = _file_dataset("nursery", "nursery/nursery.data")
    assert len(ds.feature_groups) == 8 and ds.X_train.shape[1] == 27
    for n in range(2, 9):
        parts = vertical_split(ds, n)
        _check_partition(parts, 27)
        _assert_groups_intact(ds, parts)
    with pytest.raises(ConfigError, match=r"n_parties=9.*\[2, 8\]"):
        vertical_split(ds, 9)


# --- split_samples -----------------------------------------------------------------------


def test_split_samples_sizes_and_subsets() -> None:
    s = split_samples(1000, aligned_ratio=0.4, n_labeled=50, seed=3)
    assert isinstance(s, SampleSplit)
    assert len(s.aligned) == 400 and len(s.unaligned) == 600 and len(s.labeled) == 50
    assert np.intersect1d(s.aligned, s.unaligned).size == 0
    assert np.array_equal(np.union1d(s.aligned, s.unaligned), np.arange(1000))
    assert np.isin(s.labeled, s.aligned).all()
    for arr in (s.aligned, s.unaligned, s.labeled):
        assert arr.dtype == np.int64 and np.all(np.diff(arr) > 0)
    full = split_samples(10)
    assert full.aligned.tolist() == list(range(10)) and full.unaligned.size == 0
    assert np.array_equal(full.labeled, full.aligned)


def test_split_samples_deterministic_in_seed() -> None:
    a = split_samples(500, 0.5, 20, seed=7)
    b = split_samples(500, 0.5, 20, seed=7)
    c = split_samples(500, 0.5, 20, seed=8)
    assert all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("aligned", "labeled"))
    assert not np.array_equal(a.aligned, c.aligned)


def test_split_samples_labels_every_class() -> None:
    y = load_dataset("digits").y_train
    for seed in range(5):
        s = split_samples(len(y), 0.5, n_labeled=10, seed=seed, y=y)
        assert sorted(set(y[s.labeled].tolist())) == list(range(10))


def test_split_samples_errors() -> None:
    with pytest.raises(ConfigError, match=r"aligned_ratio=0 is outside \(0, 1\]"):
        split_samples(100, aligned_ratio=0)
    with pytest.raises(ConfigError, match=r"aligned_ratio=1.5 is outside \(0, 1\]"):
        split_samples(100, aligned_ratio=1.5)
    with pytest.raises(ConfigError, match=r"n_labeled=60.*50 aligned rows"):
        split_samples(100, aligned_ratio=0.5, n_labeled=60)
    with pytest.raises(ConfigError, match="n_labeled=0"):
        split_samples(100, n_labeled=0)


# --- scaling -----------------------------------------------------------------------------


def test_scaler_fits_train_rows_only() -> None:
    ds = load_dataset("breast_cancer")
    poisoned = dataclasses.replace(ds, X_test=np.full_like(ds.X_test, 1e6))
    for kind in ("standard", "minmax"):
        clean = Scaler.fit(ds.X_train, kind)
        other = Scaler.fit(poisoned.X_train, kind)
        assert np.array_equal(clean.offset, other.offset)
        assert np.array_equal(clean.scale, other.scale)
        out = clean.transform(poisoned.X_test)
        assert out.dtype == np.float32 and out.min() > 1.0  # far-off test rows, not clipped
    train = Scaler.fit(ds.X_train, "standard").transform(ds.X_train)
    assert np.allclose(train.mean(axis=0), 0, atol=1e-4)
    assert np.allclose(train.std(axis=0), 1, atol=1e-3)


def test_scaler_constant_columns_and_kinds() -> None:
    digits = load_dataset("digits")
    assert default_scaler_kind(digits) == "minmax"
    assert default_scaler_kind(load_dataset("breast_cancer")) == "standard"
    scaled = Scaler.fit(digits.X_train, "minmax").transform(digits.X_train)
    assert scaled.min() == 0.0 and scaled.max() == 1.0 and np.isfinite(scaled).all()
    assert np.isfinite(Scaler.fit(digits.X_train, "standard").transform(digits.X_test)).all()
    with pytest.raises(ConfigError, match=r"robust.*standard.*minmax"):
        Scaler.fit(digits.X_train, "robust")


# --- file datasets -----------------------------------------------------------------------


@pytest.mark.shared_data
def test_adult() -> None:
    ds = _file_dataset("adult", "adult/adult.data")
    assert len(ds.y_train) == 32561 and len(ds.y_test) == 16281
    _check_dataset(ds, ds.X_train.shape[1], 2)
    assert ds.X_train.shape[1] == 108 and len(ds.feature_groups) == 14
    assert abs(ds.y_train.mean() - 7841 / 32561) < 1e-9 and abs(ds.y_test.mean() - 0.236) < 0.01
    assert "workclass=?" in ds.feature_names  # '?' is its own category
    assert ds.feature_names[0] == "age" and ds.X_train[0, 0] == 39.0
    cat_groups = [g for g in ds.feature_groups if len(g) > 1]
    for g in cat_groups:  # every row has exactly one hot column per categorical field
        assert np.all(ds.X_train[:, list(g)].sum(axis=1) == 1.0)
    for n in (2, 3, 5, 14):
        _assert_groups_intact(ds, vertical_split(ds, n))


@pytest.mark.shared_data
def test_credit() -> None:
    ds = _file_dataset("credit", "credit_card/UCI_Credit_Card.csv")
    _check_dataset(ds, 23, 2)
    assert len(ds.y_train) + len(ds.y_test) == 30000 and len(ds.y_test) == 6000
    assert "ID" not in ds.feature_names and ds.feature_names[0] == "LIMIT_BAL"
    total = int(ds.y_train.sum() + ds.y_test.sum())
    assert total == 6636


@pytest.mark.shared_data
def test_nursery() -> None:
    ds = _file_dataset("nursery", "nursery/nursery.data")
    _check_dataset(ds, 27, 5)
    assert len(ds.y_train) + len(ds.y_test) == 12960
    counts = np.bincount(np.concatenate([ds.y_train, ds.y_test]), minlength=5)
    # class order by name: not_recom, priority, recommend, spec_prior, very_recom
    assert counts.tolist() == [4320, 4266, 2, 4044, 328]


@pytest.mark.shared_data
def test_diabetes() -> None:
    ds = _file_dataset("diabetes", "diabetes/diabetes.csv")
    _check_dataset(ds, 8, 2)
    assert len(ds.y_train) + len(ds.y_test) == 768
    assert int(ds.y_train.sum() + ds.y_test.sum()) == 268


@pytest.mark.shared_data
def test_read_idx_t10k_labels() -> None:
    path = _data_dir() / "mnist" / "t10k-labels-idx1-ubyte.gz"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    labels = read_idx(path)
    assert labels.shape == (10000,) and labels.dtype == np.uint8
    assert labels[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]


@pytest.mark.shared_data
def test_mnist_test_set_fallback() -> None:
    ds = _file_dataset("mnist", "mnist/t10k-images-idx3-ubyte.gz")
    if (_data_dir() / "mnist" / "train-images-idx3-ubyte.gz").is_file():
        pytest.skip("official training images present; the 10k fallback is not used")
    _check_dataset(ds, 784, 10)
    assert len(ds.y_train) == 8000 and len(ds.y_test) == 2000
    assert ds.image_shape == (28, 28) and ds.X_train.max() == 255.0
    assert set(np.unique(ds.y_test).tolist()) == set(range(10))
    parts = vertical_split(ds, 2)
    assert parts[0][:15].tolist() == [*range(14), 28]


def test_missing_files_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError) as err:
        load_dataset("adult", tmp_path)
    msg = str(err.value)
    assert str(tmp_path.resolve() / "adult" / "adult.data") in msg
    assert "--data-dir" in msg and "VFLSWEEP_DATA" in msg
    with pytest.raises(MissingDataError, match=r"t10k-images-idx3-ubyte\.gz"):
        load_dataset("mnist", str(tmp_path))


def test_data_dir_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VFLSWEEP_DATA", str(tmp_path))
    assert default_data_dir() == tmp_path
    with pytest.raises(MissingDataError, match=re.escape(str(tmp_path.resolve() / "diabetes"))):
        load_dataset("diabetes")
    assert load_dataset("digits").name == "digits"  # built-ins ignore the data directory


def _write_idx(path: Path, arr: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, arr.ndim]) + np.asarray(arr.shape, dtype=">u4").tobytes()
    with gzip.open(path, "wb") as fh:
        fh.write(header + np.ascontiguousarray(arr, dtype=np.uint8).tobytes())


def _small_mnist(tmp_path: Path, n_train: int, n_test: int) -> tuple[np.ndarray, np.ndarray]:
    """Real MNIST images rewritten as a small train/t10k pair in ``tmp_path``: (the t10k
    images, labels) the first ``n_train`` and the next ``n_test`` rows were taken from."""
    src = _data_dir() / "mnist"
    if not (src / "t10k-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"{src / 't10k-images-idx3-ubyte.gz'} is absent")
    images = read_idx(src / "t10k-images-idx3-ubyte.gz")
    labels = read_idx(src / "t10k-labels-idx1-ubyte.gz")
    (tmp_path / "mnist").mkdir()
    for part, rows in (("train", slice(0, n_train)), ("t10k", slice(n_train, n_train + n_test))):
        _write_idx(tmp_path / "mnist" / f"{part}-images-idx3-ubyte.gz", images[rows])
        _write_idx(tmp_path / "mnist" / f"{part}-labels-idx1-ubyte.gz", labels[rows])
    return images, labels


@pytest.mark.shared_data
def test_mnist_official_split_when_train_images_exist(tmp_path: Path) -> None:
    """Real MNIST images rewritten as a small train/t10k pair take the official-split path."""
    images, _ = _small_mnist(tmp_path, 120, 50)
    ds = load_dataset("mnist", tmp_path)
    assert len(ds.y_train) == 120 and len(ds.y_test) == 50
    assert ds.y_train[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
    assert np.array_equal(ds.X_test[0].reshape(28, 28), images[120].astype(np.float32))


@pytest.mark.shared_data
def test_mnist_first_classes_as_vflair_builds_its_binary_mnist(tmp_path: Path) -> None:
    """``classes: 2``: the rows of digits 0 and 1 only (VFLAIR's LI_2 task), both splits."""
    images, labels = _small_mnist(tmp_path, 300, 100)
    ds = load_dataset("mnist", tmp_path, classes=2)
    assert ds.n_classes == 2
    keep = labels[:300] < 2
    assert ds.y_train.tolist() == labels[:300][keep].tolist()
    assert np.array_equal(ds.X_train, images[:300][keep].reshape(-1, 784).astype(np.float32))
    assert set(ds.y_test.tolist()) == {0, 1} and len(ds.y_test) == int((labels[300:400] < 2).sum())
    for bad in (1, 11, "2", True):
        with pytest.raises(ConfigError, match=r"classes=.*an integer from 2 to 10"):
            load_dataset("mnist", tmp_path, classes=bad)


def test_rows_for_is_kept_per_dataset_and_each_call_gets_its_own_arrays() -> None:
    """The planner asks for the same rows thousands of times (ssl.yaml: ~7,000): they are
    kept, refusals too, and a caller that writes into its arrays changes no one else's."""
    from trainables.data import split as split_module
    from trainables.spec import TrialSpec

    ds = load_dataset("breast_cancer")
    spec = TrialSpec.build(dataset="breast_cancer", aligned_ratio=0.5, n_labeled=40, seed=3)
    first = split_module.rows_for(spec, ds)
    want = split_module.split_samples(
        len(ds.y_train), 0.5, 40, seed=3, y=ds.y_train, n_aligned=None, val_ratio=0.0
    )
    for name in ("aligned", "unaligned", "labeled", "val"):
        assert np.array_equal(getattr(first, name), getattr(want, name))
    first.labeled[:] = -1  # a caller's own copy
    again = split_module.rows_for(spec, ds)
    assert np.array_equal(again.labeled, want.labeled)
    other = TrialSpec.build(dataset="breast_cancer", aligned_ratio=0.5, n_labeled=40, seed=4)
    assert not np.array_equal(split_module.rows_for(other, ds).labeled, want.labeled)
    too_many = TrialSpec.build(dataset="breast_cancer", aligned_ratio=0.1, n_labeled=400)
    for _ in range(2):  # refused, and refused again from what was kept
        with pytest.raises(ConfigError, match="n_labeled=400 is outside"):
            split_module.rows_for(too_many, ds)
