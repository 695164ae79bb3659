"""Every registered attack passes the same checks (Optuna's sampler-suite idea)."""

from __future__ import annotations

import numpy as np
import pytest

from trainables.attacks import ATTACKS, MODULES
from trainables.attacks.harness import attacker_index, draw_aux, make_view, peer_index
from trainables.data import load_dataset
from trainables.spec import TrialSpec
from trainables.trial import prepare_parties, run_trial, train_local_parties

NAMES = ATTACKS.names()


def _spec(name: str, seed: int = 0) -> TrialSpec:
    info = ATTACKS.get(name).info
    dataset = "breast_cancer" if info.binary_only else "digits"
    train_attack = name if info.training_time else "none"
    return TrialSpec.build(dataset=dataset, epochs=3, seed=seed, train_attack=train_attack)


def test_every_attack_module_is_registered() -> None:
    assert sorted(NAMES) == sorted(MODULES)


@pytest.mark.parametrize("name", NAMES)
def test_attack_declares_what_the_planner_needs(name: str) -> None:
    cls = ATTACKS.get(name)
    assert cls.name == name
    assert cls.info.type in {"LI", "FR", "TB", "NTB"}
    assert cls.info.role in {"passive", "active"}
    assert isinstance(cls.defaults, dict)


@pytest.mark.parametrize("name", NAMES)
def test_attack_record_is_typed_bounded_and_deterministic(name: str) -> None:
    spec = _spec(name)
    attacks = [] if spec.train_attack != "none" else [(name, {})]
    first = run_trial(spec, attacks=attacks)
    second = run_trial(spec, attacks=attacks)
    row = next(r for r in first if r.attack == name)
    again = next(r for r in second if r.attack == name)
    info = ATTACKS.get(name).info
    assert row.attack_type == info.type
    assert row.attacker_party == attacker_index(info, spec.n_parties)
    assert row.ap is not None and 0.0 <= row.ap <= 1.0
    assert row.ap == again.ap and row.mp == again.mp


@pytest.mark.parametrize("name", NAMES)
def test_attack_view_holds_only_its_own_party(name: str) -> None:
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
