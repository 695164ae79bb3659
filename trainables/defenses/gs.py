"""GS: gradient sparsification (Aji & Heafield 2017; VFLAIR).

The active party zeroes the fraction ``strength`` (in percent: 95, 97, 99, 99.5) of the
elements of each gradient message dL/dH_k (B, C) that are closest to zero, keeping the
ceil((1 - s/100) * B * C) largest magnitudes. Ties at the threshold are broken by
position, so exactly that many elements survive.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from trainables.defenses.base import Defense, DefenseInfo, is_training_gradient, with_payload
from trainables.messages import Message

if TYPE_CHECKING:
    from trainables.party import Party


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
    info = DefenseInfo(
        party="active",
        grid=(95.0, 97.0, 99.0, 99.5),
        neutral=0.0,
        quantity="percent of gradient elements dropped",
        high=100.0,
    )

    def on_send(self, party: Party, msg: Message) -> Message:
        if not is_training_gradient(msg) or self.strength == 0.0:
            return msg
        return with_payload(msg, sparsify(np.asarray(msg.payload), self.strength))


DEFENSE = GradientSparsification
