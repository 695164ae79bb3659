"""FedSGD: one exchange of embeddings and gradients per mini-batch: the base round
(``Protocol.exchange``) as it is."""

from __future__ import annotations

from typing import ClassVar

from trainables.protocols.base import Protocol, Value


class FedSGD(Protocol):
    name = "fedsgd"
    defaults: ClassVar[dict[str, Value]] = {}
