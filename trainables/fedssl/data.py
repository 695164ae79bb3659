"""Which training rows each agent gets, pixel scaling and the label-invariant augmentation.

Why here and not in ``trainables.data.split``: FedSSL is horizontal FL, every agent holds
whole rows (all features), and the split is by label availability: ``n_labeled`` random
training rows are the labeled pool (the paper holds out 300 / 150 / 100 MNIST labels),
the rest the unlabeled pool. ``iid`` deals each pool evenly to its agents; ``noniid`` is
the paper's round-robin class split (Sec. 5.5): class c's labeled rows go to support
agent c mod N_S, its unlabeled rows to query agent c mod N_Q (N_S = 3: [0,3,6,9],
[1,4,7], [2,5,8]; N_Q = 9: [0,9], [1], ..., [8]).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from trainables.data import Dataset
from trainables.errors import ConfigError
from trainables.fedssl.options import FedSSLOptions


@dataclass(frozen=True)
class AgentRows:
    """Training-row positions per agent: support agents' labeled, query agents' unlabeled."""

    support: tuple[np.ndarray, ...]
    query: tuple[np.ndarray, ...]


def split_rows(y: np.ndarray, n_labeled: int, opts: FedSSLOptions, seed: int) -> AgentRows:
    """Deal the training rows to the agents (seeded); ConfigError if some agent gets none."""
    n = len(y)
    if n_labeled + opts.n_query > n:
        raise ConfigError(
            f"n_labeled={n_labeled}: the dataset has {n} training rows, which leaves fewer "
            f"unlabeled rows than query agents ({opts.n_query}); allowed: n_labeled <= "
            f"{n - opts.n_query}"
        )
    perm = np.random.default_rng([seed, 1801]).permutation(n)
    labeled, unlabeled = perm[:n_labeled], perm[n_labeled:]
    if opts.max_unlabeled:
        unlabeled = unlabeled[: opts.max_unlabeled]
    if opts.split == "iid":
        support = np.array_split(labeled, opts.n_support)
        query = np.array_split(unlabeled, opts.n_query)
    else:
        support = [labeled[y[labeled] % opts.n_support == i] for i in range(opts.n_support)]
        query = [unlabeled[y[unlabeled] % opts.n_query == j] for j in range(opts.n_query)]
    for role, parts in (("support", support), ("query", query)):
        empty = [i for i, p in enumerate(parts) if len(p) == 0]
        if empty:
            raise ConfigError(
                f"model_params.split={opts.split!r}: {role} agent {empty[0]} gets no rows "
                f"(n_labeled={n_labeled}, n_support={opts.n_support}, n_query={opts.n_query})"
            )
    return AgentRows(tuple(np.sort(p) for p in support), tuple(np.sort(p) for p in query))


def pixel_scale(ds: Dataset) -> float:
    """Pixels are divided by this (MNIST 255, digits 16): a public constant of the format,
    so no agent needs another's rows to scale its own into [0, 1] (G's sigmoid range)."""
    return float(max(1.0, float(ds.X_train.max())))


def augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A label-invariant view of x (B, d): N(0, 0.05²) pixel noise, clamped to [0, 1].

    Why no shifts or crops (MixMatch's views): F is an MLP, and a 1-pixel shift of an 8x8
    digit took a supervised F from 0.86 to 0.14-0.21 test accuracy here, which would turn
    every pseudo-label into noise; pixel noise keeps the views on the MLP's manifold.
    """
    noise = 0.05 * torch.randn(x.shape, generator=gen)
    return (x + noise).clamp(0.0, 1.0)
