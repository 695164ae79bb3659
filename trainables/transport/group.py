"""``PartyGroup``: the parties of one trial, wherever they run (``LocalGroup`` here; the
Ray one is ``ray_actors/parties.py``; ``open.py`` chooses between them).

A ``PartyGroup`` holds one party per init (party order; the active party last) and
offers what a trial needs of them: run a training's rounds at the active party against the
others (``train``), call methods on chosen parties (``call``, ``call_many``), a
``Transport`` from this process to chosen parties (for protocols that an orchestrator
drives, such as FedHSSL pretraining), copies of the trained parties (``snapshot``, for
the attack harness), and ``load`` to rebuild the parties in place (a new phase of the
same trial, e.g. fine-tuning after pretraining, on the same actors).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from trainables.transport.base import Method, Transport, method_name
from trainables.transport.local import LocalTransport

Call = tuple[int, Method, tuple[Any, ...]]  # (party index, method, args)


class PartyGroup(ABC):
    """The parties of one trial, wherever they run."""

    @property
    @abstractmethod
    def n(self) -> int: ...

    @abstractmethod
    def train(self, rounds: Any, epochs: int, target_mp: float | None = None) -> Any:
        """``rounds.run`` (a ``Rounds``: ``StackedRounds``, FedCVT's, Paillier LR's) at the active
        party (the last) over a transport to the others."""

    @abstractmethod
    def call_many(self, calls: Sequence[Call]) -> list[Any]:
        """Several method calls at once (in parallel on actors); results in call order."""

    @abstractmethod
    def transport(self, peers: Sequence[int]) -> Transport:
        """A transport from this process to parties ``peers`` (counted like any other)."""

    @abstractmethod
    def snapshot(self) -> list[Any]:
        """The parties themselves (local) or copies of them (actors), in party order."""

    @abstractmethod
    def load(self, inits: Sequence[Any]) -> None:
        """Rebuild every party from ``inits`` (same count), in place."""

    def call(self, k: int, method: Method, *args: Any) -> Any:
        return self.call_many([(k, method, args)])[0]

    def call_all(self, method: Method, *args: Any) -> list[Any]:
        return self.call_many([(k, method, args) for k in range(self.n)])


class LocalGroup(PartyGroup):
    """Every party an object in this process."""

    def __init__(self, inits: Sequence[Any]) -> None:
        self.parties = [init.build() for init in inits]

    @property
    def n(self) -> int:
        return len(self.parties)

    def train(self, rounds: Any, epochs: int, target_mp: float | None = None) -> Any:
        return rounds.run(self.parties[-1], LocalTransport(self.parties[:-1]), epochs, target_mp)

    def call_many(self, calls: Sequence[Call]) -> list[Any]:
        return [getattr(self.parties[k], method_name(m))(*a) for k, m, a in calls]

    def transport(self, peers: Sequence[int]) -> Transport:
        return LocalTransport([self.parties[k] for k in peers])

    def snapshot(self) -> list[Any]:
        return list(self.parties)

    def load(self, inits: Sequence[Any]) -> None:
        assert len(inits) == len(self.parties), "load keeps the number of parties"
        self.parties = [init.build() for init in inits]
