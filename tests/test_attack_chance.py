"""Every score beside its no-information baseline (``trainables/attacks/chance.py``).

Guesses that know nothing (one class for every row, constant scores, column means, a
tamper that changes nothing) must get advantage 0 whatever their raw AP; a flipped AUC
is worth its mirror; perfect guesses get advantage 1. The label, feature and tamper
cases go through the real ``Judge`` of a small real training.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from trainables.attacks.base import FeatureGuess, InferenceTamper, LabelGuess
from trainables.attacks.chance import (
    hanley_mcneil_se,
    score_labels,
    targeted_score,
    untargeted_score,
)
from trainables.attacks.judge import Judge
from trainables.data import load_dataset
from trainables.sampling import wilson_se
from trainables.spec import TrialSpec
from trainables.trial import prepare_parties, train_local_parties


def _trained(dataset: str, epochs: int) -> list[Any]:
    spec = TrialSpec.build(dataset=dataset, epochs=epochs, seed=0)
    prepared = prepare_parties(spec, load_dataset(dataset))
    return train_local_parties(prepared, epochs)[1]


@pytest.fixture(scope="module")
def cancer() -> list[Any]:
    """2-party aggVFL on breast_cancer (imbalanced: ~63% class 1), one epoch."""
    return _trained("breast_cancer", 1)


@pytest.fixture(scope="module")
def digits() -> list[Any]:
    """2-party aggVFL on digits (10 classes), two epochs: predictions vary by row."""
    return _trained("digits", 2)


def test_one_class_for_every_row_is_no_advantage_whichever_class(cancer: list[Any]) -> None:
    judge = Judge(cancer)
    y = judge.y_train
    rows = np.arange(len(y))
    counts = np.bincount(y)
    minority, majority = int(counts.argmin()), int(counts.argmax())
    share = counts.max() / len(y)
    assert share > 0.55  # the case that misled: an imbalanced truth
    scores = {}
    for cls in (minority, majority):
        guess = LabelGuess("train", rows, labels=np.full(len(y), cls))
        scores[cls] = judge.score(guess, attacker=0)
    assert scores[minority].ap == pytest.approx(1 - share)  # raw APs far apart...
    assert scores[majority].ap == pytest.approx(share)
    for s in scores.values():  # ...the same nothing against the baseline
        assert s.chance == pytest.approx(share)
        assert s.advantage == 0.0
        assert s.collapse == 1.0
        assert s.mp == judge.clean_mp
        assert s.mp_se == pytest.approx(math.sqrt(s.mp * (1 - s.mp) / len(judge.y_test)))
    perfect = judge.score(LabelGuess("train", rows, labels=y.copy()), attacker=0)
    assert perfect.ap == 1.0 and perfect.advantage == 1.0
    assert perfect.collapse == pytest.approx(share)  # as spread as the truth itself
    assert perfect.advantage_se == 0.0


def test_halfway_accuracy_is_half_the_headroom() -> None:
    truth = np.array([0] * 8 + [1] * 2)  # chance 0.8
    labels = truth.copy()
    labels[:1] = 1  # 9 of 10 right
    s = score_labels(LabelGuess("test", np.arange(10), labels=labels), truth, truth)
    assert s.ap == pytest.approx(0.9) and s.chance == pytest.approx(0.8)
    assert s.advantage == pytest.approx(0.5)
    # by hand: per row, right minus the majority guess's right: better = [-1, 0 x 7, 1, 1];
    # room = [0 x 8, 1, 1]; R = 0.1 / 0.2; u = better - R room = [-1, 0 x 7, .5, .5]
    se_ratio = math.sqrt((1 + 0.25 + 0.25) / 10) / math.sqrt(10) / 0.2
    spread = math.sqrt(0.3 - 0.1**2) / math.sqrt(10)  # of ``better``
    slope = 0.5 * (1 + math.erf(0.1 / spread / math.sqrt(2)))  # the clip at 0
    assert s.advantage_se == pytest.approx(se_ratio * slope)
    assert s.collapse == pytest.approx(0.7)


def _auc_case() -> tuple[np.ndarray, np.ndarray]:
    """One positive above 3 of 10 negatives: AUC exactly 0.3."""
    truth = np.array([1] + [0] * 10)
    scores = np.array([2.5, *range(10)], dtype=float)  # above 0, 1, 2
    return truth, scores


def test_auc_below_chance_is_worth_its_mirror() -> None:
    truth, scores = _auc_case()
    rows = np.arange(len(truth))
    low = score_labels(LabelGuess("train", rows, scores=scores), truth, truth)
    high = score_labels(LabelGuess("train", rows, scores=-scores), truth, truth)
    assert roc_auc_score(truth, scores) == pytest.approx(0.3)
    assert low.ap == pytest.approx(0.3) and high.ap == pytest.approx(0.7)
    assert low.chance == high.chance == 0.5
    assert low.advantage == pytest.approx(0.4) and high.advantage == pytest.approx(0.4)
    assert low.advantage_se == pytest.approx(high.advantage_se) and low.advantage_se > 0
    assert low.collapse == pytest.approx(1 / 11)  # no ties


def test_constant_scores_are_no_advantage_and_fully_collapsed() -> None:
    truth, _ = _auc_case()
    guess = LabelGuess("train", np.arange(len(truth)), scores=np.full(len(truth), 0.7))
    s = score_labels(guess, truth, truth)
    assert s.ap == 0.5 and s.advantage == 0.0 and s.collapse == 1.0


def test_auc_over_one_class_keeps_chance_and_leaves_advantage_unknown() -> None:
    truth = np.ones(5, dtype=np.int64)
    s = score_labels(LabelGuess("train", np.arange(5), scores=np.arange(5.0)), truth, truth)
    assert math.isnan(s.ap) and s.chance == 0.5
    assert math.isnan(s.advantage) and math.isnan(s.advantage_se)


def test_hanley_mcneil_by_hand() -> None:
    # A = 5/6, n1 = 2, n0 = 3: Q1 = A/(2-A) = 5/7, Q2 = 2A^2/(1+A) = 25/33,
    # se^2 = (5/36 + (5/7 - 25/36) + 2 (25/33 - 25/36)) / 6 = 395/8316
    expected = math.sqrt(395 / 8316)  # 0.21794...
    assert hanley_mcneil_se(5 / 6, 2, 3) == pytest.approx(expected, rel=1e-12)
    assert hanley_mcneil_se(1 / 6, 2, 3) == pytest.approx(expected, rel=1e-12)  # mirror
    truth = np.array([1, 1, 0, 0, 0])
    scores = np.array([0.9, 0.5, 0.6, 0.2, 0.1])  # 5 of 6 pairs ordered: AUC 5/6
    s = score_labels(LabelGuess("train", np.arange(5), scores=scores), truth, truth)
    assert s.ap == pytest.approx(5 / 6)
    assert s.advantage == pytest.approx(2 / 3)
    assert s.advantage_se == pytest.approx(2 * expected, rel=1e-12)


@pytest.mark.parametrize("split", ["train", "test"])
def test_feature_mean_guess_is_no_advantage_and_exact_is_full(
    digits: list[Any], split: str
) -> None:
    judge = Judge(digits)
    X_train = digits[0].X_train.cpu().numpy().astype(np.float64)  # (n_train, d_0)
    X = X_train if split == "train" else digits[0].X_test.cpu().numpy()
    rows = np.arange(len(X))
    means = np.tile(X_train.mean(axis=0), (len(X), 1))  # what a party with no information guesses
    mean = judge.score(FeatureGuess(0, split, rows, means), attacker=1)  # type: ignore[arg-type]
    assert mean.ap == pytest.approx(mean.chance, abs=1e-12)
    assert mean.advantage == pytest.approx(0.0, abs=1e-9)
    assert mean.collapse == pytest.approx(1.0)  # one constant row
    exact = judge.score(FeatureGuess(0, split, rows, X.copy()), attacker=1)  # type: ignore[arg-type]
    assert exact.ap == pytest.approx(1.0) and exact.advantage == pytest.approx(1.0)
    assert exact.collapse == pytest.approx(0.0, abs=1e-4)  # float32 truth, float64 guess
    assert exact.advantage_se == pytest.approx(0.0, abs=1e-9)
    assert 0.0 < exact.chance < 1.0


def test_tamper_that_changes_nothing_is_no_advantage(digits: list[Any]) -> None:
    judge = Judge(digits)
    X_test = digits[0].X_test.cpu().numpy().copy()  # the attacker's own inputs, unchanged
    rows = np.arange(len(X_test))
    for target in (3, None):
        s = judge.score(InferenceTamper(rows, X_test=X_test, target=target), attacker=0)
        assert s.ap == pytest.approx(s.chance), target  # AP reads what no tampering reads
        assert s.advantage == 0.0, target
        assert s.mp == pytest.approx(judge.clean_mp)
        assert 0.0 <= s.collapse < 0.5  # a trained model's predictions are spread
    # and the advantage can move: zeroed inputs turn correct predictions wrong
    wiped = judge.score(InferenceTamper(rows, X_test=np.zeros_like(X_test)), attacker=0)
    assert wiped.advantage > 0.1 and wiped.advantage_se > 0.0
    assert wiped.mp < judge.clean_mp


def test_wilson_interval_by_hand() -> None:
    """0 of 3: Wilson's 95 % interval is [0, 0.5615] (z = 1.96); its centre plus z SEs
    reaches that bound. 0 of 1,000 rows: ~1 / n."""
    z, n = 1.96, 3
    centre = (z * z / 2) / (n + z * z)
    assert centre + z * wilson_se(0, n) == pytest.approx(0.5615, abs=5e-4)
    assert wilson_se(0, 1000) == pytest.approx(0.00098, abs=2e-5)
    assert wilson_se(1, 2) == pytest.approx(wilson_se(1, 2))  # symmetric at p = 1/2
    assert math.isnan(wilson_se(0, 0))


@pytest.mark.parametrize("n", [3, 4])
def test_tamper_on_a_few_rows_is_never_exact(n: int) -> None:
    """VFLAIR's 1 % of digits' test rows is 3 or 4. When none (or all) of them go the
    attack's way, the delta method alone says advantage 0 (or 1) with error 0; the error
    must still say how little n rows tell (LRB on digits: 0 of 3 here, ~25 % of all
    rows)."""
    clean = np.full(n, 2)
    for tampered, advantage in ((np.full(n, 2), 0.0), (np.full(n, 0), 1.0)):
        ap = float((tampered == 0).mean())
        s = targeted_score(clean, tampered, target=0, ap=ap)
        assert s.advantage == advantage
        assert s.advantage_se > 0.1, (advantage, s.advantage_se)
    truth = np.full(n, 2)  # every clean prediction right; noise turns none (or all) wrong
    for tampered, advantage in ((np.full(n, 2), 0.0), (np.full(n, 5), 1.0)):
        s = untargeted_score(clean, tampered, truth, clean_mp=1.0, ap=0.0)
        assert s.advantage == advantage
        assert s.advantage_se > 0.1, (advantage, s.advantage_se)


def test_tamper_on_many_rows_keeps_a_small_error() -> None:
    """The floor shrinks as 1 / n at the edges: 0 of 1,000 rows is a small error, and an
    interior rate keeps the delta method's (binomial) error."""
    clean = np.full(1000, 2)
    s = targeted_score(clean, np.full(1000, 2), target=0, ap=0.0)
    assert 0.0 < s.advantage_se < 0.002
    tampered = np.where(np.arange(1000) < 300, 0, 2)  # 30 % sent to the target
    s = targeted_score(clean, tampered, target=0, ap=0.3)
    assert s.advantage_se == pytest.approx(math.sqrt(0.3 * 0.7 / 1000), rel=0.02)
