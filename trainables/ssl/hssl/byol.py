"""BYOL (Grill et al. 2020): L = 2 - 2 cos(p, stopgrad z~), z~ from an EMA target (0.995)."""

from __future__ import annotations

import torch

from trainables.ssl.hssl.base import SSL_METHODS, SSLMethod, cosine


class BYOL(SSLMethod):
    name = "byol"
    momentum = 0.995  # FedHSSL Appendix B
    has_predictor = True

    def loss(self, p: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return (2.0 - 2.0 * cosine(p, z)).mean()


SSL_METHODS.register("byol", BYOL)
