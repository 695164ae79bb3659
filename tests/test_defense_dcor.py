"""dCor's two distance computations: the same dCor, different gradients.

VFLAIR computes pairwise distances as sqrt(max(|a|^2 - 2 a.b + |b|^2 + 1e-20, 0)) in
float32; on the diagonal that is rounding noise under a sqrt, and the gradient of
log dCor through it is wrong for many rows (``distances="vflair"``). The default
(``exact``) must match the float64 gradient; the VFLAIR form must not, while the value
of dCor agrees.
"""

from __future__ import annotations

import pytest
import torch

from trainables.defenses import DEFENSES
from trainables.defenses.dcor import distance_correlation, vflair_distances
from trainables.errors import ConfigError


def _batch(rows: int = 512, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(one-hot labels (B, 10), logits (B, 10)) of the scale an untrained bottom model sends."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (rows,), generator=gen)
    onehot = torch.nn.functional.one_hot(y, 10).float()
    h = 0.1 * torch.randn(rows, 10, generator=gen) + 0.05 * onehot
    return onehot, h


def _grad(onehot: torch.Tensor, h: torch.Tensor, how: str) -> torch.Tensor:
    h = h.detach().clone().requires_grad_()
    (g,) = torch.autograd.grad(torch.log(distance_correlation(onehot, h, how)), h)
    return g


def test_both_forms_give_the_same_dcor_value() -> None:
    onehot, h = _batch()
    exact = float(distance_correlation(onehot, h, "exact"))
    vflair = float(distance_correlation(onehot, h, "vflair"))
    assert 0.05 < exact < 0.95
    assert vflair == pytest.approx(exact, rel=1e-4)


def test_vflair_distances_are_the_pairwise_distances_off_the_diagonal() -> None:
    _, h = _batch(64)
    off = ~torch.eye(64, dtype=torch.bool)
    assert torch.allclose(vflair_distances(h)[off], torch.cdist(h, h)[off], rtol=1e-3, atol=1e-5)


def test_exact_gradient_matches_float64_and_vflair_form_does_not() -> None:
    onehot, h = _batch()
    reference = _grad(onehot.double(), h.double(), "vflair").float()  # float64: no rounding
    exact, vflair = _grad(onehot, h, "exact"), _grad(onehot, h, "vflair")
    rel = lambda g: float((g - reference).norm() / reference.norm())  # noqa: E731
    assert rel(exact) < 1e-3
    assert rel(vflair) > 0.1  # the float32 diagonal corrupts VFLAIR's gradient
    dead = int((vflair.abs().sum(dim=1) == 0).sum())  # rows its dCor term never reaches
    assert dead > 0.1 * len(h)
    assert int((exact.abs().sum(dim=1) == 0).sum()) == 0


def test_the_default_is_exact_and_a_bad_choice_is_refused() -> None:
    assert DEFENSES.get("dcor")(0.3).params["distances"] == "exact"
    with pytest.raises(ConfigError, match=r"distances='float64'.*allowed: 'exact', 'vflair'"):
        DEFENSES.get("dcor")(0.3, distances="float64")
