"""The pieces every SSL method shares: widths, the two-tower network, the method registry.

Why a ``Tower``: FedHSSL's cross-party and local models are the same two-tower shape
(online encoder + projector + predictor, and a target encoder that is the online one for
SimSiam and its EMA for BYOL/MoCo, Table II); the encoder is split into a party-private
bottom and a top that partial model aggregation may average (Table III: "top 1 layer").
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from torch.nn import functional as F

from trainables.registry import ClassRegistry

SSL_METHODS: ClassRegistry[SSLMethod] = ClassRegistry("ssl method")


@dataclass(frozen=True)
class Widths:
    """Encoder and head widths. Paper: projector [512, 512, 512] (MoCo [512, 512, 128]),
    predictor [128, 512]; the encoder widths are ours (MLP bottom + 1-layer top).

    ``head_bn``: batch normalisation in the projector and predictor as in the authors'
    reference code (FedHSSL ``models/ssl_utils.py``, after SimSiam/lightly): projector
    Linear-BN-ReLU, Linear-BN-ReLU, Linear-BN; predictor Linear-BN-ReLU, Linear. Without
    it SimSiam and BYOL collapse within a few epochs (``benchmarks.ssl_central``:
    per-dimension std of the normalised projections -> 0); False keeps the plain heads.
    """

    hidden: int = 128  # bottom output width
    emb: int = 64  # top output: the representation fine-tuning uses
    proj: int = 512  # projector hidden widths
    proj_out: int = 512  # projector output (MoCo: 128)
    pred: int = 128  # predictor hidden width
    head_bn: bool = True  # BN in projector/predictor (reference code); False: plain MLPs


class SSLMethod:
    """One SSL objective. ``momentum`` None: the target encoder is the online one."""

    name: ClassVar[str] = "base"
    momentum: ClassVar[float | None] = None
    has_predictor: ClassVar[bool] = True

    def loss(self, p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """(B, P) predictions vs (B, P) stop-gradient targets -> scalar."""
        raise NotImplementedError

    def observe(self, z: torch.Tensor) -> None:
        """Called with the targets of each step (MoCo's queue); default: nothing."""


def mlp_layers(widths: list[int], last_relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2 or last_relu:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def head_layers(widths: list[int], out_bn: bool) -> nn.Sequential:
    """An SSL head with BN after every hidden Linear (those carry no bias: BN's shift
    replaces it) and, if ``out_bn``, after the last one; ReLU between layers only.

    The BN layers always normalise with the batch's own statistics (no running buffers):
    the heads only ever run in pretraining, in training mode, where that is what BN does
    anyway; without buffers partial model aggregation averages learnable weights only."""
    layers: list[nn.Module] = []
    n = len(widths) - 1
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        last = i == n - 1
        layers.append(nn.Linear(a, b, bias=last))
        if not last or out_bn:
            layers.append(nn.BatchNorm1d(b, track_running_stats=False))
        if not last:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Tower(nn.Module):
    """bottom (N, d) -> (N, hidden); top -> (N, emb); projector -> (N, P); predictor -> (N, P).

    ``target`` is a frozen EMA copy of bottom+top+projector for methods with momentum.
    """

    def __init__(self, in_dim: int, w: Widths, method: SSLMethod) -> None:
        super().__init__()
        self.method = method
        self.bottom = mlp_layers([in_dim, w.hidden], last_relu=True)
        self.top = mlp_layers([w.hidden, w.emb], last_relu=True)
        proj_widths, pred_widths = (
            [w.emb, w.proj, w.proj, w.proj_out],
            [w.proj_out, w.pred, w.proj_out],
        )
        if w.head_bn:
            self.projector = head_layers(proj_widths, out_bn=True)
            predictor = head_layers(pred_widths, out_bn=False)
        else:
            self.projector = mlp_layers(proj_widths, last_relu=False)
            predictor = mlp_layers(pred_widths, last_relu=False)
        self.predictor: nn.Module = predictor if method.has_predictor else nn.Identity()
        self.target: nn.Module | None = None
        if method.momentum is not None:
            self.target = copy.deepcopy(nn.Sequential(self.bottom, self.top, self.projector))
            self.target.requires_grad_(False)

    def represent(self, x: torch.Tensor) -> torch.Tensor:
        """(N, d) -> (N, emb): what fine-tuning builds on."""
        return self.top(self.bottom(x))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, d) -> online z (N, P), prediction p (N, P)."""
        z = self.projector(self.represent(x))
        return z, self.predictor(z)

    @torch.no_grad()
    def target_z(self, x: torch.Tensor) -> torch.Tensor:
        """(N, d) -> (N, P) stop-gradient target representation."""
        if self.target is None:
            return self.projector(self.represent(x))
        return self.target(x)

    def two_view_loss(
        self, v1: torch.Tensor, v2: torch.Tensor
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """Two views (B, d') -> (loss, (p1, p2), (t1, t2)): local SSL's symmetric
        ½[L(p1, t̃2) + L(p2, t̃1)]. SimSiam's target is the online z itself (the same values
        ``target_z`` would recompute, without a second pass)."""
        (z1, p1), (z2, p2) = self(v1), self(v2)
        if self.target is None:
            t1, t2 = z1.detach(), z2.detach()
        else:
            t1, t2 = self.target_z(v1), self.target_z(v2)
        loss = 0.5 * (self.method.loss(p1, t2) + self.method.loss(p2, t1))
        return loss, (p1, p2), (t1, t2)

    @torch.no_grad()
    def update_target(self) -> None:
        if self.target is None or self.method.momentum is None:
            return
        m = self.method.momentum
        online = nn.Sequential(self.bottom, self.top, self.projector)
        for t, o in zip(self.target.parameters(), online.parameters(), strict=True):
            t.mul_(m).add_(o, alpha=1.0 - m)

    def shared_modules(self) -> dict[str, nn.Module]:
        """What partial model aggregation averages: the top encoder (its layer and the
        projector above it, which only pretraining uses) and the predictor."""
        return {"top": self.top, "projector": self.projector, "predictor": self.predictor}


def cosine(p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """(B, P), (B, P) -> (B,) cosine similarity with z detached."""
    return F.cosine_similarity(p, z.detach(), dim=1)
