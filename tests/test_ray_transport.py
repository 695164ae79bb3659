"""The ``ray`` transport against a real local Ray: same results as ``local``, labels stay put."""

from __future__ import annotations

import numpy as np
import pytest
import ray

from trainables.data import load_dataset
from trainables.protocols import TrainResult
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.transport.ray_actors import PartyResources, RayParties, release_warm_actors
from trainables.trial import PreparedTrial, prepare_parties, run_trial, train_local
from trainables.vfl.stacked_party import StackedParty, StackedPartyInit
from trainables.vfl.stacked_rounds import StackedRounds

pytestmark = pytest.mark.ray


@pytest.mark.parametrize("partition", ["agg", "split"])
def test_local_and_ray_give_the_same_record_for_the_same_seed(
    ray_session: None, partition: str
) -> None:
    spec = TrialSpec.build(dataset="digits", partition=partition, epochs=4, seed=3)
    (local,) = run_trial(spec)
    (remote,) = run_trial(spec, Placement("ray"))
    assert local.mp == remote.mp
    assert (local.rounds, local.comm_bytes) == (remote.rounds, remote.comm_bytes)


def test_each_party_runs_in_its_own_actor_in_one_placement_group(ray_session: None) -> None:
    spec = TrialSpec.build(dataset="breast_cancer", n_parties=3, epochs=1)
    prepared = prepare_parties(spec, load_dataset("breast_cancer"))
    with RayParties(prepared.inits, PartyResources(cpu=0.5)) as group:
        assert group._own_pg is not None
        where = ray.get([a.where.remote() for a in group.actors])
        assert [w["party_id"] for w in where] == [0, 1, 2]
        assert [w["active"] for w in where] == [False, False, True]
        assert len({w["pid"] for w in where}) == 3  # one process per party
        assert {w["placement_group"] for w in where} == {group._own_pg.id.hex()}
        table = ray.util.placement_group_table(group._own_pg)
        assert len(table["bundles"]) == 3


def test_passive_actor_state_never_contains_labels(ray_session: None) -> None:
    spec = TrialSpec.build(dataset="breast_cancer", n_parties=3, epochs=2)
    prepared = prepare_parties(spec, load_dataset("breast_cancer"))
    labels = prepared.inits[-1].labels
    assert labels is not None
    with RayParties(_stacks(prepared), PartyResources(cpu=0.5)) as group:
        _train(group, prepared, 2)
        active_state = ray.get(group.active.arrays.remote())
        assert np.array_equal(active_state["y_train"][0], labels.y_train)  # the probe can see
        for actor in group.passives:
            state = ray.get(actor.reachable_arrays.remote())  # the stack and its members
            assert not any(name.endswith(("y_train", "y_test")) for name in state)
            for name, arr in state.items():
                for y in (labels.y_train, labels.y_test):
                    assert not (arr.size == y.size and np.array_equal(arr.reshape(-1), y)), name


def _stacks(prepared: PreparedTrial) -> list[StackedPartyInit]:
    """Each party of ``prepared`` as a stack of one (what every training runs on)."""
    return [StackedPartyInit((init,)) for init in prepared.inits]


def _train(group: RayParties, prepared: PreparedTrial, epochs: int) -> TrainResult:
    """``prepared``'s training on ``group``: its protocol's rounds at the active actor."""
    group.call_all(StackedParty.stack, [0])
    (result,) = group.train(StackedRounds(prepared.protocol, targets=[None], slots=[0]), epochs)
    return result


def test_local_transport_matches_prepared_parties(ray_session: None) -> None:
    spec = TrialSpec.build(dataset="breast_cancer", epochs=3, protocol="fedbcd")
    prepared = prepare_parties(spec, load_dataset("breast_cancer"))
    local = train_local(prepared, 3)
    with RayParties(_stacks(prepared), PartyResources(cpu=0.5)) as group:
        remote = _train(group, prepared, 3)
    assert local.mp == remote.mp and local.final_loss == remote.final_loss
    assert remote.submit_seconds > 0 and remote.wait_seconds > 0  # the stack's calls, timed


def test_reused_actors_are_emptied_between_trials(ray_session: None) -> None:
    spec = TrialSpec.build(dataset="breast_cancer", n_parties=3, epochs=2)
    prepared = prepare_parties(spec, load_dataset("breast_cancer"))
    expected = train_local(prepared, 2)
    release_warm_actors()  # earlier tests in this process may have left warm actors
    try:
        with RayParties(_stacks(prepared), PartyResources(cpu=0.5), reuse=True) as first:
            assert not first.reused
            _train(first, prepared, 2)
            actors = list(first.actors)
        for actor in actors:  # back in the pool: no party, no arrays, labels gone
            assert ray.get(actor.where.remote())["party_id"] is None
            assert ray.get(actor.arrays.remote()) == {}
        with RayParties(_stacks(prepared), PartyResources(cpu=0.5), reuse=True) as second:
            assert second.reused and second.actors == actors
            again = _train(second, prepared, 2)
        assert again.mp == expected.mp and again.final_loss == expected.final_loss
    finally:
        assert release_warm_actors() == 3
