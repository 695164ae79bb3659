"""SecureBoost (Cheng et al.): VFL gradient boosting with Paillier-encrypted g and h.

The active party computes each row's gradient g and hessian h from its labels, encodes them
as fixed-point integers packed into one plaintext per row, encrypts them (``phe``), and the
passive parties return encrypted per-bin sums for their own features. With
``encrypt=False`` the identical integer protocol runs without encryption, so decryption is
the only difference: the trees and MP are the same (lossless, tested).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainables.rounds import Rounds
from trainables.trees.builder import Tree, grow, leaves_of_test
from trainables.trees.crypto import Packer
from trainables.trees.session import TreeSession

FRAC_BITS = 24  # fixed-point precision of g and h (2**-24 ~ 6e-8)
OFFSET = 1 << FRAC_BITS  # g in [-1, 1] -> g * 2**24 + OFFSET >= 0


@dataclass(frozen=True)
class BoostParams:
    n_trees: int = 5  # VFLAIR: 5 trees of depth 6
    max_depth: int = 6
    learning_rate: float = 0.3
    n_bins: int = 32
    reg_lambda: float = 1.0
    min_child_weight: float = 1.0


@dataclass(frozen=True)
class GainRule:
    """XGBoost's split gain over decoded (G, H) bin sums."""

    packer: Packer
    reg_lambda: float
    min_child_weight: float

    def decode(self, slots: np.ndarray, counts: np.ndarray) -> np.ndarray:
        g = (slots[:, 0] - counts * OFFSET) / OFFSET
        return np.stack([g, slots[:, 1] / OFFSET], axis=1)  # (B, 2)

    def gains(self, left: np.ndarray, total: np.ndarray) -> np.ndarray:
        lam = self.reg_lambda
        gl, hl = left[:, 0], left[:, 1]
        gr, hr = total[0] - gl, total[1] - hl
        score = gl**2 / (hl + lam) + gr**2 / (hr + lam) - total[0] ** 2 / (total[1] + lam)
        ok = (hl >= self.min_child_weight) & (hr >= self.min_child_weight)
        return np.where(ok, 0.5 * score, -np.inf)


def _grad_hess(margin: np.ndarray, y: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(N, C') margins -> g, h of logistic (C'=1) or softmax loss, as xgboost computes them."""
    if n_classes == 2:
        p = 1.0 / (1.0 + np.exp(-margin[:, 0]))
        return (p - y)[:, None], np.maximum(p * (1 - p), 1e-16)[:, None]
    z = margin - margin.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    onehot = np.eye(n_classes)[y]
    return p - onehot, np.maximum(2 * p * (1 - p), 1e-16)


class Boosting(Rounds[TreeSession, None]):
    """Boosting on ``Rounds.run``'s loop: an epoch is one tree, a round one ``grow`` (one
    per output: C' rounds per tree), run without a target (no epoch-end evaluation).
    ``result``: test accuracy, the trees and (M, C') test margins."""

    def __init__(self, y_train: np.ndarray, y_test: np.ndarray, n_classes: int,
                 params: BoostParams) -> None:  # fmt: skip
        self.y_train, self.y_test, self.n_classes, self.params = y_train, y_test, n_classes, params
        self.width = 1 if n_classes == 2 else n_classes

    def setup(self, session: TreeSession, transport: None) -> None:
        n, m = len(self.y_train), len(self.y_test)
        self.margin = np.zeros((n, self.width))
        self.test_margin = np.zeros((m, self.width))
        if self.n_classes == 2:  # start from the label log-odds, as xgboost's intercept does
            prior = np.clip(self.y_train.mean(), 1e-6, 1 - 1e-6)
            self.margin[:] = self.test_margin[:] = np.log(prior / (1 - prior))
        slot_bits = n.bit_length() + FRAC_BITS + 3
        self.packer = Packer(2, slot_bits, session.keys.public.plaintext_bits)
        self.rule = GainRule(self.packer, self.params.reg_lambda, self.params.min_child_weight)
        self.rows = np.arange(n)
        self.trees: list[Tree] = []

    def epoch_steps(self, session: TreeSession, epoch: int) -> Sequence[int]:
        return range(self.width)  # one grow per output of this epoch's tree

    def exchange(self, session: TreeSession, transport: None, c: int, nxt: int | None) -> None:
        """Grow output ``c``'s tree on the g, h of the margins as the tree began."""
        params = self.params
        if c == 0:
            self.g, self.h = _grad_hess(self.margin, self.y_train, self.n_classes)
        g, h = self.g, self.h
        gi = np.rint(g[:, c] * OFFSET).astype(np.int64) + OFFSET
        hi = np.rint(h[:, c] * OFFSET).astype(np.int64)
        session.send_stats(self.packer.pack(np.stack([gi, hi], axis=1).tolist()), self.rows)
        tree = grow(self.rule, session.keys, session.own, session.wire, session.n_passive,
                    self.rows, params.max_depth, min_rows=1)  # fmt: skip
        for i, node in enumerate(tree.nodes):
            if node.is_leaf:
                r = node.rows
                w = -g[r, c].sum() / (h[r, c].sum() + params.reg_lambda)
                tree.values[i] = np.array([params.learning_rate * w])
                self.margin[r, c] += tree.values[i][0]
        m = len(self.y_test)
        leaf = leaves_of_test(tree, session.own, session.wire, session.n_passive, m)
        self.test_margin[:, c] += np.array([tree.values[i][0] for i in leaf])
        self.trees.append(tree)

    def result(self, session: TreeSession, transport: None, seconds: float,
               total: int) -> tuple[float, list[Tree], np.ndarray]:  # fmt: skip
        tm = self.test_margin
        pred = (tm[:, 0] > 0).astype(np.int64) if self.width == 1 else tm.argmax(1)
        return float((pred == self.y_test).mean()), self.trees, tm


def train_boost(
    session: TreeSession,
    y_train: np.ndarray,
    y_test: np.ndarray,
    n_classes: int,
    params: BoostParams,
) -> tuple[float, list[Tree], np.ndarray]:
    """Boost; returns test accuracy, the trees and (M, C') test margins."""
    return Boosting(y_train, y_test, n_classes, params).run(session, None, params.n_trees)
