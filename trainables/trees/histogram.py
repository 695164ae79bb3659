"""Quantile binning of a party's own columns and (encrypted) per-bin sums over node rows.

Why quantile bins fitted on the party's own training rows: split finding then needs only
per-bin statistics, so a passive party never reveals feature values or thresholds, only
sums over bins it defines itself (SecureBoost's bucketing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainables.trees.crypto import Ciphertext, PublicKey


@dataclass(frozen=True)
class Binner:
    """Interior cut points per feature; bin b holds x in [cuts[b-1], cuts[b])."""

    cuts: tuple[np.ndarray, ...]  # per feature: (n_cuts,) increasing float64

    @classmethod
    def fit(cls, X: np.ndarray, n_bins: int) -> Binner:
        """X: (N, d) this party's training columns."""
        qs = np.linspace(0, 1, n_bins + 1)[1:-1]
        cuts = []
        for j in range(X.shape[1]):
            col = X[:, j].astype(np.float64)
            edges = np.unique(np.quantile(col, qs)) if len(qs) else np.zeros(0)
            cuts.append(edges[edges > col.min()])  # a cut below every value splits nothing
        return cls(tuple(cuts))

    def transform(self, X: np.ndarray) -> np.ndarray:
        """(N, d) features -> (N, d) int16 bin indices."""
        out = np.empty(X.shape, dtype=np.int16)
        for j, cuts in enumerate(self.cuts):
            out[:, j] = np.searchsorted(cuts, X[:, j].astype(np.float64), side="right")
        return out

    def n_bins(self, j: int) -> int:
        return len(self.cuts[j]) + 1


def bin_counts(bins: np.ndarray, rows: np.ndarray, n_bins: int) -> np.ndarray:
    """(n_bins,) how many of ``rows`` fall in each bin of one feature."""
    return np.bincount(bins[rows], minlength=n_bins).astype(np.int64)


def bin_sums(
    key: PublicKey,
    packed: Sequence[Sequence[Ciphertext | None]],
    bins: np.ndarray,
    rows: np.ndarray,
    n_bins: int,
) -> list[list[Ciphertext]]:
    """(n_bins, n_ints) sums of the packed per-row values of ``rows``, bin by bin.

    packed: (n_ints, N) per-row (encrypted) packed ints; bins: (N,) one feature's bins.
    """
    order = rows[np.argsort(bins[rows], kind="stable")]
    bounds = np.searchsorted(bins[order], np.arange(n_bins + 1), side="left")
    out = []
    for b in range(n_bins):
        members = order[bounds[b] : bounds[b + 1]]
        out.append([key.total([chunk[i] for i in members]) for chunk in packed])
    return out
