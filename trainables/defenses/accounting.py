"""Privacy accounting: plain functions over Opacus' RDP accountant (Opacus' split: the
accountant is a small stateful object, the math lives elsewhere; we never hand-roll it).

Why a count replayed at once: each mechanism counts its own releases as it applies
(``GaussianDP.released``, per recipient; ``Defense.dp_steps``), on whichever process
hosts its party; the trial replays that count into a fresh accountant after training,
which gives the epsilon of stepping one every release (Opacus merges identical
consecutive steps the same way) without shipping accountant state back from an actor.
"""

from __future__ import annotations

import math
import warnings

DELTA = 1e-5


def gaussian_epsilon(
    noise_multiplier: float, sample_rate: float, steps: int, delta: float = DELTA
) -> float:
    """Epsilon of ``steps`` subsampled Gaussian mechanisms (RDP, Mironov et al.).

    ``noise_multiplier`` = noise std / clipping norm; ``sample_rate`` = batch / rows.
    Zero noise spends infinite privacy; no step spends none.
    """
    if steps <= 0:
        return 0.0
    if noise_multiplier <= 0:
        return math.inf
    from opacus.accountants import RDPAccountant

    accountant = RDPAccountant()
    accountant.history = [(float(noise_multiplier), min(1.0, float(sample_rate)), int(steps))]
    with warnings.catch_warnings():  # Opacus warns when the optimal order is at the edge
        warnings.simplefilter("ignore")
        return float(accountant.get_epsilon(delta))
