"""VertiBench's importance and correlation splits: seeded, whole fields, measured, recorded.

Real ``vertibench`` splitters and evaluators, real xgboost and shap on small data; the
slow per-dataset measurements land in the suite's temporary cache folder (conftest).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainables.data import Dataset, columns_for
from trainables.data import vertibench_split as vs
from trainables.data.split import check_columns
from trainables.errors import ConfigError
from trainables.spec import TrialSpec
from trainables.trial import run_trial


def _dataset(n: int = 240, seed: int = 0) -> Dataset:
    """8 fields, the last a 3-column one-hot group; the label is field 0's sign, and
    fields 1-2 are near-copies of field 0 (a correlated block)."""
    rng = np.random.default_rng(seed)
    rows = 2 * n
    base = rng.normal(size=(rows, 1))
    X = np.hstack(
        [
            base,
            base + 0.05 * rng.normal(size=(rows, 2)),
            rng.normal(size=(rows, 4)),
            np.eye(3)[rng.integers(0, 3, rows)],
        ]
    ).astype(np.float32)
    y = (base[:, 0] > 0).astype(np.int64)
    groups = (*((i,) for i in range(7)), (7, 8, 9))
    return Dataset(
        "tiny_split", X[:n], y[:n], X[n:], y[n:], 2,
        tuple(f"f{i}" for i in range(10)), None, groups,
    )  # fmt: skip


def _spec(**fields: object) -> TrialSpec:
    return TrialSpec.build(dataset="breast_cancer", **fields)


def _check_partition(columns: list[np.ndarray], ds: Dataset) -> None:
    flat = np.concatenate(columns)
    assert sorted(flat.tolist()) == list(range(ds.X_train.shape[1]))  # disjoint, covering
    assert all(len(c) for c in columns)
    for group in ds.feature_groups:  # a one-hot field is never cut
        owners = {i for i, c in enumerate(columns) if set(group) & set(c.tolist())}
        assert len(owners) == 1


def test_importance_split_is_seeded_whole_fields_and_leaves_numpy_alone() -> None:
    ds = _dataset()
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    a, ma = vs.split(ds, 2, "importance", {"alpha": 0.5}, seed=4)
    assert np.array_equal(np.random.get_state()[1], before)  # caller's RNG untouched
    b, mb = vs.split(ds, 2, "importance", {"alpha": 0.5}, seed=4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)) and ma == mb
    draws = {tuple(vs.split(ds, 2, "importance", {"alpha": 0.5}, seed=s)[0][0]) for s in range(6)}
    assert len(draws) > 1  # the seed draws the split
    _check_partition(a, ds)
    assert sum(ma.importance) == pytest.approx(1.0) and ma.correlation is None


def test_small_alpha_concentrates_the_fields_on_one_party() -> None:
    ds = _dataset()

    def larger_share(alpha: float) -> float:
        sizes = [
            max(len(c) for c in vs.split(ds, 2, "importance", {"alpha": alpha}, seed=s)[0])
            for s in range(20)
        ]
        return float(np.mean(sizes)) / len(ds.feature_groups)

    assert larger_share(0.05) > larger_share(100.0) + 0.15


def test_importance_is_measured_where_the_signal_is() -> None:
    ds = _dataset()
    per_field = np.asarray(vs.field_importance(ds))
    assert per_field.shape == (8,)
    # the label is field 0's sign; 0-2 carry it, the noise fields 3-6 carry almost nothing
    assert per_field[:3].sum() > 0.8 * per_field.sum()
    columns, measured = vs.split(ds, 2, "importance", {"alpha": 1.0}, seed=0)
    holds = [set(c.tolist()) for c in columns]
    signal = [
        per_field[[f for f in range(8) if set(ds.feature_groups[f]) <= h]].sum() for h in holds
    ]
    assert measured.importance == pytest.approx(tuple(np.asarray(signal) / per_field.sum()))


def test_correlation_split_hits_its_beta_and_measures_it() -> None:
    ds = _dataset()
    low = vs.split(ds, 2, "correlation", {"beta": 0.0, "n_gen": 5}, seed=0)
    high = vs.split(ds, 2, "correlation", {"beta": 1.0, "n_gen": 5}, seed=0)
    for columns, _ in (low, high):
        _check_partition(columns, ds)
        fields = [sum(set(g) <= set(c.tolist()) for g in ds.feature_groups) for c in columns]
        assert fields == [4, 4]  # equal field counts, as VertiBench's splitter makes them
    assert low[1].correlation is not None and high[1].correlation is not None
    assert low[1].correlation < 0.25 < 0.75 < high[1].correlation


@pytest.mark.parametrize(
    ("scheme", "params", "fragment"),
    [
        ("importance", {"alpha": 0}, "split_params.alpha=0: allowed: a number > 0"),
        ("correlation", {"beta": -0.1}, "split_params.beta=-0.1: allowed: a number in [0, 1]"),
        ("correlation", {"n_gen": 2.5}, "split_params.n_gen=2.5: allowed: an integer >= 1"),
        ("correlation", {"alpha": 1}, "unknown for split_scheme 'correlation'"),
        ("blocks", {"alpha": 1}, "takes none"),
    ],
)
def test_bad_split_params_are_config_errors(scheme: str, params: dict, fragment: str) -> None:
    spec = _spec(split_scheme=scheme, split_params=params)
    with pytest.raises(ConfigError) as err:
        check_columns(spec, _dataset())
    assert fragment in str(err.value)


def test_more_parties_than_fields_is_refused_before_any_work() -> None:
    spec = _spec(split_scheme="importance", n_parties=9)
    with pytest.raises(ConfigError, match=r"n_parties=9 .* must be in \[2, 8\]"):
        check_columns(spec, _dataset())


def test_default_specs_keep_their_config_hash() -> None:
    """split_params at its default leaves the hash as before it existed (golden records
    and resumed sweeps); given, it changes it."""
    assert _spec().config_hash == "131d98546f0fc82a"  # the hash before split_params
    assert (
        _spec(split_scheme="importance").config_hash
        != _spec(split_scheme="importance", split_params={"alpha": 1.0}).config_hash
    )


def test_records_carry_the_scheme_the_knob_and_the_measured_split() -> None:
    """A real breast_cancer NN trial with an attack: every record's split columns are the
    split that ran, and the passive share is 1 minus the active (last) party's."""
    spec = _spec(epochs=2, split_scheme="importance", split_params={"alpha": 0.3}, seed=2)
    records = run_trial(spec, attacks=[("pmc", {})])
    columns = columns_for(spec, _breast_cancer())
    shares = json.loads(records[0].extra)["split_party_importance"]
    assert [r.attack for r in records] == ["none", "pmc"]
    for record in records:
        assert record.split_scheme == "importance" and record.split_param == 0.3
        assert record.split_importance == pytest.approx(sum(shares[:-1]), abs=1e-6)
        assert record.split_correlation is None
    per_field = np.asarray(vs.field_importance(_breast_cancer()))
    assert shares[-1] == pytest.approx(per_field[columns[-1]].sum() / per_field.sum(), abs=1e-5)


def test_trees_split_through_the_same_function_and_honour_n_aligned() -> None:
    """Tree kinds divide columns with ``columns_for`` too, and (they did not before) train
    on ``n_aligned`` rows when it is given instead of ``aligned_ratio``."""
    from trainables.trees.common import tree_data

    ds = _breast_cancer()
    spec = _spec(model="xgboost", split_scheme="importance", split_params={"alpha": 0.3})
    data = tree_data(spec, ds)
    columns = columns_for(spec, ds)
    assert [x.shape[1] for x in data.X_train] == [len(c) for c in columns]
    assert np.array_equal(data.X_test[0], ds.X_test[:, columns[0]])
    assert len(tree_data(_spec(model="xgboost", n_aligned=100), ds).y_train) == 100


def _breast_cancer() -> Dataset:
    from trainables.data import load_dataset

    return load_dataset("breast_cancer")


def test_leakage_slope_recovers_a_known_trend_and_names_collapse() -> None:
    """analysis/split_leakage.py on rows with a planted trend (advantage = 0.2 + 0.6 x,
    small noise) and on rows at chance everywhere."""
    import pandas as pd

    from analysis import split_leakage

    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, 24)
    base = {"dataset": "d", "status": "ok", "ap_advantage_se": 0.01}
    rows = [
        {**base, "attack": "pmc", "defense": "none", "defense_param": np.nan,
         "split_importance": v, "ap_advantage": 0.2 + 0.6 * v + rng.normal(0, 0.02)}
        for v in x
    ] + [
        {**base, "attack": "pmc", "defense": "gdp", "defense_param": 0.01,
         "split_importance": v, "ap_advantage": 0.0}
        for v in x
    ]  # fmt: skip
    records = pd.DataFrame(rows)
    slopes = split_leakage.slopes(records).set_index("defense_label")
    trend = slopes.loc["none"]
    assert trend["lo"] < 0.6 < trend["hi"] and trend["lo"] > 0.5 and trend["rho"] > 0.9
    assert "leaks more" in split_leakage.verdict(trend)
    assert split_leakage.verdict(slopes.loc["gdp 0.01"]).startswith("at chance")
    bins = split_leakage.bins(records)
    top = bins[(bins["defense_label"] == "none") & (bins["importance_bin"] == "[0.8, 1.0]")]
    low = bins[(bins["defense_label"] == "none") & (bins["importance_bin"] == "[0.0, 0.2)")]
    assert float(top["mean"].iloc[0]) > float(low["mean"].iloc[0]) + 0.3
    assert int(bins["trainings"].sum()) == 48
