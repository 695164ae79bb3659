"""VFL random forest with Gini impurity, with and without Paillier encryption (VFLAIR).

Each tree is grown on a seeded row subsample (bagging without replacement, so every row
is counted once). The active party packs each sampled row's one-hot label into one
plaintext (one slot per class) and, encrypted or not, the passive parties return per-bin
class counts for their features; the active party scores splits by Gini decrease.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainables.rounds import Rounds
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


class Forest(Rounds[TreeSession, None]):
    """The forest on ``Rounds.run``'s loop, run without a target: an epoch is one tree,
    grown in one round.
    ``result``: test accuracy, the trees and (M, C) mean leaf probabilities."""

    def __init__(self, y_train: np.ndarray, y_test: np.ndarray, n_classes: int,
                 params: ForestParams, seed: int) -> None:  # fmt: skip
        self.y_train, self.y_test, self.n_classes = y_train, y_test, n_classes
        self.params, self.seed = params, seed

    def setup(self, session: TreeSession, transport: None) -> None:
        n, c = len(self.y_train), self.n_classes
        self.packer = Packer(c, n.bit_length() + 1, session.keys.public.plaintext_bits)
        self.rule = GiniRule(self.packer, self.params.min_rows)
        onehot = np.eye(c, dtype=np.int64)[self.y_train]  # (N, C)
        self.packed = self.packer.pack(onehot.tolist())
        self.proba = np.zeros((len(self.y_test), c))
        self.trees: list[Tree] = []

    def epoch_steps(self, session: TreeSession, epoch: int) -> Sequence[int]:
        return [epoch]

    def exchange(self, session: TreeSession, transport: None, t: int, nxt: int | None) -> None:
        """Tree ``t`` on its seeded row subsample (bagging without replacement)."""
        params, n, y = self.params, len(self.y_train), self.y_train
        rng = np.random.default_rng([self.seed, t])
        rows = np.sort(rng.choice(n, max(2, int(params.subsample * n)), replace=False))
        session.send_stats(self.packed, rows)
        tree = grow(self.rule, session.keys, session.own, session.wire, session.n_passive,
                    rows, params.max_depth, params.min_rows)  # fmt: skip
        for i, node in enumerate(tree.nodes):
            if node.is_leaf:
                counts = np.bincount(y[node.rows], minlength=self.n_classes)
                tree.values[i] = counts / max(1, counts.sum())
        leaf = leaves_of_test(tree, session.own, session.wire, session.n_passive, len(self.y_test))
        self.proba += np.stack([tree.values[i] for i in leaf]) / params.n_trees
        self.trees.append(tree)

    def result(self, session: TreeSession, transport: None, seconds: float,
               total: int) -> tuple[float, list[Tree], np.ndarray]:  # fmt: skip
        return float((self.proba.argmax(1) == self.y_test).mean()), self.trees, self.proba


def train_forest(
    session: TreeSession,
    y_train: np.ndarray,
    y_test: np.ndarray,
    n_classes: int,
    params: ForestParams,
    seed: int,
) -> tuple[float, list[Tree], np.ndarray]:
    """Grow the forest; returns test accuracy, the trees and (M, C) mean leaf probabilities."""
    return Forest(y_train, y_test, n_classes, params, seed).run(session, None, params.n_trees)
