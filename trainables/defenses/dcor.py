"""dCor: distance-correlation regularizer (Vepakomma et al. 2019; Sun et al. 2022; VFLAIR).

The active party adds alpha * sum_k log dCor(Y, H_k) to its loss, Y the one-hot labels
of the batch and H_k each passive party's embedding (B, C): the gradient it sends then
also pushes H_k to carry less about Y (label protection). The log keeps the term's
gradient useful when dCor is already small (VFLAIR does the same).
"""

from __future__ import annotations

import torch

from trainables.defenses.base import Defense, DefenseInfo


def _centered_distances(x: torch.Tensor) -> torch.Tensor:
    """Double-centered pairwise Euclidean distances: (B, d) -> (B, B)."""
    d = torch.cdist(x, x)
    return d - d.mean(dim=0, keepdim=True) - d.mean(dim=1, keepdim=True) + d.mean()


def distance_correlation(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Sample distance correlation of (B, p) and (B, q) rows (Szekely et al. 2007), in [0, 1]."""
    a, b = _centered_distances(x), _centered_distances(y)
    dcov2 = (a * b).mean()
    dvar2 = (a * a).mean() * (b * b).mean()
    return (dcov2.clamp_min(0.0) / dvar2.sqrt().clamp_min(1e-12)).sqrt()


class DistanceCorrelation(Defense):
    name = "dcor"
    info = DefenseInfo(
        party="active",
        grid=(1e-4, 0.01, 0.1, 0.3),
        neutral=0.0,
        quantity="weight alpha of sum_k log dCor(Y, H_k) in the loss",
    )

    def loss_term(self, h_passive: list[torch.Tensor], y: torch.Tensor) -> torch.Tensor | None:
        if self.strength == 0.0 or not h_passive:
            return None
        self.count("loss_term")
        onehot = torch.nn.functional.one_hot(y, h_passive[0].shape[1]).to(h_passive[0].dtype)
        terms = [torch.log(distance_correlation(onehot, h).clamp_min(1e-6)) for h in h_passive]
        return self.strength * torch.stack(terms).sum()


DEFENSE = DistanceCorrelation
