"""VFL random forest with Gini impurity, with and without Paillier encryption (VFLAIR).

Each tree is grown on a seeded row subsample (bagging without replacement, so every row
is counted once). The active party packs each sampled row's one-hot label into one
plaintext (one slot per class) and, encrypted or not, the passive parties return per-bin
class counts for their features; the active party scores splits by Gini decrease.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainables.trees.builder import Tree, grow, leaves_of_test
from trainables.trees.crypto import Packer
from trainables.trees.session import TreeSession


@dataclass(frozen=True)
class ForestParams:
    n_trees: int = 5  # VFLAIR: 5 trees of depth 6
    max_depth: int = 6
    n_bins: int = 32
    subsample: float = 0.8
    min_rows: int = 2


@dataclass(frozen=True)
class GiniRule:
    """Gini decrease, weighted by rows, over decoded per-bin class counts."""

    packer: Packer
    min_rows: int

    def decode(self, slots: np.ndarray, counts: np.ndarray) -> np.ndarray:
        return slots  # (B, C) class counts

    def gains(self, left: np.ndarray, total: np.ndarray) -> np.ndarray:
        right = total[None, :] - left
        nl, nr, n = left.sum(1), right.sum(1), total.sum()

        def impurity_mass(c: np.ndarray, size: np.ndarray) -> np.ndarray:  # size * gini
            return size - (c**2).sum(-1) / np.maximum(size, 1)

        gain = impurity_mass(total, n) - impurity_mass(left, nl) - impurity_mass(right, nr)
        ok = (nl >= self.min_rows) & (nr >= self.min_rows)
        return np.where(ok, gain, -np.inf)


def train_forest(
    session: TreeSession,
    y_train: np.ndarray,
    y_test: np.ndarray,
    n_classes: int,
    params: ForestParams,
    seed: int,
) -> tuple[float, list[Tree], np.ndarray]:
    """Grow the forest; returns test accuracy, the trees and (M, C) mean leaf probabilities."""
    n, m = len(y_train), len(y_test)
    packer = Packer(n_classes, n.bit_length() + 1, session.keys.public.plaintext_bits)
    rule = GiniRule(packer, params.min_rows)
    onehot = np.eye(n_classes, dtype=np.int64)[y_train]  # (N, C)
    packed = packer.pack(onehot.tolist())
    proba = np.zeros((m, n_classes))
    trees = []
    for t in range(params.n_trees):
        rng = np.random.default_rng([seed, t])
        rows = np.sort(rng.choice(n, max(2, int(params.subsample * n)), replace=False))
        session.send_stats(packed, rows)
        tree = grow(rule, session.keys, session.own, session.wire, session.n_passive,
                    rows, params.max_depth, params.min_rows)  # fmt: skip
        for i, node in enumerate(tree.nodes):
            if node.is_leaf:
                counts = np.bincount(y_train[node.rows], minlength=n_classes)
                tree.values[i] = counts / max(1, counts.sum())
        leaf = leaves_of_test(tree, session.own, session.wire, session.n_passive, m)
        proba += np.stack([tree.values[i] for i in leaf]) / params.n_trees
        trees.append(tree)
    return float((proba.argmax(1) == y_test).mean()), trees, proba
