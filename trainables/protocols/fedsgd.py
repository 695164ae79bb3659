"""FedSGD: one exchange of embeddings and gradients per mini-batch: the base round
(``Protocol.exchange``) as it is."""

from __future__ import annotations

from typing import Any, ClassVar

from trainables.protocols.base import Protocol


class FedSGD(Protocol):
    name = "fedsgd"
    defaults: ClassVar[dict[str, Any]] = {}
