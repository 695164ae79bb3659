"""xgboost's vertical gradient broadcast made explicit, so a passive party can keep it.

Why: in column-split federated training xgboost computes each round's gradients on rank 0
(the only holder of labels) and broadcasts the per-row ``(g, h)`` array to every worker
(``collective::ApplyWithLabels`` in its learner); it does the same with the base score it
estimates from the labels. That broadcast happens inside libxgboost, where a passive
worker's copy cannot be read from Python. ``tapped_train`` runs the same protocol step by
step with xgboost's public calls: every worker predicts the training margins (a
collective call), rank 0 computes ``g, h`` with xgboost's own formulas in float32 and
broadcasts them with ``xgboost.collective.broadcast``, and every worker boosts with them
(``Booster.boost``). The passive workers return what they were sent. Tested to give the
same model as ``xgb.train`` (tests/test_trees_leakage.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np

if TYPE_CHECKING:
    import xgboost as xgb

EPS = np.float32(1e-16)  # xgboost's lower bound on a hessian
# xgboost's parameters, as ``xgb.train`` takes them
XGBParams = dict[str, str | int | float]
# what rank 0 sent a passive worker: ``{"base_score": ...}`` once, then ``{"g", "h"}`` arrays
Sent = dict[str, np.ndarray | str | None]


def base_score(y: np.ndarray, n_classes: int) -> str:
    """xgboost 3's label-based intercept: the label mean (binary) or centered log priors."""
    if n_classes == 2:
        return repr(float(np.float32(y.mean())))
    prior = np.bincount(y.astype(np.int64), minlength=n_classes) / len(y)
    logp = np.log(np.maximum(prior, 1e-16))
    return "[" + ",".join(repr(float(v)) for v in logp - logp.mean()) + "]"


def grad_hess(margin: np.ndarray, y: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """binary:logistic / multi:softprob gradients as xgboost computes them (float32)."""
    m = np.asarray(margin, dtype=np.float32)
    one = np.float32(1)
    if n_classes == 2:
        p = (one / (one + np.exp(-m))).astype(np.float32)
        g = (p - y.astype(np.float32)).astype(np.float32)
        return g, np.maximum(p * (one - p), EPS).astype(np.float32)
    z = m - m.max(axis=1, keepdims=True)
    e = np.exp(z)
    p = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    g = (p - np.eye(n_classes, dtype=np.float32)[y.astype(np.int64)]).astype(np.float32)
    return g, np.maximum(np.float32(2) * p * (one - p), EPS).astype(np.float32)


def tapped_train(
    params: XGBParams, dtrain: xgb.DMatrix, rounds: int, y: np.ndarray | None
) -> tuple[xgb.Booster, list[Sent]]:
    """Train inside an active ``CommunicatorContext``; rank 0 passes labels ``y``.

    Returns the booster and, at a passive worker, what rank 0 sent it: ``base_score`` and
    one ``{"g", "h"}`` pair of (N,) or (N, C) float32 arrays per round (empty at rank 0).
    """
    import xgboost as xgb

    rank = xgb.collective.get_rank()
    n_classes = int(params.get("num_class", 2))
    received: list[Sent] = []
    root = cast("np.ndarray", y)  # rank 0's labels (the others pass None and read none)
    score = xgb.collective.broadcast(base_score(root, n_classes) if rank == 0 else None, 0)
    if rank != 0:
        received.append({"base_score": score})
    booster = xgb.Booster({**params, "base_score": score}, [dtrain])
    for i in range(rounds):
        margin = booster.predict(dtrain, output_margin=True, training=True)
        gh = grad_hess(margin, root, n_classes) if rank == 0 else None
        g, h = cast("tuple[np.ndarray, np.ndarray]", xgb.collective.broadcast(gh, 0))
        if rank != 0:
            received.append({"g": g, "h": h})
        booster.boost(dtrain, i, grad=g, hess=h)
    return booster, received
