"""MF, missing feature (Liu et al. 2021b; VFLAIR's MissingFeature): a non-targeted attack.

At inference the passive attacker withholds its contribution for a share of the test rows
(VFLAIR: missing rate 0.25), as an unstable network or a deliberately silent party would:
as in VFLAIR, the embedding (its bottom model's output) of those rows is replaced by 0
before the active party aggregates.
AP: MP on clean test inputs minus MP with those rows' embeddings missing.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from trainables.attacks.base import Attack, AttackInfo, InferenceTamper, PartyView


class MissingFeature(Attack):
    name = "mf"
    info = AttackInfo(type="NTB", role="passive", training_time=False)
    defaults: ClassVar[dict[str, object]] = {
        "missing_rate": 0.25,  # share of test rows
        # AP against the "clean" MP (the paper's Eq. 7) or, as VFLAIR's code counts, the
        # "tampered" model's MP over all test rows
        "mp": "clean",
    }
    choices: ClassVar[dict[str, tuple[str, ...]]] = {"mp": ("clean", "tampered")}

    def run(self, view: PartyView) -> InferenceTamper:
        n_test = len(view.X_test)
        k = min(int(float(self.params["missing_rate"]) * n_test), n_test)  # VFLAIR: int(n*rate)
        rng = np.random.default_rng([view.seed, 6163])
        rows = np.sort(rng.choice(n_test, size=k, replace=False)).astype(np.int64)  # (k,)
        view.bottom.eval()
        with torch.no_grad():
            h = view.bottom(torch.from_numpy(np.asarray(view.X_test, dtype=np.float32)))
        emb = h.numpy().copy()  # (n_test, C)
        emb[rows] = 0.0
        return InferenceTamper(
            rows=rows, embeddings=emb, against_tampered_mp=self.params["mp"] == "tampered"
        )


ATTACK = MissingFeature
