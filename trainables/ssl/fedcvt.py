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

=====  ========================  ==========================================================
dir    kind (FedCVT role)        what it reveals to the receiver
=====  ========================  ==========================================================
B->A   ``representation``        r_B of every overlapping row (n_ol, 2d): B's representations
       (values)                  of shared customers, the attention values for A's estimates.
A->B   ``embedding`` (reps_ol)   r_A of every overlapping row (n_ol, 2d): the same, for B.
A->B   ``nl_embedding``          r_A of A's non-overlapping batch (b, 2d): representations of
       (reps_nl)                 rows B does not have (no ids, no features).
A->B   ``est_nl_embedding``      r~_B of A's non-overlapping batch (b, 2d): A's attention
       (est_nl)                  output, a convex mix of B's own ``values`` (nothing new about
                                 A's features beyond the attention weights it implies).
A->B   ``est_ol_embedding``      r~_B of the overlap batch (b_ol, 2d), leave-one-out
       (est_ol)                  attention output (for the estimation loss).
B->A   ``gradient`` (grad_*)     dL/d(each A->B tensor above), in the same order: gradients of
                                 representations; they carry label information as in any
                                 split learning (never the labels).
=====  ========================  ==========================================================

Why these kinds: they are the kinds the engine's message hooks know, so defenses and codecs
act on FedCVT's exchange as on plain VFL's: a passive-party embedding defense (G-DP, L-DP)
and the codecs on every A->B tensor (``is_embedding``: ``embedding`` or ``*_embedding``), an
active-party gradient defense (G-DP, L-DP, ISO, GS) on B's gradients, ISO's
``representation`` target on B's ``values``. The FedCVT role of a message is its place in
the round's bundle (``UP_KINDS`` order; the gradients follow the same order). A round's
messages cross in one ``bundle`` message whose size is the sum of its parts as sent.

FedSplitNN (``CvtOptions.semi=False``) exchanges only ``reps_ol`` of the overlap batch
(b_ol, 2d) and its gradient: plain split learning on the labeled overlap rows.

Raw features never leave a party and labels never reach the passive party. Evaluation sends
r_A of the test rows (``test_embedding``) once, at the end. The rounds run as a Protocol at
B (``cvt_rounds.py``); the parties are in ``cvt_party.py`` (A) and ``cvt_active.py`` (B).

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

import torch
import torch.nn.functional as F

from trainables.messages import Message

VALUES = "representation"  # B -> A: r_B of the overlap (the attention values)
UP_KINDS = ("embedding", "nl_embedding", "est_nl_embedding", "est_ol_embedding")  # A -> B
REPS_SPLIT = ("embedding",)  # A -> B in FedSplitNN: r_A of the overlap batch
GRADIENT = "gradient"  # B -> A: dL/d(each A -> B tensor), in the same order
TEST = "test_embedding"  # A -> B at evaluation: r_A of the test rows
BUNDLE = "bundle"


def bundle(msgs: list[Message]) -> Message:
    """A round's messages from one party to the other as one transport payload; its size is
    the sum of theirs as sent (the hooks ran on each part before)."""
    src, dst = (msgs[0].src, msgs[0].dst) if msgs else (-1, -1)
    return Message(BUNDLE, src, dst, tuple(msgs), sum(m.nbytes for m in msgs))


def unbundle(msg: Message) -> list[Message]:
    assert msg.kind == BUNDLE, msg.kind
    return list(msg.payload)


@dataclass(frozen=True)
class CvtOptions:
    """FedCVT's knobs (ALGORITHMS.md): temperature, thresholds, loss weights, sizes, and
    ``pseudo_balance`` and ``est_rescale`` (not in the paper; ``balanced_pseudo_labels``,
    ``match_moments``; defaults: the paper's)."""

    rep_dim: int = 32  # d: width of each of u_p and c_p; r_p is 2d wide
    temperature: float = 0.5  # sharpening T of the attention (0.5-0.7 in the paper)
    t_fed: float = 0.8  # pseudo-label thresholds: federated, active-only, passive-only
    t_active: float = 0.7
    t_passive: float = 0.7
    w_shared: float = 0.1
    w_orth: float = 0.01
    w_est: float = 0.5
    n_local: int = 4000  # non-overlapping rows per party (capped by the data)
    pseudo_balance: str = "none"  # none (the paper's rule) | quota | threshold (BALANCES)
    est_rescale: str = "none"  # none (the paper) | moments (RESCALES, ``match_moments``)
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


def _votes(
    p_fed: torch.Tensor,
    p_active: torch.Tensor,
    p_passive: torch.Tensor,
    thresholds: tuple[float, float, float],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(agree (b,) bool, label (b,) int64, above (b,) bool, margin (b,) float) of a batch.

    agree: the three argmaxes are equal; label: f_AB's argmax; above: each top probability
    is at least its threshold; margin: min over the three of (top probability - threshold),
    how far the weakest classifier clears its threshold (the balanced rules rank by it)."""
    conf = [p.max(dim=1) for p in (p_fed, p_active, p_passive)]
    label = conf[0].indices
    agree = torch.ones_like(label, dtype=torch.bool)
    above = torch.ones_like(label, dtype=torch.bool)
    for (value, index), threshold in zip(conf, thresholds, strict=True):
        agree &= index == label
        above &= value >= threshold
    margin = torch.stack([v - t for (v, _), t in zip(conf, thresholds, strict=True)]).amin(0)
    return agree, label, above, margin


def pseudo_labels(
    p_fed: torch.Tensor,
    p_active: torch.Tensor,
    p_passive: torch.Tensor,
    thresholds: tuple[float, float, float],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which unlabeled rows get a pseudo-label, and which label (the paper's rule).

    p_*: (b, C) class probabilities of f_AB, f_B (active-only) and f_A (passive-only).
    A row is kept when all three argmaxes agree and each classifier's top probability is at
    least its threshold (t_fed, t_active, t_passive). Returns (mask (b,) bool, label (b,)).
    """
    agree, label, above, _ = _votes(p_fed, p_active, p_passive, thresholds)
    return agree & above, label


BALANCES = ("none", "quota", "threshold")  # ``pseudo_balance`` values; none: the paper


def label_prior(y: torch.Tensor, n_classes: int) -> torch.Tensor:
    """(C,) class shares of the active party's own labeled rows ``y`` (n,): the prior the
    balanced rules follow. Only B's labels enter; A's rows have none."""
    counts = torch.bincount(y.long(), minlength=n_classes).double()  # (C,)
    return counts / counts.sum().clamp(min=1.0)


def _top_per_class(
    pool: torch.Tensor, label: torch.Tensor, margin: torch.Tensor, quota: list[int]
) -> torch.Tensor:
    """(b,) bool: for each class c, the ``quota[c]`` rows of ``pool`` (b,) labeled c with the
    largest ``margin`` (b,) (ties: the earlier row)."""
    keep = torch.zeros_like(pool)
    for c, q in enumerate(quota):
        rows = torch.nonzero(pool & (label == c)).flatten()  # (n_c,)
        if q > 0 and len(rows):
            order = torch.argsort(margin[rows], descending=True, stable=True)
            keep[rows[order[:q]]] = True
    return keep


def balanced_pseudo_labels(
    p_fed: torch.Tensor,
    p_active: torch.Tensor,
    p_passive: torch.Tensor,
    thresholds: tuple[float, float, float],
    prior: torch.Tensor,
    mode: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's rule with class shares that follow ``prior`` (C,); (mask (b,), label (b,)).

    Why: on imbalanced binary data (adult, credit) the fixed thresholds are cleared mostly by
    the majority class, so the pseudo-labels are 8-10 % positive where the data is 24 %
    (README), which pulls f_AB toward the majority class. Two ways to follow the prior:

    - ``quota``: never loosens a threshold. Of the rows the paper's rule accepts (count
      n_c per class), each class keeps at most q_c = floor(prior_c * m) with
      m = min over classes with prior_c > 0 of n_c / prior_c, its most confident rows
      (largest margin over the thresholds). The scarcest class (relative to its prior) keeps
      all its rows, the others are cut to match: fewer pseudo-labels, none in a batch
      where some class has no accepted row.
    - ``threshold``: per-class thresholds. All three classifiers must still agree; the
      thresholds of class c are (t_fed, t_active, t_passive) + delta_c, with delta_c set so
      that class c accepts q_c = round(prior_c * K) rows, K the paper's accepted count in
      this batch (its most confident agreeing rows, by margin). The total stays the paper's;
      the majority class's thresholds rise, the minority's fall (to at least agreement).
    """
    assert mode in BALANCES[1:], mode
    agree, label, above, margin = _votes(p_fed, p_active, p_passive, thresholds)
    accepted = agree & above  # (b,) the paper's rule
    counts = torch.bincount(label[accepted], minlength=len(prior)).double()  # (C,)
    if mode == "quota":
        present = prior > 0
        m = float((counts[present] / prior[present]).min()) if bool(present.any()) else 0.0
        quota = [math.floor(float(p) * m + 1e-9) for p in prior]
        return _top_per_class(accepted, label, margin, quota), label
    k = int(accepted.sum())
    quota = [math.floor(float(p) * k + 0.5) for p in prior]
    return _top_per_class(agree, label, margin, quota), label


RESCALES = ("none", "moments")  # ``est_rescale`` values; none: the paper


def match_moments(est: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """``est`` (b, k) shifted and scaled per dimension to the mean and std of ``ref``
    (n_ol, k), the real representations of the overlap (the attention values).

    Why (``est_rescale: moments``, not in the paper): an attention output is a convex mix of
    the overlap's values, so with 250-500 overlap rows and T=0.5 it is pulled toward their
    mean (``est_a_std_ratio`` in the records measures by how much). f_AB then trains on
    estimates narrower than the real r_A it sees at test time. Matching the first two
    moments per batch tests that suspect; gradients still flow through ``est``."""
    if len(est) < 2:
        return est
    ref = ref.detach()
    scale = ref.std(dim=0, keepdim=True) / est.std(dim=0, keepdim=True).clamp(min=1e-6)  # (1, k)
    return ref.mean(dim=0, keepdim=True) + (est - est.mean(dim=0, keepdim=True)) * scale


def std_ratio(est: torch.Tensor, ref: torch.Tensor) -> float:
    """sqrt(sum_k var(est_k) / sum_k var(ref_k)) for est (b, k), ref (n, k): the pooled std
    ratio, 1 = no shrinkage toward the mean (a measurement, no gradient). Pooled, not a
    mean of per-dimension ratios: a dead (constant) dimension would make those explode."""
    with torch.no_grad():
        return float((est.var(dim=0).sum() / ref.var(dim=0).sum().clamp(min=1e-12)).sqrt())


def orthogonality(unique: torch.Tensor, shared: torch.Tensor) -> torch.Tensor:
    """||u^T c||_F^2 / b^2 for u, c (b, d): pushes unique and shared codes apart."""
    return (unique.T @ shared).pow(2).sum() / max(1, unique.shape[0]) ** 2


def masked_ce(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the rows in ``mask`` (0 when none): logits (b, C), y (b,)."""
    if not bool(mask.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(logits[mask], y[mask])
