"""DS, direction scoring (VFLAIR; Li et al. 2022, "Label leakage and protection in
two-party split learning"): a passive party that knows the gradient of one positive
training row scores every row by the cosine similarity of its gradient with that one.

Why it works: dL/dH_k for sample i is (p_i - onehot(y_i)) / B. In a binary task every
such vector points along (1, -1) or (-1, 1), depending on the label only, so
cos(g_i, g_+) is +1 for rows of the positive class and -1 for the others; a deeper cut
layer blurs this, but same-class gradients still point the same way. VFLAIR grants the
attacker one positive example; here the threat model grants one known row per class
(``aux_labels_per_class=1``) and the attack uses the row of class 1. Each row's gradient
is its last one, as in NS and DLI. ``rounds: first`` reads first-round gradients, as
VFLAIR does (its ``first_epoch_state``): VFLAIR picks a positive row of its first batch at
random, as if the attacker knew one there; here the attacker keeps its one known positive
row, and the round read is the first whose batch holds that row (in the first epoch).
``positive: first_batch`` is VFLAIR's grant: the known row of each class is drawn from
the first round's batch (``AttackInfo.aux_from_first_batch``), the same amount of
knowledge, about another row. Binary tasks only.
AP: AUC of the scores against the true labels of the training rows (judge.py), the
default ``score: auc``. ``score: vflair`` is the number VFLAIR reports: the accuracy of
"class 1 where the cosine is positive" (its ``DirectionbasedScoring`` returns acc and AUC,
and its ``metrics/data_process.py`` tables the acc).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from trainables.attacks.base import Attack, AttackInfo, LabelGuess, PartyView
from trainables.attacks.ns import ROUNDS, SCORE, gradients_of


class DirectionScoring(Attack):
    name = "ds"
    info = AttackInfo(
        type="LI",
        role="passive",
        training_time=False,
        binary_only=True,
        needs_messages=True,
        aux_labels_per_class=1,
    )

    defaults: ClassVar[dict[str, object]] = {"rounds": "last", "positive": "any", "score": "auc"}
    choices: ClassVar[dict[str, tuple[str, ...]]] = {
        **ROUNDS,
        **SCORE,
        "positive": ("any", "first_batch"),  # where its known rows come from: see above
    }

    def view_info(self) -> AttackInfo:
        if self.params["positive"] == "first_batch":
            return dataclasses.replace(self.info, aux_from_first_batch=True)
        return self.info

    def run(self, view: PartyView) -> LabelGuess:
        known = view.aux.label_rows[view.aux.labels == 1]  # the known positive row(s)
        holding = int(known[0]) if len(known) else None
        rows, grads = gradients_of(view, str(self.params["rounds"]), holding)  # (n,), (n, C)
        position = {r: i for i, r in enumerate(rows.tolist())}
        found = [position[r] for r in known.tolist() if r in position]
        if not found:  # no gradient of a known positive was received: no direction to use
            scores = np.zeros(len(rows))
        else:
            g_pos = grads[found[0]]  # (C,) the known positive's gradient
            norms = np.linalg.norm(grads, axis=1) * np.linalg.norm(g_pos)  # (n,)
            scores = grads @ g_pos / np.maximum(norms, np.finfo(np.float64).tiny)  # (n,) cos
        if self.params["score"] == "vflair":
            labels = (scores > 0).astype(np.int64)  # (n,) class 1 where the cosine is positive
            return LabelGuess(split="train", rows=rows, labels=labels)
        return LabelGuess(split="train", rows=rows, scores=scores)


ATTACK = DirectionScoring
