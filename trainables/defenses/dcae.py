"""DCAE: CAE plus discrete gradients (Zou et al. 2022; VFLAIR, 12 bins).

Everything CAE does (``cae.py``), and every gradient message dL/dH_k (B, C) is rounded to
the nearest of ``bins`` = 12 evenly spaced levels between its minimum and maximum, so a
passive party sees at most 12 distinct values: fine differences between samples' gradients
(what label inference reads) are erased.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import numpy as np

from trainables.defenses.base import DefenseInfo, is_training_gradient, with_payload
from trainables.defenses.cae import ConfusionalAutoencoder, StackedCAE
from trainables.messages import Message

if TYPE_CHECKING:
    from trainables.roles import HookHost


def discretize(g: np.ndarray, bins: int) -> np.ndarray:
    """Each element of ``g`` rounded to the nearest of ``bins`` levels spanning [min, max]."""
    lo, hi = float(g.min()), float(g.max())
    if hi <= lo or bins < 2:
        return np.full_like(g, lo if bins >= 1 else 0.0)
    step = (hi - lo) / (bins - 1)
    x = np.asarray(g, dtype=np.float64)  # in float32 a denormal step underflows to 0 (NaN)
    return (lo + np.round((x - lo) / step) * step).astype(g.dtype)


class StackedDCAE(StackedCAE):
    """CAE's stacked form; the gradients go through each training's own ``on_send``."""

    messages = True


class DiscreteCAE(ConfusionalAutoencoder):
    name = "dcae"
    stacked = StackedDCAE
    defaults: ClassVar[dict[str, object]] = {"steps": 400, "bins": 12}
    info = DefenseInfo(
        party="active",
        grid=(0.0, 0.1, 0.5, 1.0),
        neutral=None,
        quantity="CAE's lambda; gradients discretized to `bins` levels",
    )

    def on_send(self, party: HookHost, msg: Message) -> Message:
        if not is_training_gradient(msg):
            return msg
        self.count(msg.kind)
        return with_payload(msg, discretize(np.asarray(msg.payload), int(self.params["bins"])))


DEFENSE = DiscreteCAE
