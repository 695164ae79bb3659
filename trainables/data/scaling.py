"""Feature scaling fitted on training rows only.

Why a tiny class instead of sklearn's scalers: the fitted statistics must be inspectable
per column (a party scales only its own columns, fitted on its own training rows), the
output must be float32 for torch, and the "constant column" rule must be explicit: a zero
std or range divides by 1, so a constant feature maps to 0 instead of NaN.
Fitting on test rows would leak test information into training; ``fit`` only ever sees the
matrix it is given, and callers pass training rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainables.data.dataset import Dataset
from trainables.errors import ConfigError

SCALER_KINDS = ("standard", "minmax")


@dataclass(frozen=True)
class Scaler:
    """``transform(X) = (X - offset) / scale`` per column, fitted by ``Scaler.fit``."""

    kind: str
    offset: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, X: np.ndarray, kind: str) -> Scaler:
        """Fit on ``X`` (training rows only).

        ``standard``: mean / population std (std 0 -> 1). ``minmax``: min / range, mapping
        the training rows into [0, 1] (range 0 -> 1). Test rows may fall outside [0, 1];
        they are not clipped, so a model sees honestly how far off-distribution they are.
        """
        if kind not in SCALER_KINDS:
            raise ConfigError(f"unknown scaler kind {kind!r}; known: {', '.join(SCALER_KINDS)}")
        data = np.asarray(X, dtype=np.float64)
        if data.ndim != 2 or data.shape[0] == 0:
            raise ConfigError(f"scaler needs a non-empty 2-D matrix, got shape {data.shape}")
        if kind == "standard":
            offset = data.mean(axis=0)
            scale = data.std(axis=0)
        else:
            offset = data.min(axis=0)
            scale = data.max(axis=0) - offset
        scale = np.where(scale > 0, scale, 1.0)
        offset.setflags(write=False)
        scale.setflags(write=False)
        return cls(kind=kind, offset=offset, scale=scale)

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Scale ``X`` (same columns as the fit) and return float32."""
        data = np.asarray(X, dtype=np.float64)
        if data.ndim != 2 or data.shape[1] != self.offset.shape[0]:
            raise ConfigError(
                f"scaler was fitted on {self.offset.shape[0]} columns, got shape {data.shape}"
            )
        return ((data - self.offset) / self.scale).astype(np.float32)


def default_scaler_kind(ds: Dataset) -> str:
    """``minmax`` for images (pixels have a natural bounded range, as in the usual [0, 1]
    MNIST preprocessing), ``standard`` for tabular data (features of wildly different units)."""
    return "minmax" if ds.image_shape is not None else "standard"
