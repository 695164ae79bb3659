"""Every registered attack passes the same checks (Optuna's sampler-suite idea)."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from trainables.attacks import ATTACKS, MODULES
from trainables.attacks.harness import attacker_index, draw_aux, make_view, peer_index
from trainables.data import load_dataset
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.trial import prepare_parties, run_trial, train_local_parties

NAMES = ATTACKS.names()
# every attack at VFLAIR's defaults (preset None) and at each of its presets
SETTINGS = [(n, None) for n in NAMES] + [(n, p) for n in NAMES for p in ATTACKS.get(n).presets]
# keeps the model completions (25 x 1024 steps at VFLAIR's settings) and BLI's inversion
# (up to 10,000 steps) short here: these tests check the interface, not the AP
QUICK: dict[str, dict[str, Any]] = {
    "pmc": {"epochs": 1},
    "mc": {"epochs": 1},
    "amc": {"epochs": 1},
    "bli": {"steps": 500},
}


def _params(name: str, preset: str | None) -> dict[str, Any]:
    return {**({"preset": preset} if preset else {}), **QUICK.get(name, {})}


def _is_tree_attack(name: str) -> bool:
    return getattr(ATTACKS.get(name), "family", "nn") == "trees"


def _spec(name: str, seed: int = 0, preset: str | None = None) -> TrialSpec:
    if _is_tree_attack(name):  # reads tree-VFL messages: a small forest (no encryption)
        params = {"n_trees": 2, "max_depth": 3}
        return TrialSpec.build(dataset="breast_cancer", model="rf", seed=seed, model_params=params)
    info = ATTACKS.get(name).info
    dataset = "breast_cancer" if info.binary_only else "digits"
    train_attack = name if info.training_time else "none"
    params = _params(name, preset) if info.training_time else {}
    return TrialSpec.build(
        dataset=dataset, epochs=3, seed=seed, train_attack=train_attack,
        train_attack_params=params,
    )  # fmt: skip


def test_every_attack_module_is_registered() -> None:
    assert sorted(NAMES) == sorted(MODULES)


@pytest.mark.parametrize("name", NAMES)
def test_attack_declares_what_the_planner_needs(name: str) -> None:
    cls = ATTACKS.get(name)
    assert cls.name == name
    assert cls.info.type in {"LI", "FR", "TB", "NTB"}
    assert cls.info.role in {"passive", "active"}
    assert isinstance(cls.defaults, dict)
    assert "preset" not in cls.defaults  # the key that carries a preset in attack params
    for preset, values in cls.presets.items():
        assert set(values) <= set(cls.defaults), (name, preset)  # only known parameters
        assert any(cls.defaults[k] != v for k, v in values.items()), (name, preset)


@pytest.mark.parametrize(("name", "preset"), SETTINGS)
def test_attack_record_is_typed_bounded_and_deterministic(name: str, preset: str | None) -> None:
    spec = _spec(name, preset=preset)
    attacks = [] if spec.train_attack != "none" else [(name, _params(name, preset))]
    first = run_trial(spec, attacks=attacks)
    second = run_trial(spec, attacks=attacks)
    row = next(r for r in first if r.attack == name)
    again = next(r for r in second if r.attack == name)
    info = ATTACKS.get(name).info
    assert row.attack_type == info.type
    assert row.attacker_party == attacker_index(info, spec.n_parties)
    assert row.ap is not None and 0.0 <= row.ap <= 1.0
    assert row.ap == again.ap and row.mp == again.mp
    _assert_scored_against_chance(row)
    assert row.ap_advantage == again.ap_advantage or math.isnan(row.ap)
    for clean in (r for r in first if r.attack == "none"):
        assert clean.mp_se is not None and clean.mp_se >= 0.0
    extra = json.loads(row.extra)  # the record says which setting ran
    made = ATTACKS.create(name, **_params(name, preset))
    assert extra["attack_preset"] == preset
    assert extra["attack_params"] == made.changed_params()  # type: ignore[attr-defined]
    assert set(ATTACKS.get(name).presets.get(preset or "", {})) <= set(extra["attack_params"])


def _assert_scored_against_chance(row: Record) -> None:
    """The record carries its no-information baseline (``attacks/chance.py``): chance, an
    advantage in [0, 1] with its SE, a collapse share in [0, 1], and the MP's SE; unknown
    (NaN) only where the AP itself is."""
    assert row.ap is not None and row.ap_chance is not None
    assert 0.0 <= row.ap_chance <= 1.0
    for value in (row.ap_advantage, row.ap_advantage_se):
        assert value is not None
        assert not math.isnan(value) or math.isnan(row.ap), (row.attack, value)
    if not math.isnan(row.ap):
        assert 0.0 <= row.ap_advantage <= 1.0  # type: ignore[operator]
        assert row.ap_advantage_se >= 0.0  # type: ignore[operator]
    assert row.ap_collapse is not None and 0.0 <= row.ap_collapse <= 1.0
    assert row.mp_se is not None and row.mp_se >= 0.0


@pytest.mark.parametrize("name", NAMES)
def test_attack_view_holds_only_its_own_party(name: str) -> None:
    if _is_tree_attack(name):
        pytest.skip("a tree attack's TreeView is checked in tests/test_trees_leakage.py")
    spec = _spec(name)
    info = ATTACKS.get(name).info
    prepared = prepare_parties(spec, load_dataset(spec.dataset), [(name, {})])
    _, parties = train_local_parties(prepared, 1)
    who = attacker_index(info, spec.n_parties)
    y = prepared.inits[-1].labels.y_train  # type: ignore[union-attr]
    peer = peer_index(who)
    aux = draw_aux(info, y, prepared.inits[peer].X_train, spec.seed)
    view = make_view(parties[who], info, aux, None, spec.seed)
    np.testing.assert_array_equal(view.X_train, prepared.inits[who].X_train)
    others = [init.X_train for k, init in enumerate(prepared.inits) if k != who]
    for arr in (view.X_train, view.X_test):
        assert all(arr.shape != o.shape or not np.array_equal(arr, o) for o in others)
    if view.role == "passive":
        assert view.y_train is None and view.top is None
        # the only labels a passive attacker holds are the ones its threat model grants
        assert len(view.aux.labels) == len(aux.label_rows)
        for msg in view.received:
            assert msg.kind == "gradient"
    if view.aux.peer_features is not None:
        assert len(view.aux.peer_features) == len(view.aux.feature_rows) < len(y)
