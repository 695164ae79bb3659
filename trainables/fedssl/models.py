"""FedSSL's three networks: classifier F, conditional discriminator D, conditional generator G.

Why MLPs of Linear layers only: the agents run on CPU cores shared by a sweep, the inputs
are flat MNIST (784) or digits (64) pixels in [0, 1], and Opacus computes G's per-sample
gradients for ``nn.Linear`` with its fast hooks (no BatchNorm: it mixes samples and would
void per-sample clipping). Widths scale with the input: 256 hidden units for MNIST, 128
for digits.

G is the paper's encoder-decoder: ``G((x1, p1), p2, z, λ)``. The encoder reads the local
sample and its (pseudo) label; the decoder blends its code with a noise vector and the
sampled class: λ = 1 asks for ``x1`` back (reconstruction, ℓ_rec), λ = 0 for a sample of
class ``p2`` from noise (realism, ℓ_real), λ in between for a G-MixUp sample whose label
is λ p1 + (1 - λ) p2.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

CODE_DIM = 32  # G's encoder output


def hidden_width(d: int) -> int:
    return 256 if d > 256 else 128


class Classifier(nn.Module):
    """F: x (B, d) -> logits (B, C)."""

    def __init__(self, d: int, n_classes: int) -> None:
        super().__init__()
        h = hidden_width(d)
        self.net = nn.Sequential(
            nn.Linear(d, h), nn.ReLU(),
            nn.Linear(h, h // 2), nn.ReLU(), nn.Linear(h // 2, n_classes),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class Discriminator(nn.Module):
    """D: (x (B, d), label distribution p (B, C)) -> realism logit (B,)."""

    def __init__(self, d: int, n_classes: int) -> None:
        super().__init__()
        h = hidden_width(d)
        self.net = nn.Sequential(
            nn.Linear(d + n_classes, h), nn.LeakyReLU(0.2),
            nn.Linear(h, h // 2), nn.LeakyReLU(0.2), nn.Linear(h // 2, 1),
        )  # fmt: skip

    def forward(self, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([x, p], dim=1)).squeeze(1)


class Generator(nn.Module):
    """G: ((x1 (B, d), p1 (B, C)), p2 (B, C), z (B, z_dim), λ (B,)) -> x̂ (B, d) in [0, 1]."""

    def __init__(self, d: int, n_classes: int, z_dim: int) -> None:
        super().__init__()
        h = hidden_width(d)
        self.encoder = nn.Sequential(
            nn.Linear(d + n_classes, h), nn.ReLU(), nn.Linear(h, CODE_DIM)
        )  # fmt: skip
        self.decoder = nn.Sequential(
            nn.Linear(CODE_DIM + z_dim + n_classes + 1, h), nn.ReLU(),
            nn.Linear(h, h), nn.ReLU(), nn.Linear(h, d), nn.Sigmoid(),
        )  # fmt: skip

    def forward(
        self, x1: torch.Tensor, p1: torch.Tensor, p2: torch.Tensor, z: torch.Tensor,
        lam: torch.Tensor,
    ) -> torch.Tensor:  # fmt: skip
        code = self.encoder(torch.cat([x1, p1], dim=1))  # (B, CODE_DIM)
        lam_ = lam.unsqueeze(1)  # (B, 1)
        blend = torch.cat([lam_ * code, (1 - lam_) * z, p2, lam_], dim=1)
        return self.decoder(blend)


def build_models(d: int, n_classes: int, z_dim: int, generative: bool) -> dict[str, nn.Module]:
    """F (and D, G for the generative variants), in the fixed order of the model vector."""
    models: dict[str, nn.Module] = {"F": Classifier(d, n_classes)}
    if generative:
        models["D"] = Discriminator(d, n_classes)
        models["G"] = Generator(d, n_classes, z_dim)
    return models


def flatten(models: dict[str, nn.Module]) -> np.ndarray:
    """Every parameter, in model then parameter order, as one float32 vector (what FedAvg
    averages and what crosses the wire)."""
    parts = [p.detach().reshape(-1) for m in models.values() for p in m.parameters()]
    return torch.cat(parts).cpu().numpy().astype(np.float32)


def load_flat(models: dict[str, nn.Module], flat: np.ndarray) -> None:
    """Copy ``flat`` (as made by ``flatten``) into the models' parameters, in place."""
    vec = torch.as_tensor(np.asarray(flat, dtype=np.float32))
    offset = 0
    with torch.no_grad():
        for m in models.values():
            for p in m.parameters():
                n = p.numel()
                p.copy_(vec[offset : offset + n].view_as(p))
                offset += n
    assert offset == vec.numel(), f"model vector of {vec.numel()} values, models need {offset}"
