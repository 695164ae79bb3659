"""FedCVT / FedMVT: semi-supervised 2-party VFL with limited overlap (Kang et al.).

Why: plain VFL (FedSplitNN) trains only on the few rows both parties hold. FedCVT also uses
each party's non-overlapping rows: it estimates the missing party's representation of such a
row by attention over the overlapping rows, pseudo-labels the passive party's rows on which
three classifiers agree confidently, and trains the three classifiers on the enlarged set.

Parties (``cvt_party.py``): passive A = party 0 (features only), active B = party 1 (features
and labels). Each party p has a unique encoder u_p and a shared encoder c_p, r_p = [u_p; c_p]
(N, 2d). The active party holds the three softmax classifiers: f_AB on [r_A; r_B] (4d),
f_A on r_A (2d, fed with the passive party's representations) and f_B on r_B (2d).

One training step (one round; the batch schedule is derived from the seed by both parties):

====  =================  ==============================================================
dir   message kind       what it reveals to the receiver
====  =================  ==============================================================
B->A  ``values``         r_B of every overlapping row (n_ol, 2d): B's representations of
                         shared customers, the attention values for A's estimates.
A->B  ``reps_ol``        r_A of every overlapping row (n_ol, 2d): the same, for B.
A->B  ``reps_nl``        r_A of A's non-overlapping batch (b, 2d): representations of rows B
                         does not have (no ids, no features).
A->B  ``est_nl``         r~_B of A's non-overlapping batch (b, 2d): A's attention output,
                         a convex mix of B's own ``values`` (nothing new about A's features
                         beyond the attention weights it implies).
A->B  ``est_ol``         r~_B of the overlapping batch (b_ol, 2d), leave-one-out attention
                         output (for the estimation loss).
B->A  ``grad_*``         dL/d(each tensor above): gradients of representations; they carry
                         label information as in any split learning (never the labels).
====  =================  ==============================================================

FedSplitNN (``CvtOptions.semi=False``) exchanges only ``reps_ol`` of the overlap batch
(b_ol, 2d) and its gradient: plain split learning on the labeled overlap rows.

Raw features never leave a party and labels never reach the passive party. Evaluation sends
r_A of the test rows (``test_reps``) once, at the end.

Loss at the active party (weights in ``CvtOptions``)::

    L = CE_AB + CE_A + CE_B                    over labeled overlap rows, B's labeled rows and
                                               A's pseudo-labeled rows
      + w_shared * MSE(c_A, c_B)               overlap batch
      + w_est * [MSE(r~_A, r_A) + MSE(r~_B, r_B)]  overlap batch, leave-one-out estimates
      + w_orth * (||u_A^T c_A||^2 + ||u_B^T c_B||^2) / b^2   each party's own term, locally
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from trainables.messages import Message
from trainables.transport.base import Transport


@dataclass(frozen=True)
class CvtOptions:
    """FedCVT's knobs (ALGORITHMS.md): temperature, thresholds, loss weights, sizes."""

    rep_dim: int = 32  # d: width of each of u_p and c_p; r_p is 2d wide
    temperature: float = 0.5  # sharpening T of the attention (0.5-0.7 in the paper)
    t_fed: float = 0.8  # pseudo-label thresholds: federated, active-only, passive-only
    t_active: float = 0.7
    t_passive: float = 0.7
    w_shared: float = 0.1
    w_orth: float = 0.01
    w_est: float = 0.5
    n_local: int = 4000  # non-overlapping rows per party (capped by the data)
    semi: bool = True  # False: FedSplitNN on the labeled overlap with the same models


def attention_estimate(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    temperature: float,
    exclude_self: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sharpened scaled dot-product attention over the overlapping rows.

    query: (b, k) own-party representation of the rows to complete
    keys: (n_ol, k) own-party representations of the overlapping rows
    values: (n_ol, v) the other party's representations of the same overlapping rows
    exclude_self: (b,) int64 overlap positions of the query rows, masked out (an overlap
        row must not look itself up when its estimate is trained against the truth)
    returns (b, v): softmax(q k^T / (sqrt(k) T)) @ values. Dividing the scores by T equals
    sharpening the attention weights p -> p^(1/T) / sum p^(1/T).
    """
    scores = query @ keys.T / (math.sqrt(keys.shape[1]) * temperature)  # (b, n_ol)
    if exclude_self is not None:
        rows = torch.arange(len(exclude_self))
        scores = scores.clone()
        scores[rows, exclude_self] = float("-inf")
    return torch.softmax(scores, dim=1) @ values  # (b, v)


def pseudo_labels(
    p_fed: torch.Tensor,
    p_active: torch.Tensor,
    p_passive: torch.Tensor,
    thresholds: tuple[float, float, float],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which unlabeled rows get a pseudo-label, and which label.

    p_*: (b, C) class probabilities of f_AB, f_B (active-only) and f_A (passive-only).
    A row is kept when all three argmaxes agree and each classifier's top probability is at
    least its threshold (t_fed, t_active, t_passive). Returns (mask (b,) bool, label (b,)).
    """
    conf = [p.max(dim=1) for p in (p_fed, p_active, p_passive)]
    label = conf[0].indices
    keep = torch.ones_like(label, dtype=torch.bool)
    for (value, index), threshold in zip(conf, thresholds, strict=True):
        keep &= (index == label) & (value >= threshold)
    return keep, label


def orthogonality(unique: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
    """||u^T c||_F^2 / b^2 for u, c (b, d): pushes unique and shared codes apart."""
    return (unique.T @ shared).pow(2).sum() / max(1, unique.shape[0]) ** 2


def masked_ce(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the rows in ``mask`` (0 when none): logits (b, C), y (b,)."""
    if not bool(mask.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits[mask], y[mask])


@dataclass
class CvtResult:
    """What one FedCVT/FedSplitNN training produced, as seen by the trial's coordinator."""

    metrics: dict[str, object]  # the active party's evaluation (acc, proba, ...)
    rounds: int
    comm_bytes: int
    pseudo: list[tuple[int, object, object]]  # (step, A rows, labels) per round, measurement


def train_cvt(
    passive: Transport,
    active: Transport,
    epochs: int,
    steps: int,
    semi: bool,
    log: list[Message] | None = None,
) -> CvtResult:
    """Drive ``epochs * steps`` rounds between the two parties, then evaluate.

    ``passive`` and ``active`` are one-peer transports (local objects or Ray actors); every
    message that crosses the A/B boundary goes through ``passive`` and is counted there (and
    appended to ``log`` when given). The coordinator sits beside the active party.
    """
    seen = log if log is not None else []

    def ask(wire: Transport, method: str, *args: object) -> Any:
        return wire.call(method, [args], training=True)[0]

    for step in range(epochs * steps):
        values = ask(active, "values", step) if semi else None  # B -> A
        up = ask(passive, "forward", step, values)  # A -> B
        grads = ask(active, "train_step", step, up)
        ask(passive, "backward", grads)  # B -> A
        seen.extend([*([values] if semi else []), *up, *grads])
    test = passive.call("test_reps", [()], training=False)[0]
    seen.append(test)
    metrics = active.call("evaluate", [(test,)], training=False)[0]
    pseudo = active.call("pseudo_log", [()], training=False)[0] if semi else []
    # bytes across the boundary: what went to and came from A; ``values`` goes via ask() to
    # the coordinator first, so it is counted once when forwarded to A
    bytes_ = passive.stats.comm_bytes + passive.stats.eval_bytes
    return CvtResult(metrics, epochs * steps, int(bytes_), pseudo)
