"""MoCo (He et al. 2020) as FedHSSL uses it: InfoNCE against a queue of past targets.

Predictor: identity (Table II). Target: EMA of the online encoder (momentum 0.99), queue
4096, temperature 0.5 (Appendix B). The queue starts as random unit vectors (as MoCo's
reference code does), drawn from the seeded generator so runs are reproducible.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch.nn import functional as F

from trainables.ssl.hssl.base import SSL_METHODS, SSLMethod


class MoCo(SSLMethod):
    name = "moco"
    momentum: ClassVar[float | None] = 0.99
    has_predictor = False

    def __init__(self, dim: int, queue_size: int = 4096, tau: float = 0.5, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.queue = F.normalize(torch.randn((queue_size, dim), generator=gen), dim=1)  # (Q, P)
        self.ptr = 0
        self.tau = tau

    def loss(self, p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        q = F.normalize(p, dim=1)  # (B, P)
        k = F.normalize(z.detach(), dim=1)  # (B, P)
        pos = (q * k).sum(dim=1, keepdim=True)  # (B, 1)
        neg = q @ self.queue.T  # (B, Q)
        logits = torch.cat([pos, neg], dim=1) / self.tau  # (B, 1+Q)
        return F.cross_entropy(logits, torch.zeros(len(q), dtype=torch.int64))

    @torch.no_grad()
    def observe(self, z: torch.Tensor) -> None:
        """Enqueue the step's targets (B, P), overwriting the oldest."""
        n = len(self.queue)
        k = F.normalize(z.detach(), dim=1)[-n:]  # (min(B, Q), P)
        idx = (self.ptr + torch.arange(len(k))) % n
        self.queue[idx] = k
        self.ptr = int((self.ptr + len(k)) % n)


SSL_METHODS.register("moco", MoCo)
