"""SimSiam (Chen & He 2021): L = -cos(p, stopgrad z); the target encoder is the online one."""

from __future__ import annotations

import torch

from trainables.ssl.hssl.base import SSL_METHODS, SSLMethod, cosine


class SimSiam(SSLMethod):
    name = "simsiam"
    momentum = None
    has_predictor = True

    def loss(self, p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return -cosine(p, z).mean()


SSL_METHODS.register("simsiam", SimSiam)
