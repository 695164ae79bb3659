"""The sampling error of a score over the test rows it was measured on: binomial for an
accuracy, Hanley-McNeil for an AUC.

Why a module of its own: a record's ``mp_se`` needs these (``records.py``), and the
records must import no torch; the attack scores (``attacks/chance.py``) use the same
rules, and the attacks package imports torch.
"""

from __future__ import annotations

import math

import numpy as np

NAN = float("nan")


def accuracy_se(acc: float, n: int) -> float:
    """Binomial SE of an accuracy over ``n`` rows: sqrt(p(1-p)/n); NaN without rows."""
    if n <= 0 or math.isnan(acc):
        return NAN
    return math.sqrt(max(0.0, acc * (1.0 - acc)) / n)


def wilson_se(hits: int, n: int, z: float = 1.96) -> float:
    """SE of a proportion of ``hits`` in ``n`` rows from Wilson's score interval (its 95 %
    half-width over z); NaN without rows.

    Why not the binomial sqrt(p(1-p)/n): at 0 or n hits it is 0, so 0 of 3 triggered rows
    would read "0, exactly". Wilson's interval for 0 of 3 reaches 0.56, an SE of 0.14; for
    0 of 1,000 its SE is 0.001, and away from 0 and n it is the binomial SE to within
    z^2 / n.
    """
    if n <= 0:
        return NAN
    p = hits / n
    return math.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / (1.0 + z * z / n)


def hanley_mcneil_se(auc: float, n1: int, n0: int) -> float:
    """Hanley & McNeil (1982) SE of an AUC over ``n1`` positives and ``n0`` negatives.

    Taken at A = max(auc, 1 - auc): an AUC below 0.5 is the mirror of its flip.
    """
    if n1 <= 0 or n0 <= 0 or math.isnan(auc):
        return NAN
    a = max(auc, 1.0 - auc)
    q1, q2 = a / (2.0 - a), 2.0 * a * a / (1.0 + a)
    var = (a * (1 - a) + (n1 - 1) * (q1 - a * a) + (n0 - 1) * (q2 - a * a)) / (n1 * n0)
    return math.sqrt(max(0.0, var))


def main_task_se(
    mp: float | None, y_test: np.ndarray | None, metric: str = "accuracy"
) -> float | None:
    """Sampling error of a clean MP over the test rows ``y_test`` (n_test,): binomial for
    an accuracy, Hanley-McNeil for an AUC; None where the MP or the rows are unknown."""
    if mp is None or y_test is None:
        return None
    if metric == "auc":
        n1 = int((np.asarray(y_test) == 1).sum())
        return hanley_mcneil_se(mp, n1, len(y_test) - n1)
    return accuracy_se(mp, len(y_test))
