"""L-DP: Laplace noise on what a party sends (VFLAIR's DP-L).

Same placement and clipping as G-DP (``gdp.py``): active party on clipped per-sample
gradient rows (clip 0.2), passive party on its embeddings; the noise is Laplace(0, b)
with scale b = strength (std = sqrt(2) b). No epsilon is reported: Opacus' accountants
cover the Gaussian mechanism only, and we do not hand-roll one.
"""

from __future__ import annotations

from trainables.defenses.base import DefenseInfo
from trainables.defenses.gdp import NoisyMessages


class LaplaceDP(NoisyMessages):
    name = "ldp"
    kind = "laplace"
    info = DefenseInfo(
        party="active",
        parties=("active", "passive"),
        grid=(1e-4, 1e-3, 1e-2, 1e-1),
        neutral=0.0,
        quantity="scale b of the Laplace noise added to each element",
    )


DEFENSE = LaplaceDP
