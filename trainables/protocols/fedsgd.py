"""FedSGD: one exchange of embeddings and gradients per mini-batch (the base loop as is)."""

from __future__ import annotations

from typing import Any, ClassVar

from trainables.protocols.base import Protocol
from trainables.roles import NNActive


class FedSGD(Protocol[NNActive]):
    name = "fedsgd"
    stacks = True  # the base rounds as they are
    defaults: ClassVar[dict[str, Any]] = {}
