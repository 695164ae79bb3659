"""The protocol owns the rounds (Flower's ``Strategy`` idea); subclasses fill small hooks.

A protocol runs where the active party lives: in this process for the ``local``
transport, inside the active party's actor for ``ray``. It talks to the passive parties
only through a ``Transport``. A protocol may also ask every party to stack message
hooks (``codec_hooks``: compression codecs, CELU-VFL's workset); trial.py appends them
after every other hook, so codecs encode last on send and decode first on receive.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from trainables.errors import refuse_unknown
from trainables.messages import BatchRef, Message
from trainables.party import ActiveParty
from trainables.registry import Registry
from trainables.transport.base import CommStats, Pending, Transport

PROTOCOLS: Registry = Registry("protocol")

HookEntry = tuple[str, str, dict[str, Any]]  # (family, name, params), as in PartyInit.hooks


@dataclass(frozen=True)
class TrainResult:
    """What a training returns, whatever its kind: one type, so one record builder reads it.

    ``extra``: what the kind adds to its record's ``extra`` (plain JSON data);
    ``outputs``: what its record builder reads besides, by name (Paillier LR's
    ``test_logits``, a tree's passive ``view`` and ``view_labels``, FedSSL's
    ``acc_by_round`` / ``privacy`` / ``access``, FedHSSL's ``cross_loss`` / ``local_loss``).
    A stage with no test MP of its own (pretraining) leaves ``mp`` NaN."""

    mp: float = float("nan")
    rounds: int = 0
    comm_bytes: int = 0
    train_seconds: float = 0.0
    final_loss: float = float("nan")
    submit_seconds: float = 0.0  # in the transport's submit (serialization, task dispatch)
    wait_seconds: float = 0.0  # blocked on the passive parties (their compute + transfer)
    bytes_up: int = 0  # passive -> active (embeddings), as sent
    bytes_down: int = 0  # active -> passive (gradients), as sent
    eval_bytes: int = 0  # evaluation traffic; never part of comm_bytes
    rounds_to_target: int | None = None  # first epoch-end round count with MP >= target
    mp_by_epoch: tuple[float, ...] = ()  # test MP after each epoch (only with a target)
    extra: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_stats(
        cls, stats: CommStats, *, comm_bytes: int | None = None, **measured: Any
    ) -> TrainResult:
        """A result whose rounds, bytes and transport timings are ``stats``' (every
        protocol counts at its transport); ``comm_bytes`` overrides the training bytes."""
        return cls(
            rounds=stats.rounds,
            comm_bytes=stats.comm_bytes if comm_bytes is None else comm_bytes,
            submit_seconds=stats.submit_seconds,
            wait_seconds=stats.wait_seconds,
            bytes_up=stats.bytes_up,
            bytes_down=stats.bytes_down,
            eval_bytes=stats.eval_bytes,
            **measured,
        )


class Protocol:
    """Base: FedSGD-style rounds over the batch schedule; one exchange per round.

    Subclasses declare ``defaults`` (their parameters) and may override ``local_steps``,
    ``codec_hooks`` or ``update``.
    """

    name: ClassVar[str] = "base"
    defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, **params: Any) -> None:
        refuse_unknown(f"protocol {self.name!r}", params, list(self.defaults))
        self.params = {**self.defaults, **params}
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError for bad parameter values."""

    @property
    def local_steps(self) -> int:
        """Local updates per exchange on the exchanged batch (Q of FedBCD); FedSGD does one."""
        return 1

    def codec_hooks(self) -> tuple[HookEntry, ...]:
        """Hook entries every party stacks last (family ``codec``); none for plain exchange."""
        return ()

    def update(self, active: ActiveParty, ref: BatchRef) -> None:
        """The active party's own training after round ``ref``'s gradients have left."""
        active.update()

    # FedCVT counts its final test exchange in ``comm_bytes`` (its papers' trials always did)
    test_bytes_in_comm: ClassVar[bool] = False

    def run(
        self,
        active: ActiveParty,
        transport: Transport,
        epochs: int,
        target_mp: float | None = None,
    ) -> TrainResult:
        """Train for ``epochs`` (``rounds``), then evaluate on the test rows: the one round
        loop's bookkeeping, for every protocol.

        With ``target_mp``, test MP is also measured after every epoch (VFLAIR's #Rounds):
        the first epoch whose MP reaches the target gives ``rounds_to_target`` = rounds
        completed by then. ``rounds`` pauses at each such epoch end with every party on the
        same version of its model. Evaluation traffic is counted apart (``eval_bytes``) and
        draws no random numbers, so training is unchanged by it; its time is left out of
        ``train_seconds``.
        """
        self.setup(active, transport)
        start = time.perf_counter()
        curve: list[float] = []
        reached: int | None = None
        eval_seconds = 0.0
        exchange = self.rounds(active, transport, epochs, target_mp is not None)
        while True:
            try:
                done = next(exchange)  # an epoch ended (not the last), ``done`` rounds in
            except StopIteration as end:
                total: int = end.value
                break
            eval_start = time.perf_counter()
            curve.append(self.evaluate(active, transport))
            if reached is None and target_mp is not None and curve[-1] >= target_mp:
                reached = done
            eval_seconds += time.perf_counter() - eval_start
        seconds = time.perf_counter() - start - eval_seconds
        return self.result(active, transport, seconds, total, curve, reached, target_mp)

    def setup(self, active: ActiveParty, transport: Transport) -> None:
        """Before the clock starts: what the protocol needs once (Paillier LR's key)."""

    def result(
        self,
        active: ActiveParty,
        transport: Transport,
        seconds: float,
        total: int,
        curve: list[float],
        reached: int | None,
        target_mp: float | None,
    ) -> TrainResult:
        """The test MP and the counters after ``total`` rounds (``curve``, ``reached``:
        the per-epoch MPs and the rounds to the target so far)."""
        before = transport.stats.eval_bytes
        mp = self.evaluate(active, transport)
        test_bytes = transport.stats.eval_bytes - before if self.test_bytes_in_comm else 0
        if target_mp is not None:
            curve.append(mp)
            if reached is None and mp >= target_mp:
                reached = total
        return TrainResult.from_stats(
            transport.stats,
            comm_bytes=transport.stats.comm_bytes + test_bytes,
            mp=mp,
            train_seconds=seconds,
            final_loss=float(active.last_loss),
            rounds_to_target=reached,
            mp_by_epoch=tuple(curve),
        )

    def rounds(
        self, active: ActiveParty, transport: Transport, epochs: int, evaluating: bool
    ) -> Generator[int, None, int]:
        """The exchange: every round of ``epochs`` over the shared schedule. Yields the
        rounds done at each epoch end but the last when ``evaluating``; returns the total.

        Round t: the passive parties apply gradient t-1 and send H(t) in one call; the
        active party computes the loss and dL/dH(t), sends them with the request for
        H(t+1), and updates its own models while the passive parties work. Each party's
        arithmetic is exactly FedSGD's (FedBCD's with Q local steps); only the waiting
        overlaps. At a paused epoch end every party has applied the epoch's last gradient
        (the passive step that did so was submitted before the evaluation call, and a
        party runs its calls in order).
        """
        per_epoch = [active.schedule.refs(epoch) for epoch in range(epochs)]
        refs = [ref for epoch_refs in per_epoch for ref in epoch_refs]
        epoch_ends = {sum(len(r) for r in per_epoch[: e + 1]) - 1 for e in range(epochs - 1)}
        pending = self.send(transport, [None] * transport.n_peers, refs[0])
        for i, ref in enumerate(refs):
            active.forward(ref)
            grads = active.passive_gradients(ref, transport.gather(pending))
            pending = self.send(transport, grads, refs[i + 1] if i + 1 < len(refs) else None)
            self.update(active, ref)
            if evaluating and i in epoch_ends:
                yield i + 1
        transport.gather(pending)  # the last gradients: every party ends on the same version
        return len(refs)

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
