"""XGBoost VFL on xgboost's federated column split: equals centralized xgboost; the label
array only at rank 0 (its broadcast gradients reveal the labels: test_trees_leakage.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xgboost as xgb

from trainables.data import load_dataset
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.trees.common import tree_data
from trainables.trees.xgb_federated import XGBPartyInit, run_federated, xgb_params
from trainables.trial import run_trial

pytestmark = pytest.mark.ray
PARAMS = {"n_trees": 3, "max_depth": 3, "learning_rate": 0.3, "n_bins": 32}


def _federated_vs_central(dataset: str, n_parties: int, rows: int | None) -> None:
    spec = TrialSpec.build(dataset=dataset, model="xgboost", n_parties=n_parties,
                           model_params=PARAMS)  # fmt: skip
    data = tree_data(spec, load_dataset(dataset))
    k = n_parties
    ranks = [k - 1, *range(k - 1)]  # the active party is rank 0
    take = slice(None) if rows is None else slice(0, rows)
    X_train = [data.X_train[p][take] for p in ranks]
    y = data.y_train[take]
    inits = [
        XGBPartyInit(p, r, X_train[r], data.X_test[p], y if r == 0 else None)
        for r, p in enumerate(ranks)
    ]
    params, rounds = xgb_params(PARAMS, data.n_classes, 0)
    # up to 3 parties in the session Ray's 2 CPUs (tests/conftest.py)
    results = run_federated(inits, params, rounds, Placement("ray", cpu_per_party=0.5))
    central = xgb.train(params, xgb.DMatrix(np.hstack(X_train), label=y), rounds)
    expected = central.predict(xgb.DMatrix(np.hstack([data.X_test[p] for p in ranks])))
    assert len({r["pid"] for r in results}) == k  # one process per party
    for r in results:  # every party ends with the centralized model's predictions
        np.testing.assert_allclose(r["pred"], expected, rtol=1e-5, atol=1e-6)
    assert [r["labels_here"] for r in results] == [len(y)] + [0] * (k - 1)
    assert all(r["n_col"] == sum(x.shape[1] for x in X_train) for r in results)


def test_federated_equals_centralized_breast_cancer(ray_session: None) -> None:
    _federated_vs_central("breast_cancer", 2, None)


@pytest.mark.slow
@pytest.mark.shared_data
def test_federated_equals_centralized_credit(ray_session: None, shared_data: object) -> None:
    _federated_vs_central("credit", 3, 4000)


def test_passive_party_gets_no_label_array() -> None:
    """Only the label array: the gradients rank 0 broadcasts still reveal every label to a
    passive party (tests/test_trees_leakage.py measures it)."""
    with pytest.raises(ValueError, match="rank 0"):
        XGBPartyInit(0, 1, np.zeros((2, 1)), np.zeros((1, 1)), np.zeros(2)).build()


def test_xgboost_trial_record(ray_session: None) -> None:
    spec = TrialSpec.build(dataset="breast_cancer", model="xgboost", model_params=PARAMS)
    (record,) = run_trial(spec, Placement("ray"))
    extra = json.loads(record.extra)
    assert record.model == "xgboost" and record.rounds == 3 and record.mp > 0.9
    assert extra["labels_per_rank"][1:] == [0] and extra["comm_bytes_measured"] is False
