"""Lockstep: the same party of K trainings in one process, one message per round for all K.

Why: on the ``ray`` transport every round costs an actor round trip per passive party
(~6 ms here), which dwarfs a tiny model's arithmetic. A pack of K trainings of one shape
can share those trips: the actor of party k hosts party k of every training (a
``PartyStack``, built from a ``StackInit``, so the ordinary ``PartyActor`` hosts it), and
one call per round advances all K.

How, without touching any protocol: the K ``Protocol.run`` loops run unchanged as threads
in the active party's process (``LockstepRun.run``), each over its own ``HubTransport``.
Only one thread runs at a time (a baton passed through one semaphore per thread), and a
thread gives the baton back only when it waits for an answer. So training i's arithmetic
is the arithmetic it does alone, in the same order, and code that seeds torch's global
RNG inside ``fork_rng`` never sees another training in between. The ``Hub`` collects the
threads' calls and sends them as one ``apply`` per passive stack once every other
thread waits, or once a group of K/``groups`` trainings has queued (the passive parties
then compute one group while the active party computes the next); each thread gets its
own slice back. Rounds and bytes are counted by each
thread's ``HubTransport`` (a ``Transport``) exactly as a one-training transport counts
them. A thread that finishes (fewer rounds, an error) simply leaves.

No Ray here: the outer transport (``RayTransport`` in an actor, ``LocalTransport`` in
tests) is whatever ``PartyGroup.train`` hands the run.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trainables.transport.base import Pending, Transport

# One call of training ``slot`` on one passive stack: (slot, method, args)
SlotCall = tuple[int, str, tuple[Any, ...]]


@dataclass(frozen=True)
class Raised:
    """An exception a hosted party raised, sent back as a value so the other trainings of
    the same ``apply`` keep their results; the training that raised re-raises it."""

    error: BaseException


@dataclass(frozen=True)
class StackInit:
    """Party k of K trainings; ``build`` gives the ``PartyStack`` an actor hosts."""

    inits: tuple[Any, ...]  # each with .build() (a PartyInit), one per training slot

    def build(self) -> PartyStack:
        return PartyStack(self.inits)


class PartyStack:
    """The same party of K trainings. A slot whose build raised holds the error instead
    (``build_errors``): the other trainings of the pack still run."""

    def __init__(self, inits: Sequence[Any]) -> None:
        self.parties: list[Any] = []
        self.applies = 0  # ``apply`` calls received: one per round for the whole pack
        self.errors: dict[int, BaseException] = {}
        for slot, init in enumerate(inits):
            try:
                self.parties.append(init.build())
            except Exception as err:  # deterministic or not, the caller decides per slot
                self.parties.append(None)
                self.errors[slot] = err
        first = next((p for p in self.parties if p is not None), None)
        self.party_id = None if first is None else first.party_id  # PartyActor.where

    def apply_count(self) -> int:
        return self.applies

    def build_errors(self) -> dict[int, BaseException]:
        return dict(self.errors)

    def apply(self, calls: Sequence[SlotCall]) -> list[Any]:
        """Each call on its slot's party, in order; an exception becomes a ``Raised``."""
        self.applies += 1
        out: list[Any] = []
        for slot, method, args in calls:
            try:
                out.append(getattr(self.parties[slot], method)(*args))
            except Exception as err:
                out.append(Raised(err))
        return out

    def defense_applied(self) -> list[Any]:
        """Each slot's ``defense_applied`` (None for a slot that was never built)."""
        return [None if p is None else p.defense_applied() for p in self.parties]

    def parties_of(self, slots: Sequence[int]) -> list[Any]:
        """The parties of ``slots`` (the attack harness reads them after training)."""
        return [self.parties[s] for s in slots]


@dataclass
class _Slot:
    """One thread's call in the hub: filled with one result per passive party."""

    results: list[Any] | None = None
    error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self.results is not None or self.error is not None


@dataclass
class _Flight:
    """One coalesced call on every passive stack, and the slots it answers, in order."""

    pending: Pending
    slots: list[_Slot]
    owners: set[int]  # the trainings with a call in it


class HubFailure(RuntimeError):
    """Raised in every training of a lockstep run after the outer transport failed."""


class Hub:
    """The baton, the threads' queued calls and the coalesced calls in flight.

    Every method runs with the baton held (by a training thread or the coordinator), so
    the state needs no lock of its own.
    """

    def __init__(self, outer: Transport, slots: Sequence[int], groups: int = 1) -> None:
        self.outer = outer
        self.groups = groups  # coalesced calls per round: more overlap, more round trips
        self.ready: list[int] = list(slots)  # may run now, in slot order
        self.blocked: dict[int, _Slot] = {}  # waiting for an answer
        self.live: set[int] = set(slots)
        self.queue: list[tuple[int, str, Sequence[tuple[Any, ...]], _Slot]] = []
        self.flights: list[_Flight] = []
        self.failure: BaseException | None = None
        # seconds charged to each training: its turns at the active party plus its share
        # of every coalesced call it had a call in (``LockstepRun``'s train_seconds)
        self.charged = dict.fromkeys(slots, 0.0)
        self._running: int | None = None
        self._turn = {s: threading.Semaphore(0) for s in slots}
        self._coordinator = threading.Semaphore(0)

    # -- called by a training thread ---------------------------------------------------
    def enqueue(self, slot: int, method: str, args: Sequence[tuple[Any, ...]]) -> _Slot:
        """Queue training ``slot``'s call; flush when no other training can add to it."""
        call = _Slot()
        if self.failure is not None:
            return call  # never answered: ``wait`` raises HubFailure
        self.queue.append((slot, method, args, call))
        self._wake()  # an answered waiter may still add to the queue
        if not self.ready or len(self.queue) * self.groups >= len(self.live):
            self._guarded(self.flush)
        return call

    def wait(self, slot: int, call: _Slot) -> list[Any]:
        """Give the baton back until ``call`` is answered; its results, one per peer."""
        while not call.done and self.failure is None:
            self.blocked[slot] = call
            self._coordinator.release()
            self._turn[slot].acquire()
        if call.error is not None:
            raise call.error
        if call.results is None:
            raise HubFailure("the lockstep transport failed") from self.failure
        return call.results

    def first_turn(self, slot: int) -> None:
        self._turn[slot].acquire()

    def leave(self, slot: int) -> None:
        """Training ``slot`` is over (finished or raised): the coordinator goes on."""
        self.live.discard(slot)
        self._coordinator.release()

    # -- called by the coordinator -----------------------------------------------------
    def schedule(self) -> None:
        """Run the trainings to the end: resume a ready one, else send or receive."""
        while self.live:
            if self.ready:
                self._resume(self.ready.pop(0))
            elif self.failure is not None:  # wake every waiter: each raises HubFailure
                self.ready = sorted(self.blocked)
                self.blocked.clear()
            elif self.queue:
                self._guarded(self.flush)
            elif self.flights:
                self._guarded(self.land)
            else:  # a bug: fail every training rather than hang the actor
                self.failure = RuntimeError(f"lockstep stalled: {sorted(self.live)} wait")
            self._wake()

    def _resume(self, slot: int) -> None:
        start = time.perf_counter()
        self._running = slot
        self._turn[slot].release()
        self._coordinator.acquire()  # until it waits or leaves
        self._running = None
        self.charged[slot] += time.perf_counter() - start

    def _charge(self, owners: set[int], start: float) -> None:
        """Time since ``start`` on the outer transport, shared by the trainings it served
        (and not charged to the training whose turn it happened in)."""
        seconds = time.perf_counter() - start
        for slot in owners:
            self.charged[slot] += seconds / len(owners)
        if self._running is not None:
            self.charged[self._running] -= seconds

    def _wake(self) -> None:
        woken = sorted(s for s, call in self.blocked.items() if call.done)
        for slot in woken:
            del self.blocked[slot]
        self.ready = sorted({*self.ready, *woken})

    # -- the outer transport -------------------------------------------------------------
    def flush(self) -> None:
        """Send the queued calls as one ``apply`` per passive stack. A flight that holds
        a call of a training queued here lands first, so every stack runs each training's
        calls in the order they were made, whatever the transport's ordering."""
        owners = {slot for slot, *_ in self.queue}
        while any(flight.owners & owners for flight in self.flights):
            self.land()
        queued, self.queue = self.queue, []
        per_peer: list[list[SlotCall]] = [[] for _ in range(self.outer.n_peers)]
        for slot, method, args, _ in queued:
            for k, peer_args in enumerate(args):
                per_peer[k].append((slot, method, tuple(peer_args)))
        start = time.perf_counter()
        pending = self.outer.submit(
            "apply", [(calls,) for calls in per_peer], training=False, new_round=False
        )
        self._charge(owners, start)
        self.flights.append(_Flight(pending, [call for *_, call in queued], owners))

    def land(self) -> None:
        """Receive the oldest flight and answer its slots."""
        flight = self.flights.pop(0)
        start = time.perf_counter()
        answers = self.outer.gather(flight.pending)  # per peer: one result per call
        self._charge(flight.owners, start)
        for j, call in enumerate(flight.slots):
            results = [peer[j] for peer in answers]
            raised = next((r.error for r in results if isinstance(r, Raised)), None)
            if raised is not None:
                call.error = raised
            else:
                call.results = results

    def _guarded(self, action: Any) -> None:
        """An outer failure (a lost actor) ends every training: kept, raised by ``run``."""
        try:
            action()
        except Exception as err:
            self.failure = err
            self.queue.clear()
            self.flights.clear()


class HubTransport(Transport):
    """Training ``slot``'s transport: counts like any transport, calls through the hub."""

    def __init__(self, hub: Hub, slot: int) -> None:
        super().__init__()
        self.hub = hub
        self.slot = slot

    @property
    def n_peers(self) -> int:
        return self.hub.outer.n_peers

    def _submit(self, method: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        return [self.hub.enqueue(self.slot, method, args)]

    def _gather(self, handles: list[Any]) -> list[Any]:
        return self.hub.wait(self.slot, handles[0])


@dataclass
class LockstepRun:
    """What ``PartyGroup.train`` runs at the active stack: K protocols, one per slot.

    ``run`` returns, per slot, the protocol's ``TrainResult``, the exception its training
    raised, or None for a slot not in ``slots``. A failure of the outer transport (a lost
    actor) is raised, as the one-training transport would raise it. A result's
    ``train_seconds`` is the training's share of the run (``Hub.charged``, its evaluations
    included), so a pack's trainings add up to about the run's wall.
    """

    protocols: list[Any]
    epochs: list[int]
    targets: list[float | None]
    slots: list[int] = field(default_factory=list)
    groups: int = 1  # see ``Hub.groups``

    def run(
        self, active: PartyStack, transport: Transport, epochs: int = 0, target: Any = None
    ) -> list[Any]:
        hub = Hub(transport, self.slots, self.groups)
        out: list[Any] = [None] * len(self.protocols)
        threads = [
            threading.Thread(target=self._train, args=(hub, s, active, out), daemon=True)
            for s in self.slots
        ]
        for thread in threads:
            thread.start()
        hub.schedule()
        for thread in threads:
            thread.join()
        if hub.failure is not None:
            raise hub.failure
        return [self._charged(r, hub.charged.get(s, 0.0)) for s, r in enumerate(out)]

    @staticmethod
    def _charged(result: Any, seconds: float) -> Any:
        """``train_seconds``: the training's share of the run, not the run's wall (which
        every training of the pack would report alike)."""
        if dataclasses.is_dataclass(result) and hasattr(result, "train_seconds"):
            return dataclasses.replace(result, train_seconds=seconds)  # type: ignore[type-var]
        return result

    def _train(self, hub: Hub, slot: int, active: PartyStack, out: list[Any]) -> None:
        hub.first_turn(slot)
        try:
            if hub.failure is None:
                out[slot] = self.protocols[slot].run(
                    active.parties[slot],
                    HubTransport(hub, slot),
                    self.epochs[slot],
                    self.targets[slot],
                )
        except BaseException as err:  # kept per training; ``run`` returns it
            out[slot] = err
        finally:
            hub.leave(slot)
