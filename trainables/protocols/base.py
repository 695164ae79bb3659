"""The NN protocols' base: the ``Rounds`` (``trainables/rounds.py``) of NN VFL.

``Rounds.run`` owns the rounds of every kind's training; a kind fills small hooks. A
``Protocol`` is the ``Rounds`` of NN VFL. It runs where the active party lives: in this
process for the ``local`` transport, inside the active party's actor for ``ray``. It talks
to the passive parties only through a ``Transport``. A protocol may also ask every party
to stack message hooks (``codec_hooks``: compression codecs, CELU-VFL's workset);
trial.py appends them after every other hook, so codecs encode last on send and decode
first on receive.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from trainables.errors import refuse_unknown
from trainables.messages import BatchRef, Message
from trainables.registry import Registry
from trainables.roles import NNActive
from trainables.rounds import Rounds, TrainResult
from trainables.transport.base import Pending, Transport

PROTOCOLS: Registry = Registry("protocol")

HookEntry = tuple[str, str, dict[str, Any]]  # (family, name, params), as in PartyInit.hooks

__all__ = ["PROTOCOLS", "HookEntry", "Protocol", "Rounds", "TrainResult"]


class Protocol(Rounds[NNActive, Transport]):
    """Base NN protocol: FedSGD-style rounds over the batch schedule; one exchange per round.

    Subclasses declare ``defaults`` (their parameters) and may override ``local_steps``,
    ``codec_hooks`` or ``update``.
    """

    name: ClassVar[str] = "base"
    defaults: ClassVar[dict[str, Any]] = {}
    # declared by an NN protocol that keeps this base's rounds, changing only
    # ``local_steps`` and message codecs: what the stacked parties run (``vfl/vec_run.py``);
    # the NN kind refuses one that does not
    stacks: ClassVar[bool] = False

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

    def update(self, active: NNActive, ref: BatchRef) -> None:
        """The active party's own training after round ``ref``'s gradients have left."""
        active.update()

    # FedCVT counts its final test exchange in ``comm_bytes`` (its papers' trials always did)
    test_bytes_in_comm: ClassVar[bool] = False

    def setup(self, active: NNActive, transport: Transport) -> None:
        self.pending: Pending | None = None

    def epoch_steps(self, active: NNActive, epoch: int) -> Sequence[BatchRef]:
        return active.schedule.refs(epoch)

    def exchange(
        self, active: NNActive, transport: Transport, ref: BatchRef, nxt: BatchRef | None
    ) -> None:
        """Round t: the passive parties apply gradient t-1 and send H(t) in one call; the
        active party computes the loss and dL/dH(t), sends them with the request for
        H(t+1), and updates its own models while the passive parties work. Each party's
        arithmetic is exactly FedSGD's (FedBCD's with Q local steps); only the waiting
        overlaps. At a paused epoch end every party has applied the epoch's last gradient
        (the passive step that did so was submitted before the evaluation call, and a
        party runs its calls in order)."""
        if self.pending is None:  # the first round: the request for H(0)
            self.pending = self.send(transport, [None] * transport.n_peers, ref)
        active.forward(ref)
        grads = active.passive_gradients(ref, self.receive(transport, self.pending))
        self.pending = self.send(transport, grads, nxt)
        self.update(active, ref)

    def finish(self, active: NNActive, transport: Transport) -> None:
        if self.pending is not None:  # the last gradients: every party on the same version
            transport.gather(self.pending)

    def send(
        self, transport: Transport, grads: Sequence[Message | None], nxt: BatchRef | None
    ) -> Pending:
        """Gradients of the last round down, the request for the next round's H up."""
        return transport.submit(
            "step", [(g, nxt) for g in grads], training=True, new_round=nxt is not None
        )

    def receive(self, transport: Transport, pending: Pending) -> list[Any]:
        """The passive parties' answers to the last ``send``: this round's H."""
        return transport.gather(pending)

    def evaluate(self, active: NNActive, transport: Transport, split: str = "test") -> float:
        """MP on the ``split`` rows: ``test``, or ``val`` (the validation rows)."""
        rows = transport.call("embed", [(split,)] * transport.n_peers, training=False)
        return active.evaluate(rows, split)

    def observe(self, active: NNActive, transport: Transport, done: int) -> None:
        """An epoch end's curve point: MP on the validation rows where the trial has them
        (what a target or a scheduler may read), else on the test rows."""
        self.point(self.evaluate(active, transport, curve_split(active)), done)

    def result(
        self, active: NNActive, transport: Transport, seconds: float, total: int
    ) -> TrainResult:
        """The test MP (and the validation rows' MP where the trial has them) and the
        counters after ``total`` rounds."""
        before = transport.stats.eval_bytes
        mp = self.evaluate(active, transport)
        test_bytes = transport.stats.eval_bytes - before if self.test_bytes_in_comm else 0
        val_mp = self.evaluate(active, transport, "val") if curve_split(active) == "val" else None
        if self.target_mp is not None:
            self.point(mp if val_mp is None else val_mp, total, last=True)
        return TrainResult.from_stats(
            transport.stats,
            comm_bytes=transport.stats.comm_bytes + test_bytes,
            mp=mp,
            val_mp=val_mp,
            train_seconds=seconds,
            final_loss=float(active.last_loss),
            rounds_to_target=self.reached,
            mp_by_epoch=tuple(self.curve),
        )


def curve_split(active: Any) -> str:
    """Which rows an epoch end scores: ``val`` where the trial has validation rows (an
    active ``VecStack`` or a FedCVT active party with ``y_val``), else ``test``."""
    return "test" if getattr(active, "y_val", None) is None else "val"
