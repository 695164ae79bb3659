"""The protocol owns the rounds (Flower's ``Strategy`` idea); subclasses fill small hooks.

A protocol runs where the active party lives: in this process for the ``local``
transport, inside the active party's actor for ``ray``. It talks to the passive parties
only through a ``Transport``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar

from trainables.errors import ConfigError
from trainables.messages import Message
from trainables.party import ActiveParty
from trainables.registry import Registry
from trainables.transport.base import Transport

PROTOCOLS: Registry = Registry("protocol")


@dataclass(frozen=True)
class TrainResult:
    mp: float
    rounds: int
    comm_bytes: int
    train_seconds: float
    final_loss: float


class Protocol:
    """Base: FedSGD-style rounds over the batch schedule; one exchange per round.

    Subclasses declare ``defaults`` (their parameters) and may override ``local_steps``
    or the round itself.
    """

    name: ClassVar[str] = "base"
    defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, **params: Any) -> None:
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            allowed = ", ".join(self.defaults) or "none"
            raise ConfigError(
                f"protocol {self.name!r}: unknown parameter(s) {unknown}; allowed: {allowed}"
            )
        self.params = {**self.defaults, **params}
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError for bad parameter values."""

    @property
    def local_steps(self) -> int:
        """Local updates per exchange (Q); FedSGD does one."""
        return 1

    def run(self, active: ActiveParty, transport: Transport, epochs: int) -> TrainResult:
        """Train for ``epochs`` over the shared schedule, then evaluate on the test rows."""
        start = time.perf_counter()
        grads: list[Message | None] = [None] * transport.n_peers
        for epoch in range(epochs):
            for ref in active.schedule.refs(epoch):
                grads = self.round(active, transport, grads, ref)
        # deliver the last gradients so every party ends on the same model version
        transport.call("step", [(g, None) for g in grads], training=True)
        seconds = time.perf_counter() - start
        mp = self.evaluate(active, transport)
        return TrainResult(
            mp=mp,
            rounds=transport.stats.rounds,
            comm_bytes=transport.stats.comm_bytes,
            train_seconds=seconds,
            final_loss=active.last_loss,
        )

    def round(
        self, active: ActiveParty, transport: Transport, grads: list[Message | None], ref: Any
    ) -> list[Message | None]:
        """One exchange: passives apply last gradients and send H; the active party answers."""
        pending = transport.submit("step", [(g, ref) for g in grads], training=True, new_round=True)
        active.forward(ref)  # overlaps with the passive parties' work on a remote transport
        embeddings = transport.gather(pending)
        return list(active.train_round(ref, embeddings))

    def evaluate(self, active: ActiveParty, transport: Transport) -> float:
        test = transport.call("embed", [("test",)] * transport.n_peers, training=False)
        return active.evaluate(test)
