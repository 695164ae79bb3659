"""DLI, direct label inference (VFLAIR; Li et al. 2022): a passive party reads labels off
the per-sample gradients it receives.

With softmax cross-entropy over aggregated logits, dL/dH_k for sample i is
(p_i - onehot(y_i)) / B: the only negative element sits at the true label. The attacker
takes, for every training row, the argmin of its last received gradient row.
AP: accuracy of the inferred labels over the training rows.

Option ``rounds``: ``last`` (default) is the above. ``first`` is VFLAIR's
(``DirectLabelScoring``): only the first round's batch (its ``first_epoch_state``), each
row's *first* negative element, a random class where none is negative; AP over that
batch. The first round's gradients carry the most signal (an untrained model's p is near
uniform, so the true class's element is about -(1 - 1/C) / B against +1 / (C B)), while
the last ones, from a trained model, are near zero: a little noise breaks the last
round's argmin long before the first round's sign. ``procedure: vflair`` sets it.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from trainables.attacks.base import Attack, AttackInfo, LabelGuess, PartyView
from trainables.attacks.ns import ROUNDS, first_gradients


class DirectLabelInference(Attack):
    name = "dli"
    info = AttackInfo(
        type="LI", role="passive", training_time=False, needs_messages=True, logit_embeddings=True
    )

    defaults: ClassVar[dict[str, object]] = {"rounds": "last"}  # or "first": see above
    choices: ClassVar[dict[str, tuple[str, ...]]] = ROUNDS

    def run(self, view: PartyView) -> LabelGuess:
        if self.params["rounds"] == "first":
            return _first_round(view)
        guessed: dict[int, int] = {}
        for msg in view.received:  # in training order: later rounds overwrite earlier ones
            if msg.kind != "gradient" or msg.batch is None:
                continue
            grad = np.asarray(msg.payload)  # (B, C)
            rows = view.schedule.rows(msg.batch)  # (B,)
            guessed.update(zip(rows.tolist(), grad.argmin(axis=1).tolist(), strict=True))
        rows = np.array(sorted(guessed), dtype=np.int64)
        labels = np.array([guessed[r] for r in rows.tolist()], dtype=np.int64)
        return LabelGuess(split="train", rows=rows, labels=labels)


def _first_round(view: PartyView) -> LabelGuess:
    """VFLAIR's DLI: the first round's rows, each labelled with the index of its first
    negative gradient element (a seeded random class where there is none)."""
    rows, grad = first_gradients(view)  # (B,), (B, C)
    negative = grad < 0.0  # (B, C)
    rng = np.random.default_rng([view.seed, 7211])
    fallback = rng.integers(0, max(grad.shape[1], 1), size=len(grad))  # (B,)
    labels = np.where(negative.any(axis=1), negative.argmax(axis=1), fallback)
    return LabelGuess(split="train", rows=rows, labels=labels.astype(np.int64))


ATTACK = DirectLabelInference
