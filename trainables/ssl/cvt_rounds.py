"""FedCVT's rounds (``PartyRounds``): run at the active party B against A over a Transport.

Why rounds of its own: FedCVT's parties exchange their own bundle (not the NN protocols'
embeddings and gradients); a trial trains with ``group.train(rounds, epochs)``, and the
rounds run where B lives (in this process, or inside B's actor under Ray) and talk to A
only through the Transport, which counts the rounds and the bytes. One round (global step
s = epoch * steps + index):

1. B computes ``values`` (r_B of the overlap; FedCVT only);
2. one call to A (``round``): apply round s-1's gradients, then A's forward of round s with
   the values; A answers with its tensors in one bundle (``fedcvt.py``'s table);
3. B's losses and update (``train_step``), whose gradients go down with the next call.

The last gradients go down after the last round; then A's test representations come up
once and B evaluates. ``comm_bytes`` counts everything that crossed the A/B boundary in
training plus that final test exchange (FedCVT's trials always counted the test
representations); ``eval_bytes`` also holds any per-epoch evaluation (``target_mp``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from trainables.messages import Message
from trainables.protocols.base import PartyRounds, Value
from trainables.ssl.cvt_party import CvtParty
from trainables.transport.base import Transport

if TYPE_CHECKING:
    from trainables.ssl.cvt_active import CvtActive


class CvtRounds(PartyRounds["CvtActive"]):
    """``semi``: FedCVT (False: FedSplitNN on the same models); ``local_steps``: Q of FedBCD
    (each party's Q updates on one exchange), 1 for FedSGD."""

    name = "fedcvt"
    defaults: ClassVar[dict[str, Value]] = {"semi": True, "local_steps": 1}
    test_bytes_in_comm = True

    @property
    def local_steps(self) -> int:
        return int(self.params["local_steps"])

    def setup(self, active: CvtActive, transport: Transport) -> None:
        self.grads: Message | None = None
        self.semi, self.steps = bool(self.params["semi"]), int(active.steps)

    def epoch_steps(self, active: CvtActive, epoch: int) -> range:
        """Global steps ``epoch * steps ...``: ``epochs * active.steps`` rounds in all."""
        return range(epoch * self.steps, (epoch + 1) * self.steps)

    def exchange(self, active: CvtActive, transport: Transport, step: int, nxt: int | None) -> None:
        """One round (see the module doc)."""
        values = active.values(step) if self.semi else None
        pending = transport.submit(
            CvtParty.round, [(self.grads, step, values)], training=True, new_round=True
        )
        self.grads = active.train_step(step, transport.gather(pending)[0])

    def pause(self, active: CvtActive, transport: Transport) -> None:
        """An evaluation comes: A applies the pending gradients first."""
        self.finish(active, transport)

    def finish(self, active: CvtActive, transport: Transport) -> None:
        """The pending gradients down to A (no new round)."""
        if self.grads is not None:
            transport.call(CvtParty.round, [(self.grads, None, None)], training=True)
        self.grads = None

    def evaluate(self, active: CvtActive, transport: Transport, split: str = "test") -> float:
        """Test MP; FedCVT has no validation rows (its kind refuses ``val_ratio``)."""
        assert split == "test", "FedCVT evaluates test rows only"
        test = transport.call(CvtParty.test_reps, [()], training=False)[0]
        return float(active.evaluate(test))
