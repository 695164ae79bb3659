"""ISO: isotropic Gaussian noise scaled to the largest row (FedHSSL, after Li et al.).

On each outgoing matrix d (B, m) — gradients dL/dH_k at the active party, or exchanged
representations — ISO adds N(0, sigma^2 I) with sigma = lambda * max_i ||d_i||_2 / sqrt(m):
the noise norm per row is about lambda times the largest row norm, whatever the scale of
the gradients (which shrink as training converges). ``target`` picks what is noised:
``gradient`` (default), ``representation`` or ``both``.

Where each applies: FedHSSL's party 1 (active) noises what it exposes to the passive
party — its cross-party representations during SSL pretraining (``cssl_*``, ``gssl_*``,
``hssl_*`` variants) and its gradients during fine-tuning / split learning. In a plain
VFL trial (aggVFL, splitVFL) the active party sends gradients only, so
``target: representation`` has nothing to act on: the planner drops that cell
(``inapplicable``), and a training where it still never fired fails (``applied.py``).
``both`` noises whichever of the two the active party sends.

The parameter was called ``on``; YAML 1.1 reads a bare ``on`` as the boolean true, so it
is ``target`` now and the old name is refused with the new one.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from trainables.defenses.base import Defense, DefenseInfo, with_payload
from trainables.messages import Message

if TYPE_CHECKING:
    from trainables.roles import HookHost

TARGETS = ("gradient", "representation", "both")


def iso_sigma(d: torch.Tensor, lam: float) -> float:
    """sigma = lambda * max_i ||d_i||_2 / sqrt(m) for d of shape (B, m)."""
    return lam * float(d.norm(dim=1).max()) / math.sqrt(d.shape[1])


class IsotropicNoise(Defense):
    name = "iso"
    defaults: ClassVar[dict[str, Any]] = {"target": "gradient"}
    renamed: ClassVar[dict[str, str]] = {"on": "target", "true": "target", "True": "target"}
    info = DefenseInfo(
        party="active",
        grid=(0.1, 1.0, 5.0, 25.0),
        neutral=0.0,
        quantity="noise norm relative to the largest row norm (lambda)",
    )

    def validate(self) -> None:
        self.choice("target", TARGETS)

    def targets(self) -> tuple[str, ...]:
        target = self.params["target"]
        return ("gradient", "representation") if target == "both" else (str(target),)

    def inapplicable(self, sent: tuple[str, ...]) -> str | None:
        why = super().inapplicable(sent)
        if why is None or "representation" not in self.targets():
            return why
        return why + (
            "; representations are exchanged in SSL pretraining (ssl_variant cssl_*, gssl_*,"
            " hssl_*); use target: gradient here"
        )

    def on_send(self, party: HookHost, msg: Message) -> Message:
        if msg.kind not in self.targets() or self.strength == 0.0:
            return msg
        d = torch.from_numpy(np.array(msg.payload))
        sigma = iso_sigma(d, self.strength)
        if sigma > 0.0:  # an all-zero matrix gets no noise: nothing changed
            self.count(msg.kind)
        return with_payload(msg, (d + sigma * self.noise(tuple(d.shape)).to(d.dtype)).numpy())


DEFENSE = IsotropicNoise
