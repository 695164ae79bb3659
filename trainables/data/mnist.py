"""MNIST from the original IDX files, parsed with gzip + numpy (no torchvision).

Why no torchvision: it would pull a large dependency in for a 20-line file format, and its
dataset classes insist on a directory layout and may try to download.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from trainables.data.catalog import DATA_ENV, DATASETS, classes, data_file, reject_params
from trainables.data.dataset import Dataset, build_dataset, pixel_names, stratified_split
from trainables.errors import ConfigError, MissingDataError

# IDX type byte -> big-endian numpy dtype (http://yann.lecun.com/exdb/mnist/, "IDX format").
_IDX_DTYPES: dict[int, str] = {
    0x08: "u1",
    0x09: "i1",
    0x0B: ">i2",
    0x0C: ">i4",
    0x0D: ">f4",
    0x0E: ">f8",
}

MNIST_SHAPE = (28, 28)


def read_idx(path: str | Path) -> np.ndarray:
    """The array stored in an IDX file (gzip-compressed if the name ends in ``.gz``).

    Layout: two zero bytes, a type byte, a dimension count, then one big-endian uint32 per
    dimension, then the data in C order. The result is in native byte order.
    """
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        raise MissingDataError(f"IDX file {path} does not exist", dataset="mnist") from None
    except (OSError, EOFError) as exc:
        raise ConfigError(f"{path}: cannot read IDX data ({exc})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise ConfigError(f"{path}: not an IDX file (bad magic {raw[:4].hex()})")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if ndim == 0 or len(raw) < header:
        raise ConfigError(f"{path}: truncated IDX header")
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[raw[2]])
    expected = int(np.prod(dims)) * dtype.itemsize
    if len(raw) - header != expected:
        raise ConfigError(
            f"{path}: IDX header says {dims} ({expected} data bytes), file holds "
            f"{len(raw) - header}"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(dims)
    return data.astype(dtype.newbyteorder("="))


def _images_and_labels(images: Path, labels: Path) -> tuple[np.ndarray, np.ndarray]:
    X = read_idx(images)
    y = read_idx(labels)
    if X.ndim != 3 or X.shape[1:] != MNIST_SHAPE:
        raise ConfigError(f"{images}: expected N x 28 x 28 images, got {X.shape}")
    if y.shape != (X.shape[0],):
        raise ConfigError(f"{labels}: {y.shape[0]} labels for {X.shape[0]} images in {images}")
    if y.min() < 0 or y.max() > 9:
        raise ConfigError(f"{labels}: labels must be digits 0..9")
    return X.reshape(X.shape[0], -1).astype(np.float32), y.astype(np.int64)


@DATASETS.register("mnist")
@classes(10)
def mnist(data_dir: Path | None, **params: object) -> Dataset:
    """MNIST, 784 row-major pixel columns valued 0..255 (scaling happens later), 10 classes.

    With ``train-images-idx3-ubyte.gz`` and ``train-labels-idx1-ubyte.gz`` present, the
    official 60,000 / 10,000 split is used. Otherwise, if only the t10k images and labels
    exist (as in ``shared/datasets``, which lacks the 9.9 MB training images), the 10,000
    official *test* images are split 80/20 stratified with seed 0 into 8,000 train / 2,000
    test rows. Numbers from that fallback are not comparable to published MNIST results.

    ``classes: n`` (2..10; default 10) keeps the rows of digits 0..n-1 only, as VFLAIR
    builds its n-class MNIST (``fetch_classes``: the first n classes; its LI_2 column is
    ``classes: 2``), before the fallback's split.
    """
    reject_params("mnist", params, ("classes",))
    n_classes = params.get("classes", 10)
    if isinstance(n_classes, bool) or not isinstance(n_classes, int) or not 2 <= n_classes <= 10:
        raise ConfigError(
            f"dataset 'mnist': classes={n_classes!r}; allowed: an integer from 2 to 10 "
            "(the rows of digits 0..classes-1)"
        )
    test_images = data_file(data_dir, "mnist/t10k-images-idx3-ubyte.gz", "mnist")
    test_labels = data_file(data_dir, "mnist/t10k-labels-idx1-ubyte.gz", "mnist")
    X_test, y_test = _first_classes(*_images_and_labels(test_images, test_labels), n_classes)
    assert data_dir is not None  # data_file raised otherwise
    train_images = data_dir / "mnist" / "train-images-idx3-ubyte.gz"
    train_labels = data_dir / "mnist" / "train-labels-idx1-ubyte.gz"
    if train_images.is_file() and train_labels.is_file():
        X_train, y_train = _first_classes(
            *_images_and_labels(train_images, train_labels), n_classes
        )
    elif train_images.is_file():
        raise MissingDataError(
            f"dataset 'mnist' found {train_images} but not {train_labels}; add it, or remove "
            f"the training images to use the 10k test-set fallback ({DATA_ENV} / --data-dir)",
            dataset="mnist",
            file="mnist/train-labels-idx1-ubyte.gz",
        )
    else:
        train, test = stratified_split(y_test)
        X_train, y_train = X_test[train], y_test[train]
        X_test, y_test = X_test[test], y_test[test]
    return build_dataset(
        "mnist", X_train, y_train, X_test, y_test, n_classes, pixel_names(MNIST_SHAPE),
        MNIST_SHAPE,
    )  # fmt: skip


def _first_classes(X: np.ndarray, y: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows of labels 0..n-1, in file order."""
    keep = y < n
    return X[keep], y[keep]
