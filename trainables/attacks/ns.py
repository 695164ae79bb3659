"""NS, norm scoring (VFLAIR; Li et al. 2022, "Label leakage and protection in two-party
split learning"): a passive party scores each training row by the L2 norm of the gradient
it received for it.

Why it works: in aggVFL with softmax cross-entropy, dL/dH_k for sample i is
(p_i - onehot(y_i)) / B, whose norm in the binary case is sqrt(2) (1 - p_i[y_i]) / B: the
class the model fits worse gets the larger norms. Li et al. observe that this is the
positive class of an imbalanced task; VFLAIR takes the norm as the score of class 1 as it
is, and so does this attack (no orientation is learned: the attacker has no labels).
Each row is scored with its gradient from the last epoch it was trained in, the model's
state after training (``rounds: last``, the default). ``rounds: first`` is VFLAIR's
(``NormbasedScoring`` reads its ``first_epoch_state``): only the first round's batch,
scored by the gradients of the untrained model. Binary tasks only.
AP: AUC of the scores against the true labels of the training rows (judge.py), the
default ``score: auc``. ``score: vflair`` is the number VFLAIR reports: the norms scaled
to [0, 1] by their min and max, class 1 above 0.5, and the accuracy of that in its better
orientation, max(acc, 1 - acc) (its ``NormbasedScoring`` returns acc and AUC, and its
``metrics/data_process.py`` tables max(acc, 1 - acc)). The orientation is chosen with the
truth, so this AP is never under 0.5: read it against that, not against AUC's chance.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from trainables.attacks.base import Attack, AttackInfo, LabelGuess, PartyView


def last_gradients(view: PartyView) -> tuple[np.ndarray, np.ndarray]:
    """(n,) training rows that received a gradient and (n, C) the last gradient of each."""
    latest: dict[int, np.ndarray] = {}
    for msg in view.received:  # in training order: later rounds overwrite earlier ones
        if msg.kind != "gradient" or msg.batch is None:
            continue
        grad = np.asarray(msg.payload, dtype=np.float64)  # (B, C)
        rows = view.schedule.rows(msg.batch)  # (B,)
        latest.update(zip(rows.tolist(), grad, strict=True))
    rows = np.array(sorted(latest), dtype=np.int64)  # (n,)
    if not len(rows):
        return rows, np.zeros((0, view.n_classes))
    return rows, np.stack([latest[r] for r in rows.tolist()])  # (n, C)


def first_gradients(view: PartyView, holding: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(B,) rows and (B, C) gradients of the first round (VFLAIR's ``first_epoch_state``);
    with ``holding``, of the first round whose batch holds that training row."""
    for msg in view.received:
        if msg.kind != "gradient" or msg.batch is None:
            continue
        rows = view.schedule.rows(msg.batch)  # (B,)
        if holding is None or holding in rows:
            return rows, np.asarray(msg.payload, dtype=np.float64)
    return np.zeros(0, dtype=np.int64), np.zeros((0, view.n_classes))


def gradients_of(
    view: PartyView, rounds: str, holding: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The rows and gradients an attack reads: each row's last (``rounds: last``) or the
    first round's (``first``, the first that holds ``holding``)."""
    return last_gradients(view) if rounds == "last" else first_gradients(view, holding)


# which gradients: see the module docstring
ROUNDS: dict[str, tuple[str, ...]] = {"rounds": ("last", "first")}
SCORE = {"score": ("auc", "vflair")}  # what AP is: see the module docstrings of NS and DS


def minmax(values: np.ndarray) -> np.ndarray:
    """(n,) values scaled to [0, 1] as VFLAIR's scoring attacks do (1e-16 for a flat batch)."""
    if not len(values):
        return values
    lo, hi = values.min(), values.max()
    return (values - lo + 1e-16) / (hi - lo + 1e-16)


class NormScoring(Attack):
    name = "ns"
    info = AttackInfo(
        type="LI", role="passive", training_time=False, binary_only=True, needs_messages=True
    )

    defaults: ClassVar[dict[str, object]] = {"rounds": "last", "score": "auc"}
    choices: ClassVar[dict[str, tuple[str, ...]]] = {**ROUNDS, **SCORE}

    def run(self, view: PartyView) -> LabelGuess:
        rows, grads = gradients_of(view, str(self.params["rounds"]))  # (n,), (n, C)
        scores = np.linalg.norm(grads, axis=1)  # (n,) ||g_i||_2
        if self.params["score"] == "vflair":
            labels = (minmax(scores) > 0.5).astype(np.int64)  # (n,)
            return LabelGuess(split="train", rows=rows, labels=labels, either_way=True)
        return LabelGuess(split="train", rows=rows, scores=scores)


ATTACK = NormScoring
