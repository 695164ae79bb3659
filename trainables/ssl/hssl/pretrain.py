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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainables.messages import BatchRef, BatchSchedule, Message
from trainables.rounds import Rounds, TrainResult
from trainables.ssl.hssl.parties import AggregationServer, SSLParty
from trainables.transport.base import Transport
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


class Pretraining(Rounds[PartyGroup, None]):
    """``epochs`` global iterations of the enabled steps on ``Rounds.run``'s loop, driven
    from the trial's process; ``server`` only with PMA. An epoch's steps: every batch of
    step 1 (one round each), then step 2, then step 3 (one round). Run without a target:
    no test MP (NaN), no epoch-end evaluation; ``outputs``: the ``cross_loss`` and
    ``local_loss`` per epoch."""

    def __init__(self, server: PartyGroup | None, stages: Stages, n_aligned: int, batch: int,
                 gamma: float, seed: int) -> None:  # fmt: skip
        assert server is not None or not stages.pma, "partial model aggregation needs the server"
        self.server, self.stages = server, stages
        self.n_aligned, self.batch, self.gamma, self.seed = n_aligned, batch, gamma, seed

    def setup(self, group: PartyGroup, transport: None) -> None:
        self.pairs = senders(group.n)
        # the cross wire reaches every sender (the active party once per passive one)
        self.cross_wire = group.transport([s for s, _ in self.pairs])
        self.pma_wire = group.transport(list(range(group.n)))
        self.schedule = BatchSchedule(self.n_aligned, self.batch, self.seed)  # step 1's
        self.batch_loss: dict[int, list[float]] = {}  # epoch -> step 1's loss per batch
        self.local_loss: list[float] = []

    def epoch_steps(self, group: PartyGroup, epoch: int) -> Sequence[tuple[str, BatchRef | int]]:
        return [
            *((("cross", ref) for ref in self.schedule.refs(epoch)) if self.stages.cross else ()),
            *((("local", epoch),) if self.stages.local else ()),
            *((("pma", epoch),) if self.stages.pma else ()),
        ]

    def exchange(self, group: PartyGroup, transport: None, step: tuple[str, Any],
                 nxt: object) -> None:  # fmt: skip
        # ``step``: ("cross", its BatchRef) or ("local" | "pma", the epoch); ``arg`` untyped,
        # as unpacking does not narrow it by ``what``
        what, arg = step
        if what == "cross":
            self.batch_loss.setdefault(arg.epoch, []).append(self.cross_batch(group, arg))
        elif what == "local":  # guided when cross-party SSL is on
            g = self.gamma if self.stages.cross else 0.0
            self.local_loss.append(float(np.mean(group.call_all(SSLParty.local_epoch, arg, g))))
        else:
            assert self.server is not None
            aggregate(group, self.server, self.pma_wire)

    def cross_batch(self, group: PartyGroup, ref: BatchRef) -> float:
        """Step 1 on one batch of Eq. (5) over the aligned rows; representations only."""
        wire = self.cross_wire
        sent: list[Message] = wire.gather(
            wire.submit(SSLParty.cross_send, [(ref, dst) for _, dst in self.pairs], training=True,
                        new_round=True)
        )  # fmt: skip
        inbox = {k: [m for m in sent if m.dst == k] for k in range(group.n)}
        assert len(inbox[group.n - 1]) == group.n - 1  # the active party heard every passive
        out = group.call_many(
            [(k, SSLParty.cross_update, (ref, *inbox[k])) for k in range(group.n)]
        )
        return float(np.mean(out))

    def result(self, group: PartyGroup, transport: None, seconds: float, total: int) -> TrainResult:
        stats = [self.cross_wire.stats, self.pma_wire.stats]
        return TrainResult(
            rounds=sum(s.rounds for s in stats),
            comm_bytes=sum(s.comm_bytes for s in stats),
            train_seconds=seconds,
            outputs={
                "cross_loss": [float(np.mean(v)) for _, v in sorted(self.batch_loss.items())],
                "local_loss": self.local_loss,
            },
        )


def aggregate(group: PartyGroup, server: PartyGroup, wire: Transport) -> None:
    """Step 3: shares up to the server (counted as they leave the parties), the average
    back down to every party (counted as it reaches them). ``wire`` reaches parties 0..K-1."""
    shares = wire.gather(wire.submit(SSLParty.shared_state, [()] * group.n, training=True,
                                     new_round=True))  # fmt: skip
    back: list[Message] = server.call(0, AggregationServer.aggregate, *shares)
    wire.gather(
        wire.submit(SSLParty.load_shared, [(m,) for m in back], training=True, new_round=False)
    )


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
    """Run ``epochs`` global iterations of the enabled steps (``Pretraining``)."""
    return Pretraining(server, stages, n_aligned, batch, gamma, seed).run(group, None, epochs)
