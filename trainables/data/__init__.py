"""The dataset layer: loading, vertical (column) and sample (row) splits, and scaling.

Why one package: every protocol and model gets its inputs through the same few calls, so a
sweep changes datasets, party counts or alignment ratios by name without touching training
code. Importing this package registers all datasets in ``DATASETS``.
"""

from __future__ import annotations

from trainables.data import builtin as _builtin  # noqa: F401  (registers built-in datasets)
from trainables.data import files as _files  # noqa: F401  (registers tabular file datasets)
from trainables.data import mnist as _mnist  # noqa: F401  (registers mnist)
from trainables.data.catalog import DATASETS, default_data_dir, load_dataset
from trainables.data.dataset import Dataset
from trainables.data.mnist import read_idx
from trainables.data.scaling import Scaler, default_scaler_kind
from trainables.data.split import (
    SampleSplit,
    Split,
    carve_validation,
    check_columns,
    columns_for,
    rows_for,
    split_for,
    split_refusal,
    split_samples,
    vertical_split,
)

__all__ = [
    "DATASETS",
    "Dataset",
    "SampleSplit",
    "Scaler",
    "Split",
    "carve_validation",
    "check_columns",
    "columns_for",
    "default_data_dir",
    "default_scaler_kind",
    "load_dataset",
    "read_idx",
    "rows_for",
    "split_for",
    "split_refusal",
    "split_samples",
    "vertical_split",
]
