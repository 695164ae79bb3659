"""GPer: gradient perturbation with the other classes' gradients (Yang et al. 2022a; VFLAIR).

For a sample with label y, the gradient the active party would send for label c is
g_c = J^T (p - e_c) / B (J: d logits / d H_k, p: softmax of the logits, B: batch). GPer
sends g_y + sum_{c != y} u_c g_c with u_c ~ N(0, sigma^2) per sample and class, sigma =
strength: the true label's gradient is blended with random multiples of every other
label's, so the sign pattern and norm that label-inference attacks read are randomized.
Because the sum is linear in (p - e_c), it costs one extra vector-Jacobian product:
sum_c u_c g_c = J^T v with v_i = (p_i sum_c u_ic - u_i) / B, rows (B, C).

Option ``form``: ``standard`` (default) is the above, as the paper's text describes it
(strength = the std of u: larger is stronger). ``vflair`` is what VFLAIR's code does
(``defense_functions.perturb``, its table's numbers): strength is a privacy budget epsilon,
u_c ~ Laplace(0, 2 / epsilon) for every class, the true one included, so a *smaller*
strength is the stronger defense (epsilon 0.01: Laplace scale 200). VFLAIR's MNIST table
lists GPer at 10, 1, 0.1, 0.01 in this sense; ``procedure: vflair`` sets it.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from trainables.defenses.base import Defense, DefenseInfo
from trainables.defenses.stacked import StackedHook

FORMS = ("standard", "vflair")


def other_class_weights(
    p: torch.Tensor, u: torch.Tensor, y: torch.Tensor, true_class: bool = False
) -> torch.Tensor:
    """v = (p sum_c u_c - u) / B with u zeroed at the true class (kept with ``true_class``,
    VFLAIR's form): (..., B, C) from the softmax ``p``, the noise ``u`` (changed in place)
    and the labels ``y`` (..., B)."""
    if not true_class:
        u.scatter_(-1, y.unsqueeze(-1), 0.0)  # only the other classes
    return (p * u.sum(dim=-1, keepdim=True) - u) / p.shape[-2]


class StackedGPer(StackedHook):
    """K trainings' perturbations in one vector-Jacobian product over the stacked logits;
    each training's noise from its own stream, none for a training at strength 0."""

    messages = False
    model = True

    def gradients(
        self,
        grads: list[torch.Tensor],
        logits: torch.Tensor,
        h_passive: list[torch.Tensor],
        y: torch.Tensor,
    ) -> list[torch.Tensor]:
        acting = self.acting(self.members)
        if not acting or not grads:
            return grads
        n, c = logits.shape[1:]  # logits (K, B, C)
        vflair = self.members[0].params["form"] == "vflair"  # one form per stack (its key)
        p = torch.softmax(logits.detach(), dim=2)
        u = torch.zeros_like(p)
        for j in acting:
            member = self.members[j]
            member.count("gradients")
            if vflair:  # u ~ Laplace(0, 2 / epsilon), epsilon = strength
                u[j] = (2.0 / member.strength) * member.noise((n, c), "laplace").to(p.dtype)
            else:
                u[j] = member.strength * member.noise((n, c)).to(p.dtype)
        v = other_class_weights(p, u, y, true_class=vflair)  # (K, B, C)
        extra = torch.autograd.grad(logits, h_passive, grad_outputs=v, retain_graph=True)
        return [g + e for g, e in zip(grads, extra, strict=True)]


class GradientPerturbation(Defense):
    name = "gper"
    stacked = StackedGPer
    defaults: ClassVar[dict[str, object]] = {"form": "standard"}  # or "vflair": see above
    info = DefenseInfo(
        party="active",
        grid=(0.01, 0.1, 1.0, 10.0),
        neutral=0.0,
        quantity="std of the random weights on the other classes' gradients",
    )

    def validate(self) -> None:
        self.choice("form", FORMS)


DEFENSE = GradientPerturbation
