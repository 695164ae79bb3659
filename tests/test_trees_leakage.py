"""What tree VFL reveals to a passive party, measured by tree_grad_li on what it received.

Chance bound: on ciphertexts the attack's guess is a function of ciphertext bits only, so
it is independent of the labels and balanced; its accuracy over n rows is then 0.5 with
a standard deviation of 0.5 / sqrt(n). With n >= 300 rows, |AP - 0.5| <= 0.1 is over 3.4
standard deviations (a fixed seed makes each test deterministic anyway), and it excludes
every informative outcome the plaintext twins show (AP >= 0.99).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import xgboost as xgb

from sweep_engine.plan import expand
from sweep_engine.space import Space
from trainables.attacks.tree_grad_li import TreeView
from trainables.data import load_dataset
from trainables.errors import ConfigError
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.trees.common import tree_data
from trainables.trees.models import run_secureboost
from trainables.trees.xgb_federated import xgb_params
from trainables.trial import run_trial

ATTACK = [("tree_grad_li", {})]
SMALL = {"n_trees": 1, "max_depth": 2}


def _attack(model: str, params: dict, **fields: object) -> tuple[dict, float]:
    spec = TrialSpec.build(dataset="breast_cancer", model=model, model_params=params,
                           key_length=512, **fields)  # fmt: skip
    clean, attacked = run_trial(spec, attacks=ATTACK)
    assert attacked.attack == "tree_grad_li" and attacked.attacker_party == 0
    assert attacked.mp == clean.mp and attacked.attack_type == "LI"
    return json.loads(clean.extra), float(attacked.ap)


@pytest.mark.ray
def test_plain_xgboost_passive_reads_every_label(ray_session: None) -> None:
    params = {"n_trees": 3, "max_depth": 3}
    spec = TrialSpec.build(dataset="breast_cancer", model="xgboost", model_params=params)
    clean, attacked = run_trial(spec, Placement("ray"), attacks=ATTACK)
    extra = json.loads(clean.extra)
    assert attacked.ap >= 0.99 and extra["gradient_tap"] is True
    assert extra["reveals"]["labels_to_passive"].startswith("exact")
    assert json.loads(attacked.extra)["attack_rows"] == clean.n_labeled
    # the tap is xgboost's own protocol made visible: the same model as xgb.train's
    data = tree_data(spec, load_dataset("breast_cancer"))
    xgb_params_, rounds = xgb_params(params, 2, spec.seed)
    order = [1, 0]  # xgboost's global feature order: rank 0 (the active party) first
    joined = xgb.DMatrix(np.hstack([data.X_train[p] for p in order]), label=data.y_train)
    central = xgb.train(xgb_params_, joined, rounds)
    pred = central.predict(xgb.DMatrix(np.hstack([data.X_test[p] for p in order])))
    assert clean.mp == float(((pred > 0.5) == data.y_test).mean())


def test_secureboost_ciphertexts_give_chance_and_its_plaintext_twin_every_label() -> None:
    extra, ap = _attack("secureboost", SMALL)
    assert abs(ap - 0.5) <= 0.1 and extra["encrypted"] is True
    assert extra["reveals"]["labels_to_passive"].startswith("encrypted")
    plain_extra, plain_ap = _attack("secureboost", {**SMALL, "encrypt": 0})
    assert plain_ap >= 0.99 and plain_extra["reveals"]["labels_to_passive"].startswith("exact")


@pytest.mark.parametrize(
    ("model", "params", "leaks"),
    [
        ("rf", {"n_trees": 2, "max_depth": 2}, True),
        ("secure_rf", {"n_trees": 1, "max_depth": 2}, False),
        ("paillier_lr", {"max_rows": 300}, False),
        ("paillier_lr", {"max_rows": 300, "encrypt": 0}, True),
    ],
)
def test_forest_and_lr_leak_exactly_when_plaintext(model: str, params: dict, leaks: bool) -> None:
    extra, ap = _attack(model, params, epochs=1, batch_size=100, lr=0.5)
    assert ap >= 0.99 if leaks else abs(ap - 0.5) <= 0.1
    assert extra["reveals"]["labels_to_passive"].startswith("exact" if leaks else "encrypted")
    assert extra["reveals"]["to_passive"] and extra["reveals"]["to_active"]


def test_view_holds_only_what_passive_party_received() -> None:
    spec = TrialSpec.build(dataset="breast_cancer", model="secureboost", model_params=SMALL,
                           key_length=512)  # fmt: skip
    data = tree_data(spec, load_dataset("breast_cancer"))
    out = run_secureboost(spec, data, Placement("local"), True)
    view = out.outputs["view"]
    assert isinstance(view, TreeView) and view.role == "passive" and view.y_train is None
    np.testing.assert_array_equal(view.X_train, data.X_train[0])
    assert not any(np.array_equal(view.X_train, x) for x in data.X_train[1:])
    n2 = view.modulus**2
    items = [c for rec in view.received for row in rec.values for c in row]
    assert len(view.received) == 1 and len(items) == len(data.y_train)
    assert all(1 < int(c) < n2 and int(c).bit_length() > 600 for c in items)  # ciphertexts
    assert not any(f.name in {"y_train", "labels"} and getattr(view, f.name) is not None
                   for f in view.__dataclass_fields__.values())  # fmt: skip


def test_planner_pairs_tree_attacks_with_tree_models_only() -> None:
    space = Space(
        name="mixed",
        base={"dataset": "breast_cancer", "epochs": 1},
        grid={"model": ["rf", "mlp2"]},
        attacks=["tree_grad_li", "ns"],
        source="mixed.yaml",
    )
    plan = expand(space)
    served = {t.spec.model: [a for a, _ in t.attacks] for t in plan.trainings}
    assert served == {"rf": ["tree_grad_li"], "mlp2": ["ns"]}
    reasons = {(d.cell["model"], d.cell["attack"]): d.reason for d in plan.dropped}
    assert set(reasons) == {("rf", "ns"), ("mlp2", "tree_grad_li")}
    assert "tree / Paillier model" in reasons[("rf", "ns")]
    spec = TrialSpec.build(dataset="breast_cancer", model="rf", model_params=SMALL)
    with pytest.raises(ConfigError, match="NN-VFL"):
        run_trial(spec, attacks=[("ns", {})])
