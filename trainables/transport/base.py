"""The transport interface and its counters (shared by every transport)."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainables.messages import Message

# A party's method as a call names it: the function itself (``StackedParty.embed``), so the
# call site reaches its definition; the hosted party's own method of that name runs
# (overrides included).
Method = Callable[..., Any]


def method_name(method: Method) -> str:
    """The name a call sends across a transport (an actor runs ``getattr(party, name)``)."""
    return method.__name__


@dataclass
class Pending:
    """Calls in flight, one per passive party."""

    handles: list[object]
    training: bool


@dataclass
class CommStats:
    rounds: int = 0
    bytes_up: int = 0  # passive -> active
    bytes_down: int = 0  # active -> passive
    eval_bytes: int = 0  # evaluation traffic, kept apart from training cost
    submit_seconds: float = 0.0  # time spent handing calls to the transport
    wait_seconds: float = 0.0  # time blocked waiting for the passive parties' answers

    @property
    def comm_bytes(self) -> int:
        return self.bytes_up + self.bytes_down


def _message_bytes(values: Sequence[object]) -> int:
    return sum(v.nbytes for v in values if isinstance(v, Message))


class Transport(ABC):
    """Calls methods of the passive parties (``peers``: the party objects, or their actor
    handles) and counts what crosses the boundary."""

    def __init__(self, peers: Sequence[Any]) -> None:
        self.peers = list(peers)
        self.stats = CommStats()

    @property
    def n_peers(self) -> int:
        return len(self.peers)

    def subset(self, start: int, stop: int | None = None) -> Transport:
        """A transport of the same kind to ``peers[start:stop]`` that counts into this
        one's ``stats`` (Paillier LR talks to the passive parties and to the key holder
        apart, and its record counts both)."""
        out = type(self)(self.peers[start:stop])
        out.stats = self.stats
        return out

    @abstractmethod
    def _submit(self, method: str, args: Sequence[tuple[Any, ...]]) -> list[object]: ...

    @abstractmethod
    def _gather(self, handles: list[object]) -> list[Any]: ...

    def submit(
        self, method: Method, args: Sequence[tuple[Any, ...]], *, training: bool, new_round: bool
    ) -> Pending:
        """Start ``party.method(*args[k])`` on every passive party k; returns at once."""
        if len(args) != self.n_peers:
            raise ValueError(f"{len(args)} argument tuples for {self.n_peers} passive parties")
        sent = sum(_message_bytes(a) for a in args)
        if training:
            self.stats.bytes_down += sent
            self.stats.rounds += int(new_round)
        else:
            self.stats.eval_bytes += sent
        start = time.perf_counter()
        handles = self._submit(method_name(method), args)
        self.stats.submit_seconds += time.perf_counter() - start
        return Pending(handles, training)

    def gather(self, pending: Pending) -> list[Any]:
        """Wait for the calls and return their results in party order."""
        start = time.perf_counter()
        results = self._gather(pending.handles)
        self.stats.wait_seconds += time.perf_counter() - start
        received = _message_bytes(results)
        if pending.training:
            self.stats.bytes_up += received
        else:
            self.stats.eval_bytes += received
        return results

    def call(self, method: Method, args: Sequence[tuple[Any, ...]], *, training: bool) -> list[Any]:
        return self.gather(self.submit(method, args, training=training, new_round=False))
