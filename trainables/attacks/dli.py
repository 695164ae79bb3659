"""DLI, direct label inference (VFLAIR; Li et al. 2022): a passive party reads labels off
the per-sample gradients it receives.

With softmax cross-entropy over aggregated logits, dL/dH_k for sample i is
(p_i - onehot(y_i)) / B: the only negative element sits at the true label. The attacker
takes, for every training row, the argmin of its last received gradient row.
AP: accuracy of the inferred labels over the training rows.
"""

from __future__ import annotations

import numpy as np

from trainables.attacks.base import Attack, AttackInfo, LabelGuess, PartyView


class DirectLabelInference(Attack):
    name = "dli"
    info = AttackInfo(
        type="LI", role="passive", training_time=False, needs_messages=True, logit_embeddings=True
    )

    def run(self, view: PartyView) -> LabelGuess:
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


ATTACK = DirectLabelInference
