"""GPer: gradient perturbation with the other classes' gradients (Yang et al. 2022a; VFLAIR).

For a sample with label y, the gradient the active party would send for label c is
g_c = J^T (p - e_c) / B (J: d logits / d H_k, p: softmax of the logits, B: batch). GPer
sends g_y + sum_{c != y} u_c g_c with u_c ~ N(0, sigma^2) per sample and class, sigma =
strength: the true label's gradient is blended with random multiples of every other
label's, so the sign pattern and norm that label-inference attacks read are randomized.
Because the sum is linear in (p - e_c), it costs one extra vector-Jacobian product:
sum_c u_c g_c = J^T v with v_i = (p_i sum_c u_ic - u_i) / B, rows (B, C).
"""

from __future__ import annotations

import torch

from trainables.defenses.base import Defense, DefenseInfo


class GradientPerturbation(Defense):
    name = "gper"
    info = DefenseInfo(
        party="active",
        grid=(0.01, 0.1, 1.0, 10.0),
        neutral=0.0,
        quantity="std of the random weights on the other classes' gradients",
    )

    def gradients(
        self,
        grads: list[torch.Tensor],
        logits: torch.Tensor,
        h_passive: list[torch.Tensor],
        y: torch.Tensor,
    ) -> list[torch.Tensor]:
        if self.strength == 0.0 or not grads:
            return grads
        self.count("gradients")
        n, c = logits.shape  # (B, C)
        p = torch.softmax(logits.detach(), dim=1)
        u = self.strength * self.noise((n, c)).to(p.dtype)
        u[torch.arange(n), y] = 0.0  # only the other classes
        v = (p * u.sum(dim=1, keepdim=True) - u) / n  # (B, C)
        extra = torch.autograd.grad(logits, h_passive, grad_outputs=v, retain_graph=True)
        return [g + e for g, e in zip(grads, extra, strict=True)]


DEFENSE = GradientPerturbation
