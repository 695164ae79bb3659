"""Same TrialSpec and seed, same records: MP, AP, rounds and bytes, run after run, on the
CPU, under both transports and with attacks (inference-time and training-time)."""

from __future__ import annotations

import pytest

from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.trial import run_trial

# one that reads the training's messages, one that trains a model on aux labels, one noisy
ATTACKS = [("dli", {}), ("pmc", {"epochs": 2, "steps_per_epoch": 10}), ("nsb", {})]
INFERENCE = TrialSpec.build(dataset="breast_cancer", n_parties=3, epochs=4, seed=3)
BACKDOOR = TrialSpec.build(
    dataset="digits", epochs=3, seed=4, train_attack="lrb", train_attack_params={}
)
MEASURED = ("attack", "attacker_party", "mp", "ap", "rounds", "comm_bytes", "n_labeled")


def measured(records: list[Record]) -> list[tuple[object, ...]]:
    return [tuple(getattr(r, k) for k in MEASURED) for r in records]


def test_same_spec_same_records_locally() -> None:
    for spec, attacks in ((INFERENCE, ATTACKS), (BACKDOOR, [])):
        first = measured(run_trial(spec, attacks=attacks))
        assert first == measured(run_trial(spec, attacks=attacks)), spec.train_attack
        assert len(first) == (len(attacks) + 1 if attacks else 1)
        assert all(row[3] is not None for row in first if row[0] != "none")  # an AP each


@pytest.mark.ray
def test_same_spec_same_records_on_ray_actors_as_locally(ray_session: None) -> None:
    local = measured(run_trial(INFERENCE, attacks=ATTACKS))
    for reuse in (False, True, True):  # fresh actors, then warm ones from the pool
        ray = run_trial(INFERENCE, Placement("ray", 0.5, reuse_actors=reuse), attacks=ATTACKS)
        assert measured(ray) == local, reuse


def test_a_different_seed_changes_the_records() -> None:
    """The comparison above can fail: the seed does reach the numbers."""
    other = TrialSpec.build(dataset="breast_cancer", n_parties=3, epochs=4, seed=4)
    assert measured(run_trial(INFERENCE, attacks=ATTACKS)) != measured(
        run_trial(other, attacks=ATTACKS)
    )
