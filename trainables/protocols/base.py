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

from typing import Any, ClassVar, TypeVar

from trainables.errors import refuse_unknown
from trainables.registry import ClassRegistry
from trainables.rounds import Rounds, TrainResult
from trainables.transport.base import Pending, Transport

PROTOCOLS: ClassRegistry[Protocol[Any]] = ClassRegistry("protocol")

HookEntry = tuple[str, str, dict[str, Any]]  # (family, name, params), as in PartyInit.hooks

A = TypeVar("A")  # the active side a protocol's rounds drive

__all__ = ["PROTOCOLS", "HookEntry", "Protocol", "Rounds", "TrainResult"]


class Protocol(Rounds[A, Transport]):
    """Base NN protocol, generic in the active side its rounds drive (``A``).

    A registered NN protocol (FedSGD, FedBCD, CELU-VFL, the compressed ones) is
    ``Protocol[NNActive]``: a declaration of what changes from the base round (its
    ``local_steps``, its ``codec_hooks``), run by the stacked parties' rounds
    (``vfl/vec_run.py``, ``stacks = True``). FedCVT's and Paillier LR's rounds are
    ``Protocol[CvtActive]`` / ``Protocol[ActiveLR]``: their own ``exchange`` on this base's
    pending exchange, evaluation and result. Subclasses declare ``defaults`` (their
    parameters).
    """

    name: ClassVar[str] = "base"
    defaults: ClassVar[dict[str, Any]] = {}
    # declared by an NN protocol that keeps the base round, changing only ``local_steps``
    # and message codecs: what the stacked parties run (``vfl/vec_run.py``); the NN kind
    # refuses one that does not
    stacks: ClassVar[bool] = False
    # whether its rounds replay cached NN exchanges through the active party's top model
    # (CELU-VFL's workset): kinds without that top model (FedCVT) cannot run it
    replays: ClassVar[bool] = False

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


def curve_split(active: Any) -> str:
    """Which rows an epoch end scores: ``val`` where the trial has validation rows (an
    active ``VecStack`` or a FedCVT active party with ``y_val``), else ``test``."""
    return "test" if getattr(active, "y_val", None) is None else "val"
