"""FedHSSL pretraining (Algorithm 1), driven from the trial's process over a ``Wire``.

Per global iteration: (1) cross-party SSL, one epoch over the aligned rows: every party
sends its target representation z~ of the batch (active -> each passive, passive ->
active) and updates its cross-party tower on what it received; (2) guided local SSL, one
epoch over each party's own rows, no communication; (3) partial model aggregation: a
``Server`` (not a party) averages the parties' local top encoder + predictor and sends
the average back. Variants switch steps off (``Stages``).
Why a ``Wire`` that logs: every message between parties or to the server passes through
it, so rounds and bytes are counted once and tests can read what crossed a boundary.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainables.messages import BatchSchedule, Message
from trainables.ssl.hssl.parties import SERVER


@dataclass(frozen=True)
class Stages:
    """Which steps of Algorithm 1 a variant runs."""

    cross: bool  # step 1
    local: bool  # step 2 (guided when cross is on: gamma > 0)
    pma: bool  # step 3


class Wire:
    """Calls party methods in-process (``remote=False``) or on their actors; logs messages."""

    def __init__(self, parties: Sequence[Any], remote: bool) -> None:
        self.parties = list(parties)
        self.remote = remote
        self.log: list[tuple[str, Message]] = []  # (phase, message) that crossed a boundary
        self.rounds = 0
        self.comm_bytes = 0

    @property
    def n(self) -> int:
        return len(self.parties)

    def call(self, k: int, method: str, *args: Any) -> Any:
        return self.call_many([(k, method, args)])[0]

    def call_many(self, calls: Sequence[tuple[int, str, tuple[Any, ...]]]) -> list[Any]:
        """Several calls at once (in parallel on actors), results in call order."""
        if not self.remote:
            return [getattr(self.parties[k], m)(*a) for k, m, a in calls]
        import ray

        return ray.get([self.parties[k].call.remote(m, *a) for k, m, a in calls])

    def call_all(self, method: str, *args: Any) -> list[Any]:
        return self.call_many([(k, method, args) for k in range(self.n)])

    def carried(self, phase: str, msgs: Sequence[Message]) -> None:
        for msg in msgs:
            self.log.append((phase, msg))
            self.comm_bytes += int(msg.nbytes)


@dataclass
class PretrainResult:
    seconds: float = 0.0
    cross_loss: list[float] = field(default_factory=list)
    local_loss: list[float] = field(default_factory=list)


def cross_party_epoch(wire: Wire, epoch: int, n_aligned: int, batch: int, seed: int) -> float:
    """Step 1: one epoch of Eq. (5) over the aligned rows; representations only."""
    active = wire.n - 1
    losses = []
    for ref in BatchSchedule(n_aligned, batch, seed).refs(epoch):
        sent: list[list[Message]] = wire.call_all("cross_send", ref)
        flat = [m for out in sent for m in out]
        wire.carried("pretrain", flat)
        wire.rounds += 1
        inbox = {k: [m for m in flat if m.dst == k] for k in range(wire.n)}
        out = wire.call_many([(k, "cross_update", (ref, inbox[k])) for k in range(wire.n)])
        losses.append(float(np.mean(out)))
        assert len(inbox[active]) == active  # the active party heard from every passive
    return float(np.mean(losses))


class Server:
    """The aggregation server of step 3: averages what the parties share (FedAvg, equal
    weights as in Algorithm 1) and sends it back; it holds no data and no bottom model."""

    def aggregate(self, wire: Wire) -> None:
        shares: list[Message] = wire.call_all("shared_state")
        wire.carried("pma", shares)
        keys = shares[0].payload.keys()
        avg = {k: np.mean([s.payload[k] for s in shares], axis=0) for k in keys}
        nbytes = int(sum(a.nbytes for a in avg.values()))
        back = [Message("model_avg", SERVER, k, avg, nbytes) for k in range(wire.n)]
        wire.carried("pma", back)
        wire.call_many([(k, "load_shared", (back[k],)) for k in range(wire.n)])
        wire.rounds += 1


def pretrain(
    wire: Wire, stages: Stages, epochs: int, n_aligned: int, batch: int, gamma: float, seed: int
) -> PretrainResult:
    """Run ``epochs`` global iterations of the enabled steps."""
    start = time.perf_counter()
    result = PretrainResult()
    server = Server()
    for epoch in range(epochs):
        if stages.cross:
            result.cross_loss.append(cross_party_epoch(wire, epoch, n_aligned, batch, seed))
        if stages.local:
            g = gamma if stages.cross else 0.0
            result.local_loss.append(float(np.mean(wire.call_all("local_epoch", epoch, g))))
        if stages.pma:
            server.aggregate(wire)
    result.seconds = time.perf_counter() - start
    return result
