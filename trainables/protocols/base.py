"""An NN protocol (``Protocol``: what a spec's ``protocol:`` names) and the rounds a kind
runs at its active party over a transport (``PartyRounds``: FedCVT's, Paillier LR's).

A ``Protocol`` owns its round (Flower's ``Strategy``): ``exchange`` is one round over the
K-stacked parties, written as calls of the active ``StackedParty`` (``vfl/stacked_party.py``) and
of the passive stacks (``StackedPassives``, ``vfl/stacked_rounds.py``). The base exchange is
FedSGD's; FedBCD changes its ``local_steps``; CELU-VFL and the codecs add message hooks
every party stacks (``codec_hooks``: trial.py appends them after every other hook, so
codecs encode last on send and decode first on receive). A protocol with another
exchange order overrides ``exchange``: one file and a registry entry. ``StackedRounds`` runs the
rounds around it (the clock, the epoch-end evaluations, each training's counts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, TypeVar

from trainables.errors import refuse_unknown
from trainables.registry import ClassRegistry
from trainables.rounds import Rounds, TrainResult, curve_split
from trainables.transport.base import Pending, Transport

if TYPE_CHECKING:
    from trainables.messages import BatchRef
    from trainables.vfl.stacked_party import StackedParty
    from trainables.vfl.stacked_rounds import StackedPassives

HookEntry = tuple[str, str, dict[str, object]]  # (family, name, params), as in PartyInit.hooks
Value = int | float | str  # a parameter's value: a number or a string (``spec.Scalar``)

A = TypeVar("A")  # the active party a kind's rounds drive

__all__ = ["PROTOCOLS", "HookEntry", "PartyRounds", "Protocol", "TrainResult", "Value"]


class Parameters:
    """Declared ``defaults``, the given parameters checked against them (``validate``)."""

    name: ClassVar[str] = "base"
    defaults: ClassVar[dict[str, Value]] = {}

    def __init__(self, **params: Value) -> None:
        refuse_unknown(f"protocol {self.name!r}", params, list(self.defaults))
        self.params: dict[str, Value] = {**self.defaults, **params}
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError for bad parameter values."""

    @property
    def local_steps(self) -> int:
        """Local updates per exchange on the exchanged batch (Q of FedBCD); FedSGD does one."""
        return 1


class Protocol(Parameters):
    """An NN protocol: its parameters, its message hooks, and its round (``exchange``)."""

    # whether its rounds replay cached NN exchanges through the active party's top model
    # (CELU-VFL's workset): kinds without that top model (FedCVT) cannot run it
    replays: ClassVar[bool] = False

    def codec_hooks(self) -> tuple[HookEntry, ...]:
        """Hook entries every party stacks last (family ``codec``); none for plain exchange."""
        return ()

    def exchange(
        self, active: StackedParty, passives: StackedPassives, ref: BatchRef, nxt: BatchRef | None
    ) -> None:
        """Round t on batch ``ref`` for the K stacked trainings (FedSGD; FedBCD with Q =
        ``local_steps``). The passive stacks applied round t-1's gradient and computed
        H(t) when the last round sent it; each party's arithmetic is a lone training's,
        only the waiting overlaps."""
        passives.request(ref)  # H(t) (K, B, C) from each passive stack (first round only)
        active.forward(ref)  # own H(t) (K, B, C), while the passive stacks compute theirs
        h = passives.embeddings()  # P x (K, B, C)
        grads = active.passive_gradients(ref, h)  # P x (K, B, C): dL/dH_k per training
        passives.send(grads, nxt, self.local_steps)  # applied there; H(t+1) requested
        active.update(self.local_steps)  # own bottom and top, while the passives step


PROTOCOLS: ClassRegistry[Protocol] = ClassRegistry("protocol")


class PartyRounds(Parameters, Rounds[A, Transport]):
    """The rounds of a kind that runs its own exchange at its active party ``A`` over a
    ``Transport`` (FedCVT's ``CvtRounds``, ``PaillierLR``): the pending exchange at the
    end, the epoch-end evaluations and the result; a subclass writes ``exchange`` and
    ``evaluate``."""

    # FedCVT counts its final test exchange in ``comm_bytes`` (its papers' trials always did)
    test_bytes_in_comm: ClassVar[bool] = False

    def setup(self, active: A, transport: Transport) -> None:
        self.pending: Pending | None = None

    def finish(self, active: A, transport: Transport) -> None:
        if self.pending is not None:  # the last gradients: every party on the same version
            transport.gather(self.pending)

    def evaluate(self, active: A, transport: Transport, split: str = "test") -> float:
        """MP on the ``split`` rows: ``test``, or ``val`` (the validation rows)."""
        raise NotImplementedError

    def observe(self, active: A, transport: Transport, done: int) -> None:
        """An epoch end's curve point: MP on the validation rows where the trial has them
        (what a target or a scheduler may read), else on the test rows."""
        self.point(self.evaluate(active, transport, curve_split(active)), done)

    def result(self, active: A, transport: Transport, seconds: float, total: int) -> TrainResult:
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
            final_loss=float(getattr(active, "last_loss", float("nan"))),
            rounds_to_target=self.reached,
            mp_by_epoch=tuple(self.curve),
        )
