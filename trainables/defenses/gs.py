"""GS: gradient sparsification (Aji & Heafield 2017; VFLAIR).

The active party zeroes the fraction ``strength`` (in percent: 95, 97, 99, 99.5) of the
elements of each gradient message dL/dH_k (B, C) that are closest to zero, keeping the
ceil((1 - s/100) * B * C) largest magnitudes. Ties at the threshold are broken by
position, so exactly that many elements survive.

With ``residual`` = 1 (the default: Aji & Heafield's gradient dropping), what is dropped
is not lost: it is kept per training sample and class, and added to that sample's
gradient the next time the sample is in a batch (the next epoch), so small but
persistent gradients are delivered late instead of never (rows that a colluding LRB puts
into a batch carry none). ``residual`` = 0 drops them for good. On digits with DLI
(seed 0) the residual raised MP at 95 % from 0.853 to 0.936 and lowered DLI's AP from
0.355 to 0.275; at 99.5 %: MP 0.717 -> 0.764, AP 0.141 -> 0.126.

Option ``carry`` (with ``residual`` = 1): ``row`` (default) is the above. ``position`` is
what VFLAIR's code does (``defense_functions.GradientSparsification``): the remainder of
the *previous* gradient message to that party is added to the next one element by
element, by position in the batch (so to other samples), whenever the two have the same
number of rows (rows a colluding LRB puts into a batch included). It is delivered the
next step instead of the next epoch. ``procedure: vflair`` sets it. With it, on LRB's
trainings at MNIST batch 273 and 99.5 %, MP is 0.807 against VFLAIR's code's 0.839
(``python -m benchmarks.vflair_code_columns``; docs/vflair.md, "GS with VFLAIR's carry").
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar, cast

import numpy as np

from trainables.defenses.base import Defense, DefenseInfo, is_training_gradient, with_payload
from trainables.messages import Message

if TYPE_CHECKING:
    from trainables.roles import HookHost, NNHost


def sparsify(g: np.ndarray, drop_percent: float) -> np.ndarray:
    """``g`` with all but the ceil((1 - p/100) * size) largest |elements| set to 0."""
    keep = math.ceil((1.0 - drop_percent / 100.0) * g.size)
    if keep >= g.size:
        return g.copy()
    flat = g.reshape(-1)
    out = np.zeros_like(flat)
    if keep > 0:
        idx = np.argpartition(-np.abs(flat), keep - 1)[:keep]
        out[idx] = flat[idx]
    return out.reshape(g.shape)


class GradientSparsification(Defense):
    name = "gs"
    # carry: "row" (per training sample) or "position" (VFLAIR's: the previous message's)
    defaults: ClassVar[dict[str, object]] = {"residual": 1, "carry": "row"}
    info = DefenseInfo(
        party="active",
        grid=(95.0, 97.0, 99.0, 99.5),
        neutral=0.0,
        quantity="percent of gradient elements dropped",
        high=100.0,
    )

    def __init__(
        self, strength: float | None = None, seed: int = 0, index: int = 0, **params: object
    ) -> None:
        super().__init__(strength, seed, index, **params)
        # receiver -> the dropped remainder: (n_rows, C) per training row (carry: row), or
        # the last message's (B, C) (carry: position)
        self.stores: dict[int, np.ndarray] = {}

    def validate(self) -> None:
        self.choice("residual", (0, 1))
        self.choice("carry", ("row", "position"))

    def targets(self) -> tuple[str, ...]:
        return ("gradient",)

    def keeps_row_state(self) -> bool:
        return bool(self.params["residual"])  # the remainder, per row (or batch position)

    def on_send(self, party: HookHost, msg: Message) -> Message:
        if not is_training_gradient(msg) or self.strength == 0.0:
            return msg
        self.count(msg.kind)
        g = np.asarray(msg.payload)  # (B, C)
        if not self.params["residual"] or msg.batch is None:
            return with_payload(msg, sparsify(g, self.strength))
        if self.params["carry"] == "position":
            return with_payload(msg, self._by_position(msg.dst, g))
        schedule = cast("NNHost", party).schedule  # GS runs on NN parties' gradients
        rows = schedule.rows(msg.batch)  # (B,) positions in the training rows
        b = len(rows)  # rows past B: put in by a colluding attack (LRB's), no residual
        store = self._residuals(schedule.n_rows, msg.dst, g.shape[1])
        total = g.copy()
        total[:b] += store[rows]
        sent = sparsify(total, self.strength)
        store[rows] = total[:b] - sent[:b]
        return with_payload(msg, sent)

    def _by_position(self, dst: int, g: np.ndarray) -> np.ndarray:
        """VFLAIR's carry: ``g`` (B, C) plus the previous message's remainder where that
        had B rows too, sparsified; its remainder is kept for the next message."""
        total = g.astype(np.float32, copy=True)
        last = self.stores.get(dst)
        if last is not None and last.shape == total.shape:
            total += last
        sent = sparsify(total, self.strength)
        self.stores[dst] = total - sent
        return sent

    def _residuals(self, n_rows: int, dst: int, width: int) -> np.ndarray:
        """The (n_rows, C) dropped remainder per training sample, one store per receiver."""
        if dst not in self.stores:
            self.stores[dst] = np.zeros((n_rows, width), dtype=np.float32)
        return self.stores[dst]


DEFENSE = GradientSparsification
