"""The rounds of a stacked training (``StackedRounds``), the passive parties as a round
reaches them (``StackedPassives``) and each training's own counts.

``StackedRounds`` is the round loop (``Rounds.run``) at the active ``StackedParty``
(``stacked_party.py``) for every stacked training at once; each round is the NN
protocol's ``exchange`` (``protocols/base.py``: FedSGD's, with FedBCD's Q local steps;
CELU-VFL's cached steps in the stacked parties' hooks). Around it: the epoch-end
evaluations, successive halving's cuts and each training's result. Rounds and bytes are
counted per training exactly as its one-at-a-time transport counts them (``_Counts``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from trainables.messages import BatchRef
from trainables.rounds import Rounds, TrainResult, curve_split
from trainables.transport.base import CommStats, Pending, Transport
from trainables.vfl.halving import Halving, survivors
from trainables.vfl.stacked_party import Payload, StackedParty


def sizes(payload: Payload | None, k: int) -> list[int]:
    """Each training's bytes of one stacked message, as its own transport counts them."""
    if payload is None:
        return [0] * k
    if isinstance(payload, list):
        return [m.nbytes for m in payload]
    return [payload.nbytes // k] * k


@dataclass
class _Counts:
    """The trainings' ``CommStats``, counted as each one-at-a-time transport counts."""

    stats: list[CommStats]

    def sent(self, payloads: Sequence[Payload | None], new_round: bool) -> None:
        k = len(self.stats)
        for payload in payloads:
            for stats, n in zip(self.stats, sizes(payload, k), strict=True):
                stats.bytes_down += n
        for stats in self.stats:
            stats.rounds += int(new_round)

    def received(self, payloads: Sequence[Payload], training: bool, only: Sequence[int]) -> None:
        k = len(self.stats)
        for payload in payloads:
            n = sizes(payload, k)
            for j in only:
                if training:
                    self.stats[j].bytes_up += n[j]
                else:
                    self.stats[j].eval_bytes += n[j]


@dataclass(frozen=True)
class _Cut:
    """The next round's H, gathered at a cut and cut to the trainings that go on."""

    payloads: list[Payload]


def _kept(payload: Payload, keep: Sequence[int]) -> Payload:
    """A stacked message (one array (K, ...), or one ``Message`` per training) of the
    trainings at ``keep`` only."""
    if isinstance(payload, list):
        return [payload[j] for j in keep]
    return payload[list(keep)]


class StackedPassives:
    """The passive parties' stacks as an NN protocol's round reaches them
    (``Protocol.exchange``): typed calls over the transport, each training's messages
    counted as its one-at-a-time transport counts them (``_Counts``)."""

    def __init__(self, transport: Transport, k: int) -> None:
        self.transport = transport
        self.n = transport.n_peers  # P passive parties
        self.counts = _Counts([CommStats() for _ in range(k)])
        self.pending: Pending | _Cut | None = None  # their H for the next round, on its way

    def request(self, ref: BatchRef) -> None:
        """Ask for H(``ref``), unless the last round's ``send`` asked already."""
        if self.pending is None:
            self.send([None] * self.n, ref)

    def embeddings(self) -> list[Payload]:
        """The requested H: P x (K, B, C)."""
        assert self.pending is not None, "embeddings come after a request"
        pending, self.pending = self.pending, None
        h = pending.payloads if isinstance(pending, _Cut) else self.transport.gather(pending)
        self.counts.received(h, True, range(len(self.counts.stats)))
        return h

    def send(self, grads: Sequence[Payload | None], nxt: BatchRef | None, steps: int = 1) -> None:
        """dL/dH down (P x (K, B, C); each passive stack applies it in ``steps`` local
        updates), with the request for H(``nxt``) (None after the last round)."""
        self.counts.sent(grads, nxt is not None)
        args = [(g, nxt, steps) for g in grads]
        self.pending = self.transport.submit(
            StackedParty.passive_round, args, training=False, new_round=False
        )

    def finish(self) -> None:
        """Wait for the last ``send``: every party on the same version."""
        if isinstance(self.pending, Pending):
            self.transport.gather(self.pending)
        self.pending = None

    def embed(self, split: str, counted: Sequence[int]) -> list[Payload]:
        """Every passive stack's H of its ``split`` rows (P x (K, n, C)); eval traffic
        counted for the trainings at ``counted``."""
        rows = self.transport.call(StackedParty.embed, [(split,)] * self.n, training=False)
        self.counts.received(rows, False, counted)
        return rows

    def keep(self, keep: Sequence[int]) -> None:
        """Go on with the trainings at ``keep`` only: every passive stack and the H already
        requested for the next round are cut to them."""
        if self.pending is not None:
            payloads = (
                self.pending.payloads
                if isinstance(self.pending, _Cut)
                else self.transport.gather(self.pending)
            )
            self.pending = _Cut([_kept(p, keep) for p in payloads])
        self.transport.call(StackedParty.keep, [(keep,)] * self.n, training=False)
        self.counts.stats = [self.counts.stats[j] for j in keep]


class StackedRound(Protocol):
    """What ``StackedRounds`` needs of an NN protocol (``protocols/base.py``'s ``Protocol``, which
    names this module's types: structural here, so neither module imports the other)."""

    def exchange(
        self, active: StackedParty, passives: StackedPassives, ref: BatchRef, nxt: BatchRef | None
    ) -> None: ...


class StackedRounds(Rounds[StackedParty, Transport]):
    """What ``PartyGroup.train`` runs at the active ``StackedParty``: ``Rounds.run``'s loop,
    each round the ``protocol``'s ``exchange``, for every stacked training at once.
    Returns one ``TrainResult`` per slot of the pack (None where a slot was not
    stacked); ``train_seconds`` is each training's share. Its messages are counted per
    training (``StackedPassives``' ``_Counts``), not by the transport."""

    def __init__(
        self,
        protocol: StackedRound,
        targets: list[float | None],
        slots: list[int],
        halving: Halving | None = None,
        cells: Sequence[str] = (),
        epochs: int = 0,
    ) -> None:
        super().__init__()
        self.protocol = protocol  # its ``exchange`` is the round
        self.targets = targets  # per slot of the pack
        self.slots = slots
        # successive halving (``halving.py``): each slot's cell (its spec but its seed) and
        # the rungs of these ``epochs``
        self.halving, self.cells = halving, list(cells)
        self.rungs = [] if halving is None else halving.rungs(epochs)

    def setup(self, active: StackedParty, transport: Transport) -> None:
        self.k = len(self.slots)
        self.passives = StackedPassives(transport, self.k)
        self.slot_targets = [self.targets[s] for s in self.slots]
        self.curves: list[list[float]] = [[] for _ in self.slots]
        self.epochs_seen = 0
        if self.listener is not None and self.k != 1:
            raise ValueError("an epoch listener follows one training; this stack holds more")
        self.reached_at: list[int | None] = [None] * self.k
        self.stopped: dict[int, TrainResult] = {}  # slot -> what it left (halving)
        self.clock, self.spent = time.perf_counter(), [0.0] * self.k

    def epoch_steps(self, active: StackedParty, epoch: int) -> Sequence[BatchRef]:
        refs: Sequence[BatchRef] = active.parties[self.slots[0]].schedule.refs(epoch)
        return refs  # every slot's count

    def exchange(
        self, active: StackedParty, transport: Transport, ref: BatchRef, nxt: BatchRef | None
    ) -> None:
        """The protocol's round (``Protocol.exchange``)."""
        self.protocol.exchange(active, self.passives, ref, nxt)

    def finish(self, active: StackedParty, transport: Transport) -> None:
        self.passives.finish()

    def pauses(self) -> bool:
        return (
            self.listener is not None
            or bool(self.rungs)
            or any(t is not None for t in self.slot_targets)
        )

    def observe(self, active: StackedParty, transport: Transport, done: int) -> None:
        """Only the trainings with a target evaluate (and count eval traffic) at epoch ends;
        a lone training with a listener (early stopping) always, and tells it; at a rung
        of successive halving every training, and the losers leave the stack (``_cut``)."""
        self.epochs_seen += 1
        listened = self.listener is not None
        cut = self.epochs_seen in self.rungs and self.k > 1
        counted = [j for j, t in enumerate(self.slot_targets) if t is not None or listened or cut]
        if not counted:
            return
        mps = self._evaluate(active, transport, counted, curve_split(active))
        self._curve(mps, done)
        if self.listener is not None:
            self.listener.epoch_end(self.epochs_seen, mps[0], done)
        if cut:
            self._cut(active, transport, mps)

    def _cut(self, active: StackedParty, transport: Transport, scores: list[float]) -> None:
        """Successive halving at a rung: the trainings of the best cells by validation MP
        (``halving.survivors``) go on; the others' results are kept as stopped, and their
        slices leave every party's stack and the H already sent for the next round."""
        assert self.halving is not None
        keep = survivors([self.cells[s] for s in self.slots], scores, self.halving.reduction_factor)
        self._charge()
        if len(keep) == self.k:
            return
        for j in set(range(self.k)) - set(keep):
            self.stopped[self.slots[j]] = TrainResult.from_stats(
                self.passives.counts.stats[j],
                val_mp=scores[j],
                train_seconds=self.spent[j],
                final_loss=float(active.losses[j]),
                extra={"stopped": {"epochs_run": self.epochs_seen, "by": self.halving.label()}},
            )
        self.passives.keep(keep)
        active.keep(keep)
        self.slots = [self.slots[j] for j in keep]
        self.k = len(keep)
        for name in ("slot_targets", "curves", "reached_at", "spent"):
            setattr(self, name, [getattr(self, name)[j] for j in keep])

    def _charge(self) -> None:
        """Each training in the stack its share of the wall time since the last charge."""
        now = time.perf_counter()
        share = (now - self.clock) / self.k
        self.spent = [s + share for s in self.spent]
        self.clock = now

    def _evaluate(
        self,
        active: StackedParty,
        transport: Transport,
        counted: Sequence[int],
        split: str = "test",
    ) -> list[float]:
        """Every training's MP on its ``split`` rows; eval traffic counted for the
        ``counted`` ones."""
        return active.evaluate(self.passives.embed(split, counted), split)

    def result(
        self, active: StackedParty, transport: Transport, seconds: float, total: int
    ) -> list[TrainResult | None]:
        mps = self._evaluate(active, transport, range(self.k))
        vals: list[float | None] = [None] * self.k
        if curve_split(active) == "val":
            vals = list(self._evaluate(active, transport, range(self.k), "val"))
        self._curve([m if v is None else v for m, v in zip(mps, vals, strict=True)], total)
        out: list[TrainResult | None] = [None] * len(self.targets)
        if self.stopped:  # halving: each its share of the stack while in it, scaled to
            self._charge()  # the loop's training seconds (evaluations left out)
            shares = self.spent + [r.train_seconds for r in self.stopped.values()]
            scale = seconds / max(sum(shares), 1e-12)
            self.spent = [x * scale for x in self.spent]
            for s, stopped in self.stopped.items():
                out[s] = dataclasses.replace(stopped, train_seconds=stopped.train_seconds * scale)
        for stats in self.passives.counts.stats:  # the stack's calls served each training: a share
            stats.submit_seconds = transport.stats.submit_seconds / self.k
            stats.wait_seconds = transport.stats.wait_seconds / self.k
        for j, s in enumerate(self.slots):
            out[s] = TrainResult.from_stats(
                self.passives.counts.stats[j],
                mp=mps[j],
                val_mp=vals[j],
                train_seconds=self.spent[j] if self.stopped else seconds / self.k,
                final_loss=float(active.losses[j]),
                rounds_to_target=self.reached_at[j],
                mp_by_epoch=tuple(self.curves[j]),
            )
        return out

    def _curve(self, mps: list[float], rounds: int) -> None:
        """Per training with a target: its curve point and the first round count reaching it."""
        for j, t in enumerate(self.slot_targets):
            if t is None:
                continue
            self.curves[j].append(mps[j])
            if self.reached_at[j] is None and mps[j] >= t:
                self.reached_at[j] = rounds
