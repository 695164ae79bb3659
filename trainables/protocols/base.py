"""The protocol owns the rounds (Flower's ``Strategy`` idea); subclasses fill small hooks.

A protocol runs where the active party lives: in this process for the ``local``
transport, inside the active party's actor for ``ray``. It talks to the passive parties
only through a ``Transport``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from trainables.errors import ConfigError
from trainables.messages import BatchRef, Message
from trainables.party import ActiveParty
from trainables.registry import Registry
from trainables.transport.base import Pending, Transport

PROTOCOLS: Registry = Registry("protocol")


@dataclass(frozen=True)
class TrainResult:
    mp: float
    rounds: int
    comm_bytes: int
    train_seconds: float
    final_loss: float
    submit_seconds: float = 0.0  # in the transport's submit (serialization, task dispatch)
    wait_seconds: float = 0.0  # blocked on the passive parties (their compute + transfer)


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
        """Train for ``epochs`` over the shared schedule, then evaluate on the test rows.

        Round t: the passive parties apply gradient t-1 and send H(t) in one call; the
        active party computes the loss and dL/dH(t), sends them with the request for
        H(t+1), and updates its own models while the passive parties work. Each party's
        arithmetic is exactly FedSGD's (FedBCD's with Q local steps); only the waiting
        overlaps.
        """
        start = time.perf_counter()
        refs = [ref for epoch in range(epochs) for ref in active.schedule.refs(epoch)]
        pending = self.send(transport, [None] * transport.n_peers, refs[0])
        for i, ref in enumerate(refs):
            active.forward(ref)
            grads = active.passive_gradients(ref, transport.gather(pending))
            pending = self.send(transport, grads, refs[i + 1] if i + 1 < len(refs) else None)
            active.update()
        transport.gather(pending)  # the last gradients: every party ends on the same version
        seconds = time.perf_counter() - start
        mp = self.evaluate(active, transport)
        return TrainResult(
            mp=mp,
            rounds=transport.stats.rounds,
            comm_bytes=transport.stats.comm_bytes,
            train_seconds=seconds,
            final_loss=active.last_loss,
            submit_seconds=transport.stats.submit_seconds,
            wait_seconds=transport.stats.wait_seconds,
        )

    def send(
        self, transport: Transport, grads: Sequence[Message | None], nxt: BatchRef | None
    ) -> Pending:
        """Gradients of the last round down, the request for the next round's H up."""
        return transport.submit(
            "step", [(g, nxt) for g in grads], training=True, new_round=nxt is not None
        )

    def evaluate(self, active: ActiveParty, transport: Transport) -> float:
        test = transport.call("embed", [("test",)] * transport.n_peers, training=False)
        return active.evaluate(test)
