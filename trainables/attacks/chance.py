"""What a guess with no information scores on the same rows, and how far an AP is above it.

Why: an AP alone misleads. A label attack that names one class for every row scores the
minority share (reads as "strong protection") or the majority share (reads as "strong
attack") on the same imbalanced rows, though both know nothing; an AUC of 0.3 is as
informative as 0.7 (flip the score). So every score carries its *chance* (the best
no-information guess on the same rows), an *advantage* in [0, 1] (0: no better than
chance, 1: perfect), the advantage's test-set sampling error, and a *collapse* diagnostic
(how much of the guess is one constant answer). docs/architecture.md: "Scores against
their baseline".

Plain functions over numpy arrays (no torch): the NN judge (``judge.py``) and the tree
trials (``trainables/trees/run.py``) score by the same rules. A NaN AP (no rows to score,
or an AUC over one class) gives NaN advantage and error.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from trainables.sampling import NAN, accuracy_se, hanley_mcneil_se, wilson_se

if TYPE_CHECKING:  # the guess types live with the attack interface (which imports torch)
    from trainables.attacks.base import LabelGuess


@dataclass(frozen=True)
class Score:
    """An attack's AP beside its no-information baseline, and the MP under attack."""

    ap: float
    mp: float = NAN  # main-task performance under attack
    chance: float = NAN  # the AP a guess with no information scores on the same rows
    advantage: float = NAN  # in [0, 1]: share of the way from chance to a perfect AP
    advantage_se: float = NAN  # test-set sampling error of ``advantage`` (one SE)
    collapse: float = NAN  # in [0, 1]: 1 = the guess is one constant answer
    mp_se: float = NAN  # sampling error of ``mp`` (accuracy over the test rows)

    def ap_fields(self) -> dict[str, float]:
        """The attack record's AP columns (``Record``: ap, ap_chance, ..., ap_collapse)."""
        return {
            "ap": self.ap,
            "ap_chance": self.chance,
            "ap_advantage": self.advantage,
            "ap_advantage_se": self.advantage_se,
            "ap_collapse": self.collapse,
        }

    def without_baseline(self) -> Score:
        """This score with its baseline unknown (``AttackInfo.unattacked_baseline``: the
        baseline comes from another training, if one trains)."""
        return dataclasses.replace(self, chance=NAN, advantage=NAN, advantage_se=NAN)

    def with_mp(self, mp: float, n_test: int) -> Score:
        """This score with the MP under attack, an accuracy over ``n_test`` rows."""
        return dataclasses.replace(self, mp=mp, mp_se=accuracy_se(mp, n_test))


def mean_score(scores: Sequence[Score]) -> Score:
    """Each field's mean over ``scores`` (an attack judged on every epoch's model, as
    VFLAIR reports its backdoor trainings: ``InferenceTamper.over_epochs``)."""
    fields = [f.name for f in dataclasses.fields(Score)]
    return Score(**{f: float(np.mean([getattr(s, f) for s in scores])) for f in fields})


def gain(ap: float, chance: float) -> float:
    """(ap - chance) / (1 - chance), clipped to [0, 1]: below chance counts as no gain;
    0 when chance is already perfect (nothing left to gain)."""
    if math.isnan(ap) or math.isnan(chance):
        return NAN
    if chance >= 1.0:
        return 0.0
    return float(np.clip((ap - chance) / (1.0 - chance), 0.0, 1.0))


def paired_se(better: np.ndarray, room: np.ndarray) -> float:
    """Test-set sampling error of an advantage, mean(better) / mean(room), clipped to [0, 1].

    ``better``: (n,) per row, the guess's score minus the no-information guess's score on
    that row; ``room``: (n,) per row, what a perfect guess would gain there (1 - chance
    for accuracies). Why per row: chance and AP are measured on the same rows, so a
    resampled test set moves both together; the advantage is a ratio of two means over
    the same rows, whose error (delta method) is std(better - R·room) / (sqrt(n)·mean(room))
    with R the ratio. A constant majority guess (better = 0 everywhere) and a perfect guess
    (better = room) get error 0. The error is then scaled by Phi(mean / se of ``better``),
    the slope of E[max(0, X)] for X ~ N(mean, se): a guess far below chance stays clipped
    at advantage 0 under any resampling and gets an error near 0.
    """
    n = len(better)
    if n == 0:
        return NAN
    better = np.asarray(better, dtype=np.float64)
    room = np.asarray(room, dtype=np.float64)
    headroom = float(room.mean())
    if headroom <= 0.0:
        return 0.0  # the advantage is 0 by definition
    ratio = float(better.mean()) / headroom
    se = float((better - ratio * room).std() / math.sqrt(n)) / headroom
    spread = float(better.std() / math.sqrt(n))
    if spread == 0.0:
        return se if better.mean() > 0 else 0.0
    slope = 0.5 * (1.0 + math.erf(float(better.mean()) / spread / math.sqrt(2.0)))
    return se * slope


def top_share(values: np.ndarray) -> float:
    """Share of entries equal to the most frequent value; NaN when empty. (n,) -> float."""
    if len(values) == 0:
        return NAN
    _, counts = np.unique(np.asarray(values), return_counts=True)
    return float(counts.max() / len(values))


def accuracy_score(truth: np.ndarray, labels: np.ndarray, ap: float) -> Score:
    """Inferred labels. truth, labels: (n,). Chance: always naming the most frequent true
    class; collapse: share of rows given the most frequent predicted label."""
    n = len(truth)
    if n == 0:
        return Score(ap)
    values, counts = np.unique(truth, return_counts=True)
    chance = float(counts.max() / n)
    base = truth == values[counts.argmax()]  # (n,) the constant guess is right
    right = np.asarray(labels) == truth  # (n,)
    se = paired_se(right.astype(float) - base, 1.0 - base)
    return Score(ap, chance=chance, advantage=gain(ap, chance), advantage_se=se,
                 collapse=top_share(labels))  # fmt: skip


def auc_score(truth: np.ndarray, scores: np.ndarray, ap: float) -> Score:
    """Binary scores (AUC). truth, scores: (n,). Chance 0.5; advantage 2|AUC - 0.5| (a
    flipped score is as informative); collapse: share of rows tied at the commonest score."""
    collapse = top_share(scores)
    if math.isnan(ap):  # one class in the truth: no ranking to score
        return Score(ap, chance=0.5, collapse=collapse)
    n1 = int((np.asarray(truth) == 1).sum())
    se = 2.0 * hanley_mcneil_se(ap, n1, len(truth) - n1)
    return Score(ap, chance=0.5, advantage=min(1.0, 2.0 * abs(ap - 0.5)), advantage_se=se,
                 collapse=collapse)  # fmt: skip


def feature_score(truth: np.ndarray, guess: np.ndarray, mean: np.ndarray, ap: float) -> Score:
    """Reconstructed features, every array on the [0, 1] scale of the AP.

    truth, guess: (n, d) scaled true and guessed rows; mean: (d,) the target party's
    training column means on the same scale (clipped to [0, 1]), the guess a party with
    no information about these rows would make. Collapse: 1 - mean over columns of
    min(1, std(guess) / std(truth)), columns with no spread in the truth skipped.
    """
    n = len(truth)
    if n == 0:
        return Score(ap)
    chance = float(1.0 - np.mean((mean[None, :] - truth) ** 2))
    room = np.mean((mean[None, :] - truth) ** 2, axis=1)  # (n,) the mean guess's error
    se = paired_se(room - np.mean((guess - truth) ** 2, axis=1), room)
    true_sd, guess_sd = truth.std(axis=0), guess.std(axis=0)  # (d,)
    spread = true_sd > 0
    ratio = np.minimum(1.0, guess_sd[spread] / true_sd[spread])
    collapse = float(1.0 - ratio.mean()) if spread.any() else NAN
    return Score(ap, chance=chance, advantage=gain(ap, chance), advantage_se=se,
                 collapse=collapse)  # fmt: skip


def at_least_wilson(se: float, hits: int, n: int) -> float:
    """A tamper score's error, no smaller than that of its rate of ``hits`` in ``n`` rows
    (``wilson_se``). Why: a backdoor or noise attack is scored on VFLAIR's 1 % of the test
    rows, 3 or 4 on digits, and when all of them agree the delta method's error is 0 (LRB:
    0 of 3 rows sent to the target read "advantage 0 ± 0", while the same attack sends
    ~25 % of all rows there). Unlike a constant label guess, whose advantage is 0 on any
    resampled test set, a tamper's effect on rows not drawn is unknown."""
    floor = wilson_se(hits, n)
    return se if math.isnan(floor) else max(se, floor)


def targeted_score(clean: np.ndarray, tampered: np.ndarray, target: int, ap: float) -> Score:
    """Targeted backdoor on the scored rows (not of the target class). clean, tampered:
    (n,) predictions without and with the trigger. Chance: the share the untampered model
    already sends to the target; the error at least ``wilson_se`` of the rows the trigger
    sent there, of those it could (``at_least_wilson``)."""
    n = len(tampered)
    if n == 0:
        return Score(ap)
    chance = float((clean == target).mean())
    base = (clean == target).astype(float)  # (n,)
    se = paired_se((tampered == target) - base, 1.0 - base)
    room = base == 0  # (n,) rows the trigger could still send to the target
    se = at_least_wilson(se, int((tampered[room] == target).sum()), int(room.sum()))
    return Score(ap, chance=chance, advantage=gain(ap, chance), advantage_se=se,
                 collapse=top_share(tampered))  # fmt: skip


def untargeted_score(
    clean: np.ndarray, tampered: np.ndarray, truth: np.ndarray, clean_mp: float, ap: float
) -> Score:
    """Non-targeted attack (VFLAIR Eq. 7: AP = max(0, clean_mp - hit_t)) on the attacked
    rows. clean, tampered, truth: (n,). Chance: the AP with no tampering,
    max(0, clean_mp - hit_0); advantage: the share of the rows' correct clean predictions
    that tampering turned wrong, (hit_0 - hit_t) / hit_0; its error at least ``wilson_se``
    of that share (``at_least_wilson``)."""
    n = len(tampered)
    if n == 0:
        return Score(ap)
    hit_0 = float((clean == truth).mean())
    hit_t = float((tampered == truth).mean())
    advantage = 0.0 if hit_0 <= 0.0 else float(np.clip((hit_0 - hit_t) / hit_0, 0.0, 1.0))
    right = (clean == truth).astype(float)  # (n,)
    se = paired_se(right - (tampered == truth), right)
    turned = int(((clean == truth) & (tampered != truth)).sum())  # correct rows made wrong
    se = at_least_wilson(se, turned, int(right.sum()))
    return Score(ap, chance=max(0.0, clean_mp - hit_0), advantage=advantage, advantage_se=se,
                 collapse=top_share(tampered))  # fmt: skip


def oriented(guess: LabelGuess, truth: np.ndarray) -> LabelGuess:
    """An ``either_way`` guess of binary labels, flipped where that is right more often
    (VFLAIR reports NS as max(acc, 1 - acc)); any other guess as it is."""
    if not guess.either_way or guess.labels is None or not len(truth):
        return guess
    labels = np.asarray(guess.labels)
    if (labels == truth).mean() >= 0.5:
        return guess
    return dataclasses.replace(guess, labels=1 - labels)


def label_ap(guess: LabelGuess, y_train: np.ndarray, y_test: np.ndarray) -> float:
    """VFLAIR's label-inference AP: accuracy of inferred labels (AUC for binary scores).

    A function, not only a ``Judge`` method, so that trials without NN parties (tree VFL)
    score label guesses by the same rule.
    """
    truth = (y_train if guess.split == "train" else y_test)[guess.rows]
    guess = oriented(guess, truth)
    if guess.scores is not None:
        if len(np.unique(truth)) < 2:
            return NAN
        from sklearn.metrics import roc_auc_score  # lazy: worker start-up

        return float(roc_auc_score(truth, guess.scores))
    assert guess.labels is not None, "a LabelGuess needs labels or scores"
    return float((np.asarray(guess.labels) == truth).mean()) if len(truth) else NAN


def score_labels(guess: LabelGuess, y_train: np.ndarray, y_test: np.ndarray) -> Score:
    """A label guess's AP (``label_ap``) with its baseline, advantage, error and collapse;
    ``mp`` is left NaN (the caller knows the main task)."""
    truth = (y_train if guess.split == "train" else y_test)[guess.rows]
    ap = label_ap(guess, y_train, y_test)
    guess = oriented(guess, truth)
    if guess.scores is not None:
        return auc_score(truth, np.asarray(guess.scores), ap)
    assert guess.labels is not None, "a LabelGuess needs labels or scores"
    return accuracy_score(truth, np.asarray(guess.labels), ap)
