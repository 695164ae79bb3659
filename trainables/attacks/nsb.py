"""NSB, noisy-sample backdoor (Zou et al.; VFLAIR's NoisySample): a non-targeted attack.

At inference the passive attacker adds Gaussian noise to its own features of a few
randomly chosen test rows (VFLAIR: 1% of them) to harm the joint model's utility. VFLAIR's
N(0, 2) means ``np.random.normal(0, scale=2)``: 2 is the standard deviation; the noisy
features are clipped to the data range (VFLAIR: [0, 1]; here each column's training
[min, max], which is [0, 1] for min-max-scaled pixels).
AP: MP on clean test inputs minus MP with the noisy rows (over all test rows).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from trainables.attacks.base import Attack, AttackInfo, InferenceTamper, PartyView


class NoisySampleBackdoor(Attack):
    name = "nsb"
    info = AttackInfo(type="NTB", role="passive", training_time=False)
    defaults: ClassVar[dict[str, object]] = {
        "noise_rate": 0.01,  # share of test rows made noisy
        "noise_std": 2.0,  # standard deviation of the added noise
        # AP against the "clean" MP (the paper's Eq. 7) or, as VFLAIR's code counts, the
        # "tampered" model's MP over all test rows
        "mp": "clean",
        "over": "final",  # AP, MP of the final model; "epochs": means over epochs (VFLAIR)
    }
    choices: ClassVar[dict[str, tuple[str, ...]]] = {
        "mp": ("clean", "tampered"),
        "over": ("final", "epochs"),
    }

    def run(self, view: PartyView) -> InferenceTamper:
        rng = np.random.default_rng([view.seed, 6151])
        X = np.array(view.X_test, dtype=np.float32, copy=True)  # (n_test, d)
        n_test = len(X)
        k = min(max(1, round(float(self.params["noise_rate"]) * n_test)), n_test)
        rows = np.sort(rng.choice(n_test, size=k, replace=False)).astype(np.int64)  # (k,)
        noise = rng.normal(0.0, float(self.params["noise_std"]), size=(k, X.shape[1]))
        lo, hi = view.X_train.min(axis=0), view.X_train.max(axis=0)  # (d,) own data range
        X[rows] = np.clip(X[rows] + noise, lo, hi).astype(np.float32)
        return InferenceTamper(
            rows=rows,
            X_test=X,
            against_tampered_mp=self.params["mp"] == "tampered",
            over_epochs=self.over_epochs(),
        )


ATTACK = NoisySampleBackdoor
