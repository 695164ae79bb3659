"""Feature splits by party importance and inter-party correlation (VertiBench, ICLR 2024).

Why: every VFLAIR number uses one split of the columns, but real vertical datasets differ
mainly in how much of the signal each party holds (*importance*, Dirichlet α) and how
strongly the parties' features correlate (*correlation*, β in [0, 1]); VertiBench showed
algorithm rankings move with both. Here the split is the ``vertibench`` package's own
splitters, seeded per trial, and the record carries what the split measured (VertiBench's
evaluators), so leakage can be plotted against the measured value, not only the knob.

Units of the split are the dataset's *fields* (``Dataset.feature_groups``): a one-hot
group is never cut between parties, as in the ``blocks`` scheme. For the correlation
splitter a one-hot field is represented by its category index.

Slow parts are computed once per machine and kept in the cache folder
(``trainables/data/cache.py``): the per-field Shapley importance (an XGBoost model on the
training rows, VertiBench's permutation explainer on 1% of them) and the correlation
range (min/max Icor found by VertiBench's BRKGA search, ``n_gen`` generations).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from trainables.data.cache import cached_json
from trainables.data.dataset import Dataset
from trainables.errors import ConfigError

SCHEMES = ("importance", "correlation")
# scheme -> parameter -> (VertiBench's default, what is allowed); the first one is the
# knob a record names as split_param
PARAMS: dict[str, dict[str, tuple[float, str]]] = {
    "importance": {"alpha": (1.0, "a number > 0 (Dirichlet concentration per party)")},
    "correlation": {
        "beta": (0.5, "a number in [0, 1] (0: parties least correlated with each other, 1: most)"),
        "n_gen": (100, "an integer >= 1 (BRKGA generations of the min/max Icor search)"),
    },
}
IMPORTANCE_SAMPLE_RATE = 0.01  # VertiBench's ImportanceEvaluator default
XGB_TREES = 100  # the model whose Shapley values measure importance (xgboost's default)
_MEMO: dict[str, list[float]] = {}  # this process's copy of the cached values, by file name


@dataclass(frozen=True)
class Measured:
    """What a split measured: each party's share of the Shapley importance (sums to 1) and,
    for correlation splits, VertiBench's β of the split it produced (None otherwise)."""

    importance: tuple[float, ...]
    correlation: float | None


def check_param(scheme: str, key: str, value: object) -> float:
    """One parameter of ``scheme`` as a float; ConfigError saying what is allowed."""
    allowed = PARAMS[scheme]
    if key not in allowed:
        raise ConfigError(f"unknown for split_scheme {scheme!r}; allowed: {', '.join(allowed)}")
    rule = allowed[key][1]
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
        raise ConfigError(f"allowed: {rule}")
    bad = {
        "alpha": not value > 0,
        "beta": not 0 <= value <= 1,
        "n_gen": value != int(value) or value < 1,
    }
    if bad[key]:
        raise ConfigError(f"allowed: {rule}")
    return float(value)


def refuse_params(scheme: str, given: Mapping[str, object]) -> None:
    """A fixed scheme (``blocks``, ``auto``, ...) given ``split_params``: ConfigError saying
    which schemes take which."""
    takes = "; ".join(f"{s} ({', '.join(p)})" for s, p in PARAMS.items())
    raise ConfigError(
        f"split_params ({', '.join(sorted(given))}) given, but split_scheme {scheme!r} takes "
        f"none; allowed: split_params only with split_scheme {takes}"
    )


def params_of(scheme: str, given: Mapping[str, object]) -> dict[str, float]:
    """``given`` checked against the scheme's parameters, defaults filled; ConfigError names
    the key, the bad value and what is allowed."""
    out = {key: float(default) for key, (default, _) in PARAMS[scheme].items()}
    for key, value in given.items():
        try:
            out[key] = check_param(scheme, key, value)
        except ConfigError as err:
            raise ConfigError(f"split_params.{key}={value!r}: {err}") from None
    return out


def split(
    ds: Dataset, n_parties: int, scheme: str, given: Mapping[str, object], seed: int
) -> tuple[list[np.ndarray], Measured]:
    """Column indices per party (sorted int64, disjoint, covering all) and what they measure.

    The active party is the last one (it holds the labels), as in every other scheme.
    """
    params = params_of(scheme, given)
    fields = ds.feature_groups
    if scheme == "importance":
        parts = _importance_parts(len(fields), n_parties, params["alpha"], seed)
        beta = None
    else:
        parts, beta = _correlation_parts(ds, n_parties, params, seed)
    columns = [
        np.sort(np.asarray([c for f in p for c in fields[f]], dtype=np.int64)) for p in parts
    ]
    per_field = np.asarray(field_importance(ds))  # (n_fields,)
    shares = [float(per_field[list(p)].sum()) for p in parts]
    total = sum(shares) or 1.0
    return columns, Measured(tuple(s / total for s in shares), beta)


@contextlib.contextmanager
def _quiet_global_rng(seed: int) -> Iterator[None]:
    """VertiBench seeds and draws from numpy's global RNG; keep the caller's state intact
    (and its prints and progress bars off the sweep's output)."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        np.random.set_state(state)


def _importance_parts(n_fields: int, n_parties: int, alpha: float, seed: int) -> list[list[int]]:
    """VertiBench's ImportanceSplitter over the fields: party shares ~ Dirichlet(α, …, α),
    each field drawn to a party with those shares, every party at least one field."""
    with _quiet_global_rng(seed):
        from vertibench.Splitter import ImportanceSplitter

        splitter = ImportanceSplitter(n_parties, weights=alpha, seed=seed)
        parts = splitter.split_indices(np.zeros((1, n_fields)))
    return [sorted(int(f) for f in p) for p in parts]


def _field_matrix(ds: Dataset) -> np.ndarray:
    """(n_train, n_fields): a field's own column, or a one-hot field's category index."""
    X = ds.X_train
    cols = [
        X[:, g[0]] if len(g) == 1 else np.argmax(X[:, list(g)], axis=1).astype(np.float64)
        for g in ds.feature_groups
    ]
    return np.stack(cols, axis=1).astype(np.float64)


def _correlation_parts(
    ds: Dataset, n_parties: int, params: dict[str, float], seed: int
) -> tuple[list[list[int]], float]:
    """VertiBench's CorrelationSplitter: the field order whose Icor is closest to
    ``β·max + (1-β)·min`` (BRKGA, seeded), equal field counts per party; and the measured β
    of the split found (VertiBench's ``evaluate_beta`` on it)."""
    F = _field_matrix(ds)
    lo, hi = icor_range(ds, n_parties, int(params["n_gen"]))
    with _quiet_global_rng(seed):
        from vertibench.Evaluator import CorrelationEvaluator
        from vertibench.Splitter import CorrelationSplitter

        evaluator = CorrelationEvaluator(n_jobs=1)
        splitter = CorrelationSplitter(n_parties, evaluator=evaluator, seed=seed, n_jobs=1)
        try:
            evaluator.fit(np.array_split(F, n_parties, axis=1))
            splitter.min_icor, splitter.max_icor = lo, hi
            parts = splitter.split_indices(F, beta=params["beta"])
            evaluator.fit([F[:, p] for p in parts])
            evaluator.min_icor, evaluator.max_icor = lo, hi
            measured = float(evaluator.evaluate_beta())
        finally:
            for pool in (splitter.pool, evaluator.pool):
                pool.close()
    return [sorted(int(f) for f in p) for p in parts], measured


def _memo(name: str, compute: Callable[[], list[float]]) -> list[float]:
    """The cached value ``name``: this process's copy, else the cache file, else computed."""
    if name not in _MEMO:
        _MEMO[name] = cached_json(name, compute)
    return _MEMO[name]


def _data_key(ds: Dataset) -> str:
    h = hashlib.sha1()
    for part in (ds.name, str(ds.feature_groups), ds.X_train.tobytes(), ds.y_train.tobytes()):
        h.update(part.encode() if isinstance(part, str) else part)
    return h.hexdigest()[:16]


def _version() -> str:
    from importlib.metadata import version

    return version("vertibench")


def icor_range(ds: Dataset, n_parties: int, n_gen: int) -> tuple[float, float]:
    """VertiBench's min and max Icor over field splits into equal parts (BRKGA with its
    default population, ``n_gen`` generations, seed 0); cached per data and settings."""
    name = f"vertibench-icor-{_data_key(ds)}-{n_parties}p-{n_gen}g-{_version()}"

    def compute() -> list[float]:
        F = _field_matrix(ds)
        with _quiet_global_rng(0):
            from vertibench.Evaluator import CorrelationEvaluator

            evaluator = CorrelationEvaluator(n_jobs=1)
            try:
                evaluator.fit(np.array_split(F, n_parties, axis=1))
                evaluator.fit_min_max(n_gen=n_gen, seed=0)
            finally:
                evaluator.pool.close()
        return [float(evaluator.min_icor), float(evaluator.max_icor)]

    low, high = _memo(name, compute)
    return low, high


def field_importance(ds: Dataset) -> list[float]:
    """Each field's Shapley importance (sum over its columns): VertiBench's permutation
    explainer on ``IMPORTANCE_SAMPLE_RATE`` of the training rows (at least 2), explaining
    an XGBoost classifier fit on all of them; cached per data and settings."""
    name = (
        f"vertibench-importance-{_data_key(ds)}-xgb{XGB_TREES}-"
        f"r{IMPORTANCE_SAMPLE_RATE}-{_version()}"
    )

    def compute() -> list[float]:
        import xgboost as xgb

        X = ds.X_train.astype(np.float64)
        model = xgb.XGBClassifier(n_estimators=XGB_TREES, n_jobs=1, random_state=0)
        model.fit(X, ds.y_train)
        rate = max(IMPORTANCE_SAMPLE_RATE, 2.5 / len(X))  # VertiBench refuses <= 1 row
        with _quiet_global_rng(0):
            from vertibench.Evaluator import ImportanceEvaluator

            evaluator = ImportanceEvaluator(sample_rate=rate, seed=0)
            per_column = np.asarray(evaluator.evaluate_feature(X, model.predict_proba))
        per_column = per_column.reshape(X.shape[1], -1).sum(axis=1)  # (d,) over classes
        return [float(per_column[list(g)].sum()) for g in ds.feature_groups]

    return _memo(name, compute)
