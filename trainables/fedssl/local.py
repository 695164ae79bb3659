"""One agent's local optimisation steps: G-Reg, G-MixUp, pseudo-labels and the baselines.

Why plain functions over (models, optimizers, batch): support and query agents run the
same steps on different label sources (true one-hot labels vs sharpened pseudo-labels,
Sec. 3.3-3.4), and the DP path differs only in G's optimizer and in summing per-sample
losses (``PrivateG``). Shapes: x (B, d) pixels in [0, 1]; p (B, C) a label distribution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as nnf
from torch import nn

from trainables.fedssl.data import augment
from trainables.fedssl.dp import PrivateG


@dataclass
class Ctx:
    """An agent's randomness and the constants its steps need (seeded per round)."""

    n_classes: int
    z_dim: int
    alpha: float
    sharpen: float
    augment_k: int
    threshold: float  # 0: every pseudo-label is kept (the paper)
    mix_real: bool  # G-MixUp's x̂ = λ x1 + (1 - λ) G(λ = 0) instead of G(λ)
    image_shape: tuple[int, int] | None
    gen: torch.Generator  # z, class draws, augmentations
    rng: np.random.Generator  # λ ~ Beta(α, α)


def soft_ce(logits: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """(B,) cross-entropy of logits (B, C) against label distributions p (B, C)."""
    return -(p * nnf.log_softmax(logits, dim=1)).sum(dim=1)


def g_weight(lam: torch.Tensor) -> torch.Tensor:
    """The dynamic realism weight g(λ) = exp(max(λ, 1-λ) - 1) in [0.61, 1] (Sec. 3.4)."""
    return torch.exp(torch.maximum(lam, 1 - lam) - 1)


def draw_mix(
    ctx: Ctx, p: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """For labels p (B, C): λ (B,) ~ Beta(α, α), a random class p2 (B, C) one-hot, noise
    z (B, z_dim), and the mixed label λ p + (1 - λ) p2 (B, C)."""
    b = len(p)
    lam = torch.as_tensor(ctx.rng.beta(ctx.alpha, ctx.alpha, size=b), dtype=torch.float32)
    c2 = torch.randint(0, ctx.n_classes, (b,), generator=ctx.gen)
    p2 = nnf.one_hot(c2, ctx.n_classes).float()
    z = torch.randn((b, ctx.z_dim), generator=ctx.gen)
    return lam, p2, z, lam[:, None] * p + (1 - lam[:, None]) * p2


def pseudo_labels(f: nn.Module, u: torch.Tensor, ctx: Ctx) -> tuple[torch.Tensor, torch.Tensor]:
    """Sharpened mean prediction over K augmented views (Sec. 3.3), (B, C), and which rows
    keep theirs (B,) bool: all unless ``ctx.threshold`` > 0 (then the mean's max >= it).
    ``f`` is the round's global model ("given a trained model w"), frozen for the round."""
    with torch.no_grad():
        views = [augment(u, ctx.gen) for _ in range(ctx.augment_k)]
        mean = torch.stack([nnf.softmax(f(v), dim=1) for v in views]).mean(dim=0)
        sharp = mean.pow(ctx.sharpen)
        keep = mean.max(dim=1).values >= ctx.threshold
        return sharp / sharp.sum(dim=1, keepdim=True), keep


def _backward(losses: torch.Tensor, private: bool) -> None:
    """Mean for ordinary steps; the sum of per-sample losses for a DP step on G."""
    (losses.sum() if private else losses.mean()).backward()


def _scale_grads(module: nn.Module, b: int) -> None:
    """Turn summed-loss grads of a non-private module into mean-loss grads."""
    for p in module.parameters():
        if p.grad is not None:
            p.grad /= max(1, b)


def greg_step(
    m: dict[str, nn.Module], opt: dict[str, torch.optim.Optimizer], x: torch.Tensor,
    p: torch.Tensor, ctx: Ctx, private: PrivateG | None,
) -> None:  # fmt: skip
    """G-Reg: a D step (real (x, p) vs G's mix), then a G step on ℓ_real + ℓ_rec."""
    g = private.module if private is not None else m["G"]
    lam, p2, z, pmix = draw_mix(ctx, p)
    w = g_weight(lam)
    if len(x):
        with torch.no_grad():
            fake = m["G"](x, p, p2, z, lam)
        ones, zeros = torch.ones(len(x)), torch.zeros(len(x))
        d_loss = (
            nnf.binary_cross_entropy_with_logits(m["D"](x, p), ones)
            + (
                w
                * nnf.binary_cross_entropy_with_logits(m["D"](fake, pmix), zeros, reduction="none")
            ).mean()
        )
        opt["D"].zero_grad(set_to_none=True)
        d_loss.backward()
        opt["D"].step()
    fake = g(x, p, p2, z, lam)
    real = w * nnf.binary_cross_entropy_with_logits(
        m["D"](fake, pmix), torch.ones(len(x)), reduction="none"
    )  # (B,)
    rec = ((g(x, p, p2, z, torch.ones(len(x))) - x) ** 2).sum(dim=1)  # (B,) ‖G(λ=1) - x‖²
    _g_update(real + rec, m, opt, private)
    m["D"].zero_grad(set_to_none=True)  # D was only a critic in this step


def gmix_step(
    m: dict[str, nn.Module], opt: dict[str, torch.optim.Optimizer], x: torch.Tensor,
    p: torch.Tensor, ctx: Ctx, private: PrivateG | None,
) -> None:  # fmt: skip
    """G-MixUp: F and G on CE(F(G((x, p), p2, z, λ)), λ p + (1 - λ) p2) (Eq. 4 / 5)."""
    g = private.module if private is not None else m["G"]
    lam, p2, z, pmix = draw_mix(ctx, p)
    if ctx.mix_real:  # the row itself blended with G's class-c2 sample
        lam_ = lam[:, None]  # (B, 1)
        xhat = lam_ * x + (1 - lam_) * g(x, p, p2, z, torch.zeros(len(x)))
    else:
        xhat = g(x, p, p2, z, lam)  # (B, d)
    opt["F"].zero_grad(set_to_none=True)
    _g_update(soft_ce(m["F"](xhat), pmix), m, opt, private, also_f=len(x))


def _g_update(
    losses: torch.Tensor, m: dict[str, nn.Module], opt: dict[str, torch.optim.Optimizer],
    private: PrivateG | None, also_f: int = 0,
) -> None:  # fmt: skip
    """Backward ``losses`` (B,), step G (privately or not) and, if ``also_f`` rows, F."""
    if private is None:
        opt["G"].zero_grad(set_to_none=True)
    _backward(losses, private is not None)
    if private is not None:
        private.step()
        _scale_grads(m["F"], also_f)
    else:
        opt["G"].step()
    if also_f:
        opt["F"].step()


def supervised_step(
    f: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, p: torch.Tensor
) -> None:
    """CE of F on its own rows against p (true one-hot or sharpened pseudo-labels)."""
    opt.zero_grad(set_to_none=True)
    soft_ce(f(x), p).mean().backward()
    opt.step()


def lmix_step(
    f: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, p: torch.Tensor, ctx: Ctx
) -> None:
    """L-MixUp (Sec. 3.3, MixMatch's form): mix the batch with a shuffle of itself,
    λ' = max(λ, 1 - λ) so each mix stays closer to its own row."""
    lam = torch.as_tensor(ctx.rng.beta(ctx.alpha, ctx.alpha, size=len(x)), dtype=torch.float32)
    lam = torch.maximum(lam, 1 - lam)[:, None]  # (B, 1)
    perm = torch.randperm(len(x), generator=ctx.gen)
    supervised_step(f, opt, lam * x + (1 - lam) * x[perm], lam * p + (1 - lam) * p[perm])
