"""The rounds of a stacked training (``VecRun``) and each training's own counts.

``VecRun`` is the base protocol's round loop (``Rounds.run``: FedSGD, FedBCD's Q local
steps, CELU-VFL's cached steps at the stacks) run at the active ``VecStack``
(``vec_stack.py``) for every stacked training at once. Rounds and bytes are counted per
training exactly as its one-at-a-time transport counts them (``_Counts``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainables.messages import BatchRef
from trainables.protocols.base import curve_split
from trainables.rounds import Rounds, TrainResult
from trainables.transport.base import CommStats, Transport
from trainables.vfl.halving import Halving, survivors
from trainables.vfl.vec_stack import Payload, VecStack


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

    payloads: list[Any]


def _kept(payload: Any, keep: Sequence[int]) -> Any:
    """A stacked message (one array (K, ...), or one ``Message`` per training) of the
    trainings at ``keep`` only."""
    if isinstance(payload, list):
        return [payload[j] for j in keep]
    return payload[list(keep)]


class VecRun(Rounds[VecStack, Transport]):
    """What ``PartyGroup.train`` runs at the active ``VecStack``: the NN protocols' round
    (FedSGD; FedBCD's Q local steps and CELU-VFL's cached steps at the stacks; a
    protocol's codecs in each training's hooks) for every stacked training at once
    (``Rounds.run``'s loop). Returns one ``TrainResult`` per slot of the pack (None where
    a slot was not stacked); ``train_seconds`` is each training's share. Its messages are
    counted per training (``_Counts``), not by the transport."""

    def __init__(
        self,
        targets: list[float | None],
        slots: list[int],
        halving: Halving | None = None,
        cells: Sequence[str] = (),
        epochs: int = 0,
    ) -> None:
        super().__init__()
        self.targets = targets  # per slot of the pack
        self.slots = slots
        # successive halving (``halving.py``): each slot's cell (its spec but its seed) and
        # the rungs of these ``epochs``
        self.halving, self.cells = halving, list(cells)
        self.rungs = [] if halving is None else halving.rungs(epochs)

    def setup(self, active: VecStack, transport: Transport) -> None:
        self.pending: Any = None  # the passive stacks' H for the next round, on its way
        self.k = len(self.slots)
        self.counts = _Counts([CommStats() for _ in self.slots])
        self.slot_targets = [self.targets[s] for s in self.slots]
        self.curves: list[list[float]] = [[] for _ in self.slots]
        self.epochs_seen = 0
        if self.listener is not None and self.k != 1:
            raise ValueError("an epoch listener follows one training; this stack holds more")
        self.reached_at: list[int | None] = [None] * self.k
        self.stopped: dict[int, TrainResult] = {}  # slot -> what it left (halving)
        self.clock, self.spent = time.perf_counter(), [0.0] * self.k

    def epoch_steps(self, active: VecStack, epoch: int) -> Sequence[BatchRef]:
        refs: Sequence[BatchRef] = active.parties[self.slots[0]].schedule.refs(epoch)
        return refs  # every slot's count

    def exchange(
        self, active: VecStack, transport: Transport, ref: BatchRef, nxt: BatchRef | None
    ) -> None:
        """Round t: the passive stacks apply gradient t-1 and send H(t) in one call; the
        active stack computes the losses and dL/dH(t), sends them with the request for
        H(t+1), and updates its own models while the passive stacks work. Each party's
        arithmetic is exactly FedSGD's (FedBCD's with Q local steps); only the waiting
        overlaps. At a paused epoch end every party has applied the epoch's last gradient
        (the passive step that did so was submitted before the evaluation call, and a
        party runs its calls in order)."""
        if self.pending is None:  # the first round: the request for H(0)
            self.pending = self.send(transport, [None] * transport.n_peers, ref)
        active.forward(ref)
        grads = active.passive_gradients(ref, self.receive(transport, self.pending))
        self.pending = self.send(transport, grads, nxt)
        active.update()

    def finish(self, active: VecStack, transport: Transport) -> None:
        if self.pending is not None:  # the last gradients: every party on the same version
            transport.gather(self.pending)

    def send(
        self, transport: Transport, grads: Sequence[Payload | None], nxt: BatchRef | None
    ) -> Any:
        """Gradients of the last round down, the request for the next round's H up."""
        self.counts.sent(grads, nxt is not None)
        return transport.submit("vstep", [(g, nxt) for g in grads], training=False, new_round=False)

    def receive(self, transport: Transport, pending: Any) -> list[Any]:
        """The passive stacks' answers to the last ``send`` (or a cut's): this round's H."""
        embeddings = pending.payloads if isinstance(pending, _Cut) else transport.gather(pending)
        self.counts.received(embeddings, True, range(self.k))
        return embeddings

    def pauses(self) -> bool:
        return (
            self.listener is not None
            or bool(self.rungs)
            or any(t is not None for t in self.slot_targets)
        )

    def observe(self, active: VecStack, transport: Transport, done: int) -> None:
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

    def _cut(self, active: VecStack, transport: Transport, scores: list[float]) -> None:
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
                self.counts.stats[j],
                val_mp=scores[j],
                train_seconds=self.spent[j],
                final_loss=float(active.losses[j]),
                extra={"stopped": {"epochs_run": self.epochs_seen, "by": self.halving.label()}},
            )
        if self.pending is not None:  # the next round's H, sent before this epoch end
            payloads = transport.gather(self.pending)
            self.pending = _Cut([_kept(p, keep) for p in payloads])
        transport.call("keep", [(keep,)] * transport.n_peers, training=False)
        active.keep(keep)
        self.slots = [self.slots[j] for j in keep]
        self.k = len(keep)
        for name in ("slot_targets", "curves", "reached_at", "spent"):
            setattr(self, name, [getattr(self, name)[j] for j in keep])
        self.counts.stats = [self.counts.stats[j] for j in keep]

    def _charge(self) -> None:
        """Each training in the stack its share of the wall time since the last charge."""
        now = time.perf_counter()
        share = (now - self.clock) / self.k
        self.spent = [s + share for s in self.spent]
        self.clock = now

    def _evaluate(
        self, active: VecStack, transport: Transport, counted: Sequence[int], split: str = "test"
    ) -> list[float]:
        """Every training's MP on its ``split`` rows; eval traffic counted for the
        ``counted`` ones."""
        rows = transport.call("vembed", [(split,)] * transport.n_peers, training=False)
        self.counts.received(rows, False, counted)
        return active.evaluate(rows, split)

    def result(
        self, active: VecStack, transport: Transport, seconds: float, total: int
    ) -> list[Any]:
        mps = self._evaluate(active, transport, range(self.k))
        vals: list[float | None] = [None] * self.k
        if curve_split(active) == "val":
            vals = list(self._evaluate(active, transport, range(self.k), "val"))
        self._curve([m if v is None else v for m, v in zip(mps, vals, strict=True)], total)
        out: list[Any] = [None] * len(self.targets)
        if self.stopped:  # halving: each its share of the stack while in it, scaled to
            self._charge()  # the loop's training seconds (evaluations left out)
            shares = self.spent + [r.train_seconds for r in self.stopped.values()]
            scale = seconds / max(sum(shares), 1e-12)
            self.spent = [x * scale for x in self.spent]
            for s, stopped in self.stopped.items():
                out[s] = dataclasses.replace(stopped, train_seconds=stopped.train_seconds * scale)
        for stats in self.counts.stats:  # the stack's calls served each training: a share
            stats.submit_seconds = transport.stats.submit_seconds / self.k
            stats.wait_seconds = transport.stats.wait_seconds / self.k
        for j, s in enumerate(self.slots):
            out[s] = TrainResult.from_stats(
                self.counts.stats[j],
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
