"""clip_norm: per-sample gradient clipping at a quantile of the batch's norms.

Active party: in each training round it sends every passive party k the gradient rows
dL/dH_k, a (B, m) matrix (B samples of the batch, m = the passive bottom's output width).
clip_norm computes the rows' L2 norms n_1..n_B, takes the bound tau = the (1 - s) quantile
of them (s = strength, linear interpolation, ``torch.quantile``) and scales every row whose
norm exceeds tau down to norm tau, keeping its direction; the other rows are unchanged.
So a share s of each batch's rows is clipped, whatever the scale of the gradients (which
shrinks as training converges, and with the batch size since the loss is a batch mean).

Why it protects: norm-based label inference (NS, Li et al. 2022, "Label leakage and
protection in two-party split learning") reads the label of a sample from the size of its
gradient; at s = 1 every row has the batch's smallest norm and the norms say nothing. The
directions still leak (DS reads them), which this defense does not touch. The quantile
bound is the one of adaptive clipping (Andrew et al. 2021), here without noise.

Strength s in [0, 1]; 0 is the neutral strength (tau = the largest norm: nothing changes,
and the message is passed on untouched, so training is bit-identical to no defense).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from trainables.defenses.base import (
    Defense,
    DefenseInfo,
    clip_rows,
    is_training_gradient,
    with_payload,
)
from trainables.messages import Message

if TYPE_CHECKING:
    from trainables.party import Party


class ClipNorm(Defense):
    """Clip each batch's largest gradient rows down to the (1 - strength) norm quantile."""

    name = "clip_norm"  # must equal the entry-point name in pyproject.toml
    info = DefenseInfo(
        party="active",
        parties=("active",),
        grid=(0.1, 0.25, 0.5, 0.9),
        neutral=0.0,
        quantity="share of each batch's gradient rows clipped to the batch's norm quantile",
        low=0.0,
        high=1.0,
    )

    def targets(self) -> tuple[str, ...]:
        """The gradients the active party sends (the planner drops cells without them)."""
        return ("gradient",)

    def on_send(self, party: Party, msg: Message) -> Message:
        if not is_training_gradient(msg) or self.strength == 0.0:
            return msg
        g = torch.from_numpy(np.array(msg.payload))  # (B, m)
        norms = g.norm(dim=1)  # (B,)
        tau = float(torch.quantile(norms.double(), 1.0 - self.strength))
        if not bool((norms > tau).any()):  # all rows of one norm: nothing to clip
            return msg
        self.count(msg.kind)
        return with_payload(msg, clip_rows(g, tau).numpy())


DEFENSE = ClipNorm
