"""The one round loop every kind's training runs (``Rounds``, Flower's ``Strategy`` idea),
and what a training returns (``TrainResult``).

Why its own module: every kind drives its rounds with it (NN protocols, FedCVT, Paillier
LR, FedHSSL pretraining, FedSSL, the tree builders, the vectorized stack), and none of
them should import the NN parties to do so; this module imports no party.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from trainables.transport.base import CommStats

A = TypeVar("A")  # what a round loop drives from
T = TypeVar("T")  # how it reaches the other parties


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
    mp_by_epoch: tuple[float, ...] = ()  # MP after each epoch (only with a target): on the
    # validation rows where the trial has them, else on the test rows
    val_mp: float | None = None  # MP on the validation rows at the end (``val_ratio``)
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


class EpochListener(Protocol):
    """Told of each observed epoch end of one training (a Tune scheduler or an Optuna
    pruner deciding whether it goes on): ``epoch`` epochs done, ``mp`` on the validation
    rows where the training has them, ``rounds`` done. It may block (until the decision
    is taken); to stop the training it raises, and the training unwinds as after an
    error (``sweep_engine/early_stop.py``'s ``TrainingStopped``)."""

    def epoch_end(self, epoch: int, mp: float, rounds: int) -> None: ...


class Rounds(Generic[A, T]):
    """The one round loop (Flower's ``Strategy`` idea): ``run`` owns the rounds, the clock,
    the epoch-end evaluations and the curve; a kind fills small hooks.

    ``A``: what the loop drives from (the active party, a ``PartyGroup`` from the trial's
    process, a tree session, a stack); ``T``: how it reaches the others (a ``Transport``,
    or None where the hooks open their own wires on a group). Every kind's training is a
    ``Rounds``: the NN protocols' stacked rounds (``vfl/stacked_rounds.py``), FedCVT, Paillier
    LR, FedHSSL pretraining, FedSSL's rounds, the tree builders.

    Hooks, in the order ``run`` calls them: ``setup`` (before the clock), ``epoch_steps``
    (the rounds of one epoch), ``exchange`` (one round, given the next one),
    ``pauses`` / ``pause`` / ``observe`` (at an epoch end but the last), ``finish`` (after
    the last round), ``result``. A loop object holds one training's state: one object per run.
    """

    target_mp: float | None = None
    curve: list[float]  # MP at each observed epoch end (and the end, with a target)
    reached: int | None = None  # rounds done when the curve first reached the target
    listener: EpochListener | None = None  # told of every epoch end (early stopping)

    def run(self, active: A, transport: T, epochs: int, target_mp: float | None = None) -> Any:
        """Train for ``epochs``, then ``result``: the one loop every kind's training runs.

        At each epoch end but the last, ``pauses`` says whether to ``observe`` (with
        ``target_mp``, test MP after every epoch: VFLAIR's #Rounds; the first epoch whose
        MP reaches the target gives ``rounds_to_target`` = rounds completed by then).
        Evaluation is counted apart (``eval_bytes``), draws no random numbers, so training
        is unchanged by it, and its time is left out of ``train_seconds``.
        """
        self.target_mp, self.curve, self.reached = target_mp, [], None
        self.setup(active, transport)
        start = time.perf_counter()
        per_epoch = [list(self.epoch_steps(active, epoch)) for epoch in range(epochs)]
        steps = [step for epoch_steps in per_epoch for step in epoch_steps]
        ends: set[int] = set()
        if self.pauses():
            ends = {sum(map(len, per_epoch[: e + 1])) - 1 for e in range(epochs - 1)}
        eval_seconds = 0.0
        for i, step in enumerate(steps):
            self.exchange(active, transport, step, steps[i + 1] if i + 1 < len(steps) else None)
            if i in ends:
                self.pause(active, transport)
                eval_start = time.perf_counter()
                self.observe(active, transport, i + 1)
                eval_seconds += time.perf_counter() - eval_start
        self.finish(active, transport)
        seconds = time.perf_counter() - start - eval_seconds
        return self.result(active, transport, seconds, len(steps))

    def setup(self, active: A, transport: T) -> None:
        """Before the clock starts: what the loop needs once (Paillier LR's key, wires)."""

    def epoch_steps(self, active: A, epoch: int) -> Sequence[Any]:
        """The rounds of ``epoch``, each what ``exchange`` takes (a ``BatchRef``...)."""
        raise NotImplementedError

    def exchange(self, active: A, transport: T, step: Any, nxt: Any) -> None:
        """One round; ``nxt``: the round after it (None after the last), for pipelining."""
        raise NotImplementedError

    def pauses(self) -> bool:
        """Whether epoch ends are observed (by default: with a target MP, or a listener)."""
        return self.target_mp is not None or self.listener is not None

    def pause(self, active: A, transport: T) -> None:
        """Training's part of an observed epoch end, before the evaluation (FedCVT sends A
        its pending gradients); its time is training's."""

    def observe(self, active: A, transport: T, done: int) -> None:
        """At a paused epoch end, ``done`` rounds in: the curve's point."""
        self.point(self.evaluate(active, transport), done)

    def point(self, mp: float, done: int, last: bool = False) -> None:
        """One point of the curve; the first reaching the target gives ``reached``; the
        ``listener`` hears of every point but the ``last`` (after the last round: the
        training's result says it) and may stop the training there."""
        self.curve.append(mp)
        if self.reached is None and self.target_mp is not None and mp >= self.target_mp:
            self.reached = done
        if self.listener is not None and not last:
            self.listener.epoch_end(len(self.curve), mp, done)

    def finish(self, active: A, transport: T) -> None:
        """After the last round, before the clock stops (the last pending messages)."""

    def evaluate(self, active: A, transport: T) -> float:
        raise NotImplementedError

    def result(self, active: A, transport: T, seconds: float, total: int) -> Any:
        """What the training returns after ``total`` rounds in ``seconds``."""
        raise NotImplementedError


def curve_split(active: Any) -> str:
    """Which rows an epoch end scores: ``val`` where the trial has validation rows (an
    active ``StackedParty`` or a FedCVT active party with ``y_val``), else ``test``."""
    return "test" if getattr(active, "y_val", None) is None else "val"
