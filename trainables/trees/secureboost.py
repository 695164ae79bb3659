"""SecureBoost (Cheng et al.): VFL gradient boosting with Paillier-encrypted g and h.

The active party computes each row's gradient g and hessian h from its labels, encodes them
as fixed-point integers packed into one plaintext per row, encrypts them (``phe``), and the
passive parties return encrypted per-bin sums for their own features. With
``encrypt=False`` the identical integer protocol runs without encryption, so decryption is
the only difference: the trees and MP are the same (lossless, tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def train_boost(
    session: TreeSession,
    y_train: np.ndarray,
    y_test: np.ndarray,
    n_classes: int,
    params: BoostParams,
) -> tuple[float, list[Tree], np.ndarray]:
    """Boost; returns test accuracy, the trees and (M, C') test margins."""
    n, m = len(y_train), len(y_test)
    width = 1 if n_classes == 2 else n_classes
    margin = np.zeros((n, width))
    test_margin = np.zeros((m, width))
    if n_classes == 2:  # start from the label log-odds, as xgboost's intercept does
        prior = np.clip(y_train.mean(), 1e-6, 1 - 1e-6)
        margin[:] = test_margin[:] = np.log(prior / (1 - prior))
    slot_bits = n.bit_length() + FRAC_BITS + 3
    packer = Packer(2, slot_bits, session.keys.public.plaintext_bits)
    rule = GainRule(packer, params.reg_lambda, params.min_child_weight)
    rows = np.arange(n)
    trees = []
    for _ in range(params.n_trees):
        g, h = _grad_hess(margin, y_train, n_classes)
        for c in range(width):
            gi = np.rint(g[:, c] * OFFSET).astype(np.int64) + OFFSET
            hi = np.rint(h[:, c] * OFFSET).astype(np.int64)
            session.send_stats(packer.pack(np.stack([gi, hi], axis=1).tolist()), rows)
            tree = grow(rule, session.keys, session.own, session.wire, session.n_passive,
                        rows, params.max_depth, min_rows=1)  # fmt: skip
            for i, node in enumerate(tree.nodes):
                if node.is_leaf:
                    r = node.rows
                    w = -g[r, c].sum() / (h[r, c].sum() + params.reg_lambda)
                    tree.values[i] = np.array([params.learning_rate * w])
                    margin[r, c] += tree.values[i][0]
            leaf = leaves_of_test(tree, session.own, session.wire, session.n_passive, m)
            test_margin[:, c] += np.array([tree.values[i][0] for i in leaf])
            trees.append(tree)
    pred = (test_margin[:, 0] > 0).astype(np.int64) if width == 1 else test_margin.argmax(1)
    return float((pred == y_test).mean()), trees, test_margin
