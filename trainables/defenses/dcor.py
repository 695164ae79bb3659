"""dCor: distance-correlation regularizer (Vepakomma et al. 2019; Sun et al. 2022; VFLAIR).

The active party adds alpha * sum_k log dCor(Y, H_k) to its loss, Y the one-hot labels
of the batch and H_k each passive party's embedding (B, C): the gradient it sends then
also pushes H_k to carry less about Y (label protection). The log keeps the term's
gradient useful when dCor is already small (VFLAIR does the same).

Option ``distances``: ``exact`` (default) takes pairwise distances with ``torch.cdist``.
``vflair`` takes them as VFLAIR's ``pairwise_dist`` does, sqrt(max(|a|^2 - 2 a.b + |b|^2
+ 1e-20, 0)) in float32. The two give the same dCor, not the same gradient: on the
diagonal the expanded square is rounding noise, half of it slightly negative, half
slightly positive, and through the sqrt there many rows get no dCor gradient at all
(209 of 512 in the test's batch) and the others tens of percent off it; in float64 the
two forms agree (``tests/test_defense_dcor.py`` shows all three on a batch of
untrained-scale logits).
Against VFLAIR's own code on the same MNIST rows at alpha = 0.3
(``benchmarks.vflair_side_by_side``, 3 seeds): final MP 0.886 exact, 0.913 ``vflair``,
0.933 VFLAIR's code; batch label inference on the first batch 0.24, 0.29 and 0.49. So
VFLAIR's dCor protects less, and costs less accuracy, than the regularizer the papers
define, partly through this gradient (the rest of the gap is not explained).
``exact`` stays the default; ``vflair`` is there to reproduce VFLAIR's numbers.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from trainables.defenses.base import Defense, DefenseInfo
from trainables.defenses.stacked import Index, StackedHook, scatter

DISTANCES = ("exact", "vflair")


def vflair_distances(x: torch.Tensor) -> torch.Tensor:
    """VFLAIR's ``pairwise_dist(x, x)``: the expanded square, clamped, sqrt:
    (..., B, d) -> (..., B, B)."""
    sq = (x * x).sum(dim=-1)  # (..., B)
    inner = sq[..., :, None] - 2 * (x @ x.transpose(-1, -2)) + sq[..., None, :] + 1e-20
    return torch.sqrt(torch.maximum(inner, torch.zeros((), dtype=x.dtype)))  # diagonal: rounding


def _centered(d: torch.Tensor) -> torch.Tensor:
    """Double-centered (..., B, B) distance matrices."""
    return (
        d - d.mean(dim=-2, keepdim=True) - d.mean(dim=-1, keepdim=True)
        + d.mean(dim=(-2, -1), keepdim=True)
    )  # fmt: skip


def distance_correlation(
    x: torch.Tensor, y: torch.Tensor, distances: str = "exact"
) -> torch.Tensor:
    """Sample distance correlation of (..., B, p) and (..., B, q) rows (Szekely et al.
    2007), in [0, 1], one per leading index; ``distances`` as the module docstring says."""
    dist = vflair_distances if distances == "vflair" else (lambda t: torch.cdist(t, t))
    a, b = _centered(dist(x)), _centered(dist(y))
    dcov2 = (a * b).mean(dim=(-2, -1))
    dvar2 = (a * a).mean(dim=(-2, -1)) * (b * b).mean(dim=(-2, -1))
    return (dcov2.clamp_min(0.0) / dvar2.sqrt().clamp_min(1e-12)).sqrt()


def log_dcor_terms(h_passive: list[torch.Tensor], y: torch.Tensor, how: str) -> torch.Tensor:
    """sum_k log dCor(Y, H_k) per leading index: y (..., B) labels, each H_k (..., B, C)."""
    onehot = torch.nn.functional.one_hot(y, h_passive[0].shape[-1]).to(h_passive[0].dtype)
    terms = [torch.log(distance_correlation(onehot, h, how).clamp_min(1e-6)) for h in h_passive]
    return torch.stack(terms).sum(dim=0)


class StackedDCor(StackedHook):
    """K trainings' terms, one training's (B, B) distance matrices at a time; a training at
    strength 0 gets none. Why not one (K, B, B) batch: at B = 455 the batch's
    intermediates leave the cache and it ran 1.3x slower than training by training
    (``benchmarks.stacked_defenses``); the rest of the training stays stacked.

    Counted only where the term can change the training: its one variable is H_k, so it
    acts through dL/dH_k, the gradient sent at an exchange. A FedBCD or CELU-VFL local
    step reuses stale, detached H_k, where the term is a constant with no gradient (it is
    still returned: the loss value keeps it), and counting it there would report Q
    applications per exchange for one."""

    messages = False
    model = True

    def loss_terms(
        self, h_passive: list[torch.Tensor], y: torch.Tensor, index: Index = None
    ) -> torch.Tensor | None:
        members = self.at(index)
        acting = self.acting(members)
        if not acting or not h_passive:
            return None
        if any(h.requires_grad for h in h_passive):
            for j in acting:
                members[j].count("loss_term")
        how = str(members[0].params["distances"])  # one value per stack (its key)
        terms = torch.stack([log_dcor_terms([h[j] for h in h_passive], y[j], how) for j in acting])
        strengths = self.strengths([members[j] for j in acting])
        return scatter(strengths * terms, acting, len(members))


class DistanceCorrelation(Defense):
    name = "dcor"
    stacked = StackedDCor
    info = DefenseInfo(
        party="active",
        grid=(1e-4, 0.01, 0.1, 0.3),
        neutral=0.0,
        quantity="weight alpha of sum_k log dCor(Y, H_k) in the loss",
    )
    defaults: ClassVar[dict[str, object]] = {"distances": "exact"}  # or "vflair": see above

    def validate(self) -> None:
        self.choice("distances", DISTANCES)


DEFENSE = DistanceCorrelation
