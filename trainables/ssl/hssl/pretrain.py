"""FedHSSL pretraining (Algorithm 1) as a phased protocol over ``Transport``s.

Per global iteration: (1) cross-party SSL, one epoch over the aligned rows: every party
sends its target representation z~ of the batch (the active party to each passive one,
each passive to the active one) and updates its cross-party tower on what it received;
(2) guided local SSL, one epoch over each party's own rows, no communication; (3) partial
model aggregation: the server (an ``AggregationServer`` in its own group: its own actor
under ray) averages the parties' local top encoder + projector + predictor and each party
loads the average. Variants switch steps off (``Stages``).

Counting: the trial's process drives the phases and relays what one side sends to the
other. Every message is counted once, at the transport that carries it out of its
sender: representations and model shares leave their party through ``transport``
(``bytes_up``), the average reaches each party through it (``bytes_down``); the relay
legs (``call_many``, to the receiving party or the server) carry nothing new and are not
counted again. A batch of step 1 and each aggregation are one round each.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from trainables.messages import BatchSchedule, Message
from trainables.protocols.base import TrainResult
from trainables.transport.base import CommStats, Transport
from trainables.transport.group import PartyGroup


@dataclass(frozen=True)
class Stages:
    """Which steps of Algorithm 1 a variant runs."""

    cross: bool  # step 1
    local: bool  # step 2 (guided when cross is on: gamma > 0)
    pma: bool  # step 3


def senders(n: int) -> list[tuple[int, int]]:
    """(sender, receiver) of every step-1 message, in transport order: each passive party
    to the active one, then the active one to each passive party."""
    active = n - 1
    return [(k, active) for k in range(active)] + [(active, k) for k in range(active)]


def cross_party_epoch(
    group: PartyGroup, wire: Transport, epoch: int, n_aligned: int, batch: int, seed: int
) -> float:
    """Step 1: one epoch of Eq. (5) over the aligned rows; representations only.

    ``wire`` reaches the senders of ``senders(n)`` (the active party once per passive one).
    """
    pairs = senders(group.n)
    losses = []
    for ref in BatchSchedule(n_aligned, batch, seed).refs(epoch):
        sent: list[Message] = wire.gather(
            wire.submit("cross_send", [(ref, dst) for _, dst in pairs], training=True,
                        new_round=True)
        )  # fmt: skip
        inbox = {k: [m for m in sent if m.dst == k] for k in range(group.n)}
        assert len(inbox[group.n - 1]) == group.n - 1  # the active party heard every passive
        out = group.call_many([(k, "cross_update", (ref, *inbox[k])) for k in range(group.n)])
        losses.append(float(np.mean(out)))
    return float(np.mean(losses))


def aggregate(group: PartyGroup, server: PartyGroup, wire: Transport) -> None:
    """Step 3: shares up to the server (counted as they leave the parties), the average
    back down to every party (counted as it reaches them). ``wire`` reaches parties 0..K-1."""
    shares = wire.gather(wire.submit("shared_state", [()] * group.n, training=True,
                                     new_round=True))  # fmt: skip
    back: list[Message] = server.call(0, "aggregate", *shares)
    wire.gather(wire.submit("load_shared", [(m,) for m in back], training=True, new_round=False))


def pretrain(
    group: PartyGroup,
    server: PartyGroup | None,
    stages: Stages,
    epochs: int,
    n_aligned: int,
    batch: int,
    gamma: float,
    seed: int,
) -> TrainResult:
    """Run ``epochs`` global iterations of the enabled steps; ``server`` only with PMA.
    No test MP (NaN); ``outputs``: the ``cross_loss`` and ``local_loss`` per epoch."""
    start = time.perf_counter()
    cross_loss: list[float] = []
    local_loss: list[float] = []
    cross_wire = group.transport([s for s, _ in senders(group.n)])
    pma_wire = group.transport(list(range(group.n)))
    for epoch in range(epochs):
        if stages.cross:
            loss = cross_party_epoch(group, cross_wire, epoch, n_aligned, batch, seed)
            cross_loss.append(loss)
        if stages.local:
            g = gamma if stages.cross else 0.0
            local_loss.append(float(np.mean(group.call_all("local_epoch", epoch, g))))
        if stages.pma:
            assert server is not None, "partial model aggregation needs the server"
            aggregate(group, server, pma_wire)
    rounds, comm_bytes = total([cross_wire.stats, pma_wire.stats])
    return TrainResult(
        rounds=rounds,
        comm_bytes=comm_bytes,
        train_seconds=time.perf_counter() - start,
        outputs={"cross_loss": cross_loss, "local_loss": local_loss},
    )


def total(stats: list[CommStats]) -> tuple[int, int]:
    """(rounds, bytes) over several transports."""
    return sum(s.rounds for s in stats), sum(s.comm_bytes for s in stats)
