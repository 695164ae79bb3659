"""Adaptive attacks: an attacker tunes its own settings on its own data before the judge
scores it once (issue 43, "worst-case leakage").

A defense scored against an attack at fixed settings is scored against one effort, not
the attacker's best; security evaluations elsewhere require adaptive attacks for that
reason. Here the attacker may tune the parameters its attack declares in ``search``
(learning rate, epochs, temperature, ...: what it controls; never the ground truth, never
the defense's randomness), with a budget fixed by the space (``Adapt``: trials, sampler,
the share of its auxiliary rows it holds out) and recorded.

The threat model holds because the tuner sees only the attacker's ``PartyView``: it splits
the auxiliary knowledge the view already carries (labelled rows, or a peer's feature rows)
into rows it fits on and rows it scores itself on (``holdout``), with the judge's own rules
(``chance.py``: advantage over the no-information guess on the same rows). The judge's test
rows are not in the tuning view at all: a label attack labels the held-out auxiliary rows
in their place. Only the chosen setting, run on the full view, reaches the judge.

Attacks without auxiliary ground truth of what they guess (BLI, GRN, NS, ...) cannot score
themselves and have an empty ``search``. Training-time attacks (LRB, AMC) need a training
per trial setting: ``tuning_trained.py`` trains them as one stack and chooses by the same
folds and rule (``folds_of``, ``choose``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainables.attacks import chance
from trainables.attacks.base import (
    Attack,
    AttackInfo,
    FeatureGuess,
    Guess,
    LabelGuess,
    PartyView,
)
from trainables.errors import ConfigError

ADAPT_KEY = "adapt"  # the key an attack spec's params carry the budget under
SAMPLERS = ("tpe", "random")


METHODS = ("cv", "holdout")
MAX_FOLDS = 5


@dataclass(frozen=True)
class Adapt:
    """The attacker's tuning budget: ``trials`` settings tried (the default is the first),
    proposed by ``sampler``, each scored by ``method``: ``cv`` (default), k-fold cross
    validation over its auxiliary rows (``folds``; 0: as many as give every fold
    ``min_rows`` held-out rows, 2 to 5), or ``holdout``, one split at ``holdout`` of them.
    Either way no fold holds out fewer than ``min_rows``: below that the attack is
    recorded as not tuned, with the reason, never chosen on 4 rows."""

    trials: int = 16
    sampler: str = "tpe"
    holdout: float = 0.5
    method: str = "cv"
    folds: int = 0
    min_rows: int = 10

    def as_params(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def split_adapt(params: dict[str, Any]) -> tuple[dict[str, Any], Adapt | None]:
    """An attack spec's params without the tuning budget, and the budget (None: fixed)."""
    if ADAPT_KEY not in params:
        return params, None
    rest = {k: v for k, v in params.items() if k != ADAPT_KEY}
    return rest, Adapt(**params[ADAPT_KEY])


def runs(params: dict[str, Any]) -> int:
    """How many runs of the attack an evaluation with ``params`` costs, at most: the
    default, one per tuning trial and fold (each no dearer than the default: ``search``)
    and the chosen setting. What the planner's estimate multiplies an evaluation's cost by."""
    _, adapt = split_adapt(params)
    if adapt is None:
        return 1
    return int(adapt.trials) * fold_count(adapt) + 2


def fold_count(adapt: Adapt) -> int:
    """How many folds ``adapt`` scores each setting on, at most (``folds_of`` may make
    fewer where the rows are few): 1 for a holdout, else ``folds`` (``MAX_FOLDS``: auto)."""
    return 1 if adapt.method == "holdout" else (adapt.folds or MAX_FOLDS)


def without_adapt(
    attacks: Iterable[tuple[str, dict[str, Any]]],
) -> list[tuple[str, dict[str, Any]]]:
    """Attack specs with their tuning budgets left out (a probe times one run)."""
    return [(name, split_adapt(params)[0]) for name, params in attacks]


def check_adapt(cls: type[Attack], adapt: Adapt) -> None:
    """A ConfigError naming what cannot be tuned, and why."""
    where = f"attack {cls.name!r}: adapt"
    if cls.info.training_time and adapt.sampler != "random":
        raise ConfigError(
            f"{where}.sampler: {adapt.sampler!r}; {cls.name} is a training-time attack: its "
            f"{adapt.trials} trial settings each need a training, and they train at once as "
            "one stack (``tuning_trained``), so no sampler can learn from the first; "
            "allowed: random"
        )
    if not cls.search:
        raise ConfigError(
            f"{where}: {cls.name} declares no tunable parameters (it holds no auxiliary "
            "ground truth to score itself on); tunable: " + ", ".join(n for n in _tunable_names())
        )
    if not isinstance(adapt.trials, int) or adapt.trials < 1:
        raise ConfigError(f"{where}.trials: {adapt.trials!r}; allowed: an integer >= 1")
    if adapt.sampler not in SAMPLERS:
        raise ConfigError(f"{where}.sampler: {adapt.sampler!r}; allowed: {', '.join(SAMPLERS)}")
    if not 0.0 < float(adapt.holdout) < 1.0:
        raise ConfigError(f"{where}.holdout: {adapt.holdout!r}; allowed: 0 < holdout < 1")
    if adapt.method not in METHODS:
        raise ConfigError(f"{where}.method: {adapt.method!r}; allowed: {', '.join(METHODS)}")
    if not isinstance(adapt.folds, int) or adapt.folds == 1 or not 0 <= adapt.folds <= 20:
        raise ConfigError(f"{where}.folds: {adapt.folds!r}; allowed: 0 (auto) or 2 to 20")
    if not isinstance(adapt.min_rows, int) or adapt.min_rows < 1:
        raise ConfigError(f"{where}.min_rows: {adapt.min_rows!r}; allowed: an integer >= 1")


def _tunable_names() -> list[str]:
    from trainables.attacks.base import ATTACKS

    return [n for n in ATTACKS.names() if ATTACKS.get(n).search]


# -- the attacker's own score: held-out auxiliary rows ------------------------------------
SelfScore = Callable[[Guess], float]
Fold = tuple[PartyView, SelfScore, int]  # the view, how it scores, its held-out rows


def _held_out(groups: np.ndarray, share: float, seed: int) -> np.ndarray:
    """A mask over ``groups`` (n,): per group, round(share * size) members held out, at
    least 1 and at most size - 1 where the group has 2 or more (stratified, seeded)."""
    rng = np.random.default_rng([seed, 4243])
    held = np.zeros(len(groups), dtype=bool)
    for g in np.unique(groups):
        members = np.flatnonzero(groups == g)
        if len(members) < 2:
            continue
        k = min(len(members) - 1, max(1, round(share * len(members))))
        held[rng.choice(members, size=k, replace=False)] = True
    return held


def holdout_view(
    view: PartyView, info: AttackInfo, share: float
) -> tuple[PartyView, SelfScore, int]:
    """``masked_view`` of one stratified split holding out ``share`` of the aux rows."""
    held = _held_out(aux_groups(view, info), share, view.seed)
    return masked_view(view, info, held)


def aux_groups(view: PartyView, info: AttackInfo) -> np.ndarray:
    """What folds stratify the attacker's auxiliary rows by: their labels (label
    knowledge), else one group (peer feature rows); ConfigError without either."""
    aux = view.aux
    if info.aux_labels_per_class or info.aux_labels_total:
        return np.asarray(aux.labels)
    if info.aux_feature_fraction and aux.peer_features is not None:
        return np.zeros(len(aux.feature_rows), dtype=np.int64)
    raise ConfigError(f"adapt: the attacker holds no auxiliary ground truth ({info})")


def fold_masks(groups: np.ndarray, k: int, seed: int) -> list[np.ndarray]:
    """``k`` disjoint masks over ``groups`` (n,) covering every row: each group's members
    shuffled (seeded) and dealt round-robin, the deal going on across groups, so every
    fold holds about n / k rows and each class in proportion."""
    rng = np.random.default_rng([seed, 4244])
    fold = np.empty(len(groups), dtype=np.int64)
    dealt = 0
    for g in np.unique(groups):
        members = rng.permutation(np.flatnonzero(groups == g))
        fold[members] = (np.arange(len(members)) + dealt) % k
        dealt += len(members)
    return [fold == f for f in range(k)]


def masked_view(
    view: PartyView, info: AttackInfo, held: np.ndarray
) -> tuple[PartyView, SelfScore, int]:
    """The view the tuner runs the attack on, how the attacker scores a guess there, and
    on how many held-out rows.

    Label knowledge (``aux.label_rows``): the held-out labelled rows are taken out of the
    aux and become the view's "test" rows (``X_test`` := their own features), so a guess
    of test labels is a guess of theirs; the judge's test rows are not in the view.
    Feature knowledge (``aux.feature_rows``): the held-out rows' peer features are taken
    out; a guess of training rows is scored on them, columns scaled by the aux rows' range
    (the attacker does not know the peer's). Both return the advantage over chance.
    """
    aux = view.aux
    if info.aux_labels_per_class or info.aux_labels_total:
        if not held.any():
            raise ConfigError("adapt: too few labelled auxiliary rows to hold any out")
        rows, labels = aux.label_rows[held], aux.labels[held]  # (m,), (m,)
        kept = dataclasses.replace(aux, label_rows=aux.label_rows[~held], labels=aux.labels[~held])
        tuning = dataclasses.replace(view, aux=kept, X_test=view.X_train[rows].copy())

        def score_labels(guess: Guess) -> float:
            assert isinstance(guess, LabelGuess) and guess.split == "test"
            return chance.score_labels(guess, np.zeros(0, dtype=np.int64), labels).advantage

        return tuning, score_labels, int(held.sum())
    if info.aux_feature_fraction and aux.peer_features is not None:
        if not held.any():
            raise ConfigError("adapt: too few auxiliary feature rows to hold any out")
        peer = np.asarray(aux.peer_features, dtype=np.float64)  # (m, d)
        lo, hi = peer.min(axis=0), peer.max(axis=0)
        span = np.where(hi > lo, hi - lo, 1.0)
        truth_of = dict(zip(aux.feature_rows[held].tolist(), (peer[held] - lo) / span, strict=True))
        mean = np.clip((peer[~held].mean(axis=0) - lo) / span, 0.0, 1.0)  # (d,)
        kept = dataclasses.replace(
            aux, feature_rows=aux.feature_rows[~held], peer_features=aux.peer_features[~held]
        )
        tuning = dataclasses.replace(view, aux=kept, X_test=view.X_test[:0].copy())

        def score_features(guess: Guess) -> float:
            assert isinstance(guess, FeatureGuess) and guess.split == "train"
            pick = np.isin(guess.rows, list(truth_of))
            truth = np.stack([truth_of[r] for r in guess.rows[pick].tolist()])  # (m_held, d)
            est = np.clip((np.asarray(guess.X, dtype=np.float64)[pick] - lo) / span, 0.0, 1.0)
            ap = float(1.0 - np.mean((est - truth) ** 2))
            return chance.feature_score(truth, est, mean, ap).advantage

        return tuning, score_features, int(held.sum())
    raise ConfigError(f"adapt: the attacker holds no auxiliary ground truth ({info})")


# -- the tuner ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Tuned:
    """What the tuning found: the best setting (only tuned keys; empty when the default
    was kept) and what it cost, with every fold's score of the default and of the best."""

    best: dict[str, Any]
    self_default: float  # the attacker's own score of the default (mean over its folds)
    self_best: float
    trials: int
    held_out: int  # the fewest held-out auxiliary rows any score was made on (per fold)
    seconds: float
    folds: int = 1
    fold_default: tuple[float, ...] = ()
    fold_best: tuple[float, ...] = ()
    noise: float = 0.0  # the gain the choice had to beat (``choose``)
    kept: str = ""  # why the default was kept, or why nothing was tuned

    def record(self, adapt: Adapt) -> dict[str, object]:
        """The adapted record's ``extra.adapted``: budget, choice and its own scores."""
        return {
            **adapt.as_params(),
            "held_out_rows": self.held_out,
            "best": self.best,
            "self_default": _rounded(self.self_default),
            "self_best": _rounded(self.self_best),
            "trials_run": self.trials,
            "tuning_seconds": round(self.seconds, 3),
            "folds": self.folds,
            "fold_scores_default": [round(v, 6) for v in self.fold_default],
            "fold_scores_best": [round(v, 6) for v in self.fold_best],
            "gain_noise": round(self.noise, 6),
            "default_kept": bool(not self.best),
            "why_default": self.kept,
        }


def _rounded(value: float) -> float | None:
    return None if np.isnan(value) else round(value, 6)  # JSON has no NaN


def plan_folds(view: PartyView, info: AttackInfo, adapt: Adapt) -> tuple[list[np.ndarray], str]:
    """The held-out masks the attacker scores on (one for ``holdout``, k for ``cv``), or
    none and why: every mask must hold out at least ``adapt.min_rows`` rows."""
    return folds_of(aux_groups(view, info), adapt, view.seed)


def folds_of(groups: np.ndarray, adapt: Adapt, seed: int) -> tuple[list[np.ndarray], str]:
    """``plan_folds`` over rows stratified by ``groups`` (n,): the attacker's auxiliary rows,
    or the rows a training-time attacker scores its trainings on (``tuning_trained``)."""
    n = len(groups)
    if adapt.method == "holdout":
        held = _held_out(groups, float(adapt.holdout), seed)
        if held.sum() < adapt.min_rows:
            return [], (f"not tuned: {int(held.sum())} held-out auxiliary rows of {n}, fewer "
                        f"than min_rows={adapt.min_rows}")  # fmt: skip
        return [held], ""
    k = adapt.folds or min(MAX_FOLDS, n // max(1, adapt.min_rows))
    masks = fold_masks(groups, k, seed) if k >= 2 else []
    smallest = min((int(m.sum()) for m in masks), default=0)
    if k < 2 or smallest < adapt.min_rows:
        return [], (f"not tuned: {n} auxiliary rows cannot give {max(k, 2)} folds of at least "
                    f"min_rows={adapt.min_rows} held-out rows each")  # fmt: skip
    return masks, ""


def choose(default: np.ndarray, best: np.ndarray, method: str) -> tuple[bool, float, str]:
    """Whether the best setting replaces the default, the gain it had to beat, and why not.
    The rule: the mean paired gain over the folds must exceed its own fold-to-fold noise,
    t(0.95, k-1) · sd(gain) / √k (a one-sided paired t test at 5 %); with one holdout
    there is no noise to measure, and any gain above 0 counts."""
    gain = best - default  # (k,)
    mean = float(gain.mean())
    if method == "holdout" or len(gain) < 2:
        noise = 0.0
    else:
        from scipy.special import stdtrit

        noise = float(stdtrit(len(gain) - 1, 0.95) * gain.std(ddof=1) / np.sqrt(len(gain)))
    if mean > noise and mean > 0:
        return True, noise, ""
    why = f"gain {mean:+.4f} over {len(gain)} fold(s) not above its noise {noise:.4f}"
    return False, noise, why if mean > 0 else "no setting scored above the default"


def fold_scores(attack: Attack, folds: Sequence[Fold]) -> np.ndarray:
    """(k,) ``attack``'s score on each fold's held-out rows, run on that fold's view (its
    held-out labels masked); no score (NaN) counts as the worst, -1. The k runs are one
    ``run_many``: an attack whose arithmetic stacks (model completion) trains the k folds'
    models as one, each the model it trains alone."""
    guesses = attack.run_many([tuning for tuning, _, _ in folds])
    values = [score(guess) for (_, score, _), guess in zip(folds, guesses, strict=True)]
    return np.array([-1.0 if np.isnan(v) else float(v) for v in values])


def tune(attack: Attack, view: PartyView, adapt: Adapt) -> Tuned:
    """Tune ``attack``'s ``search`` parameters on ``view`` (the attacker's own) and return
    the best setting. Trial 1 is the attack's own setting, the other ``trials - 1`` are
    proposed by the sampler, each scored on every fold (``plan_folds``) by its mean; the
    best replaces the default only by ``choose``'s rule, so the adapted attack is never a
    blind change, and never a choice made on fewer than ``min_rows`` held-out rows."""
    import optuna

    cls = type(attack)
    start = time.perf_counter()
    masks, why = plan_folds(view, cls.info, adapt)
    if not masks:
        return Tuned({}, float("nan"), float("nan"), 0, 0, time.perf_counter() - start, 0, kept=why)
    folds = [masked_view(view, cls.info, m) for m in masks]
    base = dict(attack.params)

    def scored(params: dict[str, Any]) -> np.ndarray:
        return fold_scores(cls(**params), folds)

    default = scored(base)
    best_scores, best = default, base
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = (
        optuna.samplers.TPESampler(seed=view.seed)
        if adapt.sampler == "tpe"
        else optuna.samplers.RandomSampler(seed=view.seed)
    )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for _ in range(int(adapt.trials) - 1):
        trial = study.ask()
        params = {**base, **{name: span.suggest(trial, name) for name, span in cls.search.items()}}
        values = scored(params)
        study.tell(trial, float(values.mean()))
        if values.mean() > best_scores.mean():
            best_scores, best = values, params
    replace, noise, kept = choose(default, best_scores, adapt.method)
    changed = {k: v for k, v in sorted(best.items()) if v != base[k]} if replace else {}
    held = min(n for _, _, n in folds)
    return Tuned(
        changed, float(default.mean()), float(best_scores.mean()), int(adapt.trials), held,
        time.perf_counter() - start, len(folds), tuple(default.tolist()),
        tuple(best_scores.tolist()), noise, kept,
    )  # fmt: skip
