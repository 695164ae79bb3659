"""ISO: isotropic Gaussian noise scaled to the largest row (FedHSSL, after Li et al.).

On each outgoing matrix d (B, m) — gradients dL/dH_k at the active party, or exchanged
representations — ISO adds N(0, sigma^2 I) with sigma = lambda * max_i ||d_i||_2 / sqrt(m):
the noise norm per row is about lambda times the largest row norm, whatever the scale of
the gradients (which shrink as training converges). ``on`` picks what is noised:
``gradient`` (default), ``representation`` (SSL pretraining exchanges) or ``both``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from trainables.defenses.base import Defense, DefenseInfo, with_payload
from trainables.messages import Message

if TYPE_CHECKING:
    from trainables.party import Party


def iso_sigma(d: torch.Tensor, lam: float) -> float:
    """sigma = lambda * max_i ||d_i||_2 / sqrt(m) for d of shape (B, m)."""
    return lam * float(d.norm(dim=1).max()) / math.sqrt(d.shape[1])


class IsotropicNoise(Defense):
    name = "iso"
    defaults: ClassVar[dict[str, Any]] = {"on": "gradient"}
    info = DefenseInfo(
        party="active",
        grid=(0.1, 1.0, 5.0, 25.0),
        neutral=0.0,
        quantity="noise norm relative to the largest row norm (lambda)",
    )

    def validate(self) -> None:
        self.choice("on", ("gradient", "representation", "both"))

    def on_send(self, party: Party, msg: Message) -> Message:
        on = self.params["on"]
        wanted = ("gradient", "representation") if on == "both" else (on,)
        if msg.kind not in wanted or self.strength == 0.0:
            return msg
        d = torch.from_numpy(np.array(msg.payload))
        sigma = iso_sigma(d, self.strength)
        return with_payload(msg, (d + sigma * self.noise(tuple(d.shape)).to(d.dtype)).numpy())


DEFENSE = IsotropicNoise
