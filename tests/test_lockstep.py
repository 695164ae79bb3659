"""Lockstep packs (``vfl/lockstep.py``, ``transport/hub.py``): every training's records
equal ``NNKind.run``'s for the same job, one at a time, on a real local Ray."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import ray

from trainables.data import Dataset, load_dataset
from trainables.defenses.applied import DefenseNeverApplied
from trainables.errors import ConfigError
from trainables.jobs import Job, Outcome
from trainables.kinds.nn import NNKind, plain_nn
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.transport.hub import LockstepRun, StackInit
from trainables.transport.open import open_parties
from trainables.transport.placement import LOCAL, Placement
from trainables.vfl import lockstep
from trainables.vfl.lockstep import eligible, run_lockstep
from trainables.vfl.training import prepare_parties

WARM = Placement("ray", cpu_per_party=0.5, reuse_actors=True)
TIMING = {"train_seconds": 0.0, "attack_seconds": 0.0, "created_at": None}
PMC = ("pmc", {"preset": "fast"})
NEVER = {"defense": "iso", "defense_param": 25.0, "defense_params": {"target": "representation"}}


def _job(seed: int, attacks: Sequence[tuple[str, dict]] = (), **fields: object) -> Job:
    base: dict[str, object] = {"dataset": "breast_cancer", "epochs": 2, "batch_size": 128}
    return Job(TrialSpec.build(**{**base, "seed": seed, **fields}), tuple(attacks))


def _pack() -> list[Job]:
    """One shape (2 parties), many settings: seeds, partitions, protocols (FedBCD's Q
    steps, codecs and CELU's workset: message hooks at every party), defenses on
    gradients (G-DP, GPer) and in the model (MID: its own seeded RNG), round counts that
    differ (epochs, a target MP evaluated mid-training), an attack after training, a
    training-time attack and a defense that never applies (an error as a value)."""
    return [
        _job(0),
        _job(1, partition="split"),
        _job(2, protocol="fedbcd", epochs=3),
        _job(3, protocol="fedbcd", partition="split", batch_size=1024, epochs=5),
        _job(0, defense="gdp", defense_param=0.1),
        _job(1, defense="gper", defense_param=0.5, partition="split"),
        _job(2, defense="mid", defense_param=0.01),
        _job(0, protocol="quantize", protocol_params={"bits": 8}),
        _job(1, protocol="celu"),
        _job(2, epochs=4, target_mp=0.9),
        _job(0, attacks=[PMC]),
        _job(1, train_attack="amc", train_attack_params={"preset": "fast"}),
        _job(2, **NEVER),
    ]


def _bare(outcome: Outcome) -> list[Record] | tuple[type, str]:
    """Records without their timing fields; an error as its type and message."""
    if isinstance(outcome, Exception):
        return type(outcome), str(outcome)
    return [dataclasses.replace(r, **TIMING) for r in outcome]  # type: ignore[arg-type]


def _one_at_a_time(jobs: Sequence[Job], ds: Dataset, placement: Placement) -> list[object]:
    out: list[object] = []
    for job in jobs:
        try:
            out.append(_bare(NNKind().run(job.spec, ds, placement, job.attacks)))
        except (ConfigError, DefenseNeverApplied) as err:
            out.append(_bare(err))
    return out


def _lockstep(jobs: Sequence[Job], ds: Dataset, placement: Placement) -> list[object]:
    got = dict(run_lockstep(jobs, ds, placement))
    assert sorted(got) == list(range(len(jobs))), "every job yields exactly once"
    return [_bare(got[i]) for i in range(len(jobs))]


@pytest.fixture(scope="module")
def data() -> Dataset:
    return load_dataset("breast_cancer")


def test_lockstep_records_equal_one_at_a_time_in_process(data: Dataset) -> None:
    jobs = _pack()
    expected = _one_at_a_time(jobs, data, LOCAL)
    assert expected[-1][0] is DefenseNeverApplied  # the pack really holds an error
    assert [r.attack for r in expected[-3]] == ["none", "pmc"]  # type: ignore[union-attr]
    assert _lockstep(jobs, data, LOCAL) == expected
    assert _lockstep(jobs[::-1], data, LOCAL) == expected[::-1]  # the slot does not matter


@pytest.mark.ray
def test_lockstep_records_equal_one_at_a_time_on_warm_actors(
    ray_session: None, data: Dataset
) -> None:
    jobs = _pack()
    expected = _one_at_a_time(jobs, data, WARM)
    rounds = {r[0].rounds for r in expected[:-1]}  # type: ignore[index,union-attr]
    assert len(rounds) > 2, rounds  # trainings of different lengths share the pack
    assert _lockstep(jobs, data, WARM) == expected


def test_a_pack_over_the_byte_cap_runs_in_several_stacks_with_the_same_records(
    data: Dataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three trainings' data per stack: 7 jobs, one refused at preparation (a ConfigError
    yielded as a value), train as two stacks of 3, and every record is still its own."""
    jobs = [_job(s, partition=("agg", "split")[s % 2]) for s in range(6)]
    jobs.insert(2, _job(9, n_labeled=10_000))  # more labels than rows
    inits = prepare_parties(jobs[0].spec, data).inits
    monkeypatch.setattr(
        lockstep, "STACK_BYTES", 3 * sum(i.X_train.nbytes + i.X_test.nbytes for i in inits)
    )
    opened: list[int] = []

    def counted(stacks: Sequence[StackInit], placement: Placement) -> Any:
        opened.append(len(stacks[0].inits))
        return open_parties(stacks, placement)

    monkeypatch.setattr(lockstep, "open_parties", counted)
    expected = _one_at_a_time(jobs, data, LOCAL)
    assert expected[2][0] is ConfigError
    assert _lockstep(jobs, data, LOCAL) == expected
    assert opened == [3, 3]


def test_one_apply_per_round_for_the_whole_pack(data: Dataset) -> None:
    """K trainings of R rounds: R + 2 calls per passive stack (the first request, one per
    round, the test embeddings), not K (R + 2); each training counts its own rounds and
    is charged its share of the run's time."""
    jobs = [_job(s, n_parties=3) for s in range(5)]
    prepared = [prepare_parties(j.spec, data) for j in jobs]
    stacks = [StackInit(tuple(p.inits[k] for p in prepared)) for k in range(3)]
    run = LockstepRun([p.protocol for p in prepared], [2] * 5, [None] * 5, list(range(5)))
    with open_parties(stacks, LOCAL) as group:
        start = time.perf_counter()
        results = group.train(run, 0)
        wall = time.perf_counter() - start
        counts = group.call_all("apply_count")
    rounds = results[0].rounds
    assert rounds == 2 * 4 and {r.rounds for r in results} == {rounds}  # 455 rows / 128
    assert counts[:2] == [rounds + 2, rounds + 2]
    charged = [r.train_seconds for r in results]  # each its share, not the run's wall
    assert min(charged) > 0 and 0.5 * wall < sum(charged) <= wall, (charged, wall)


@pytest.mark.ray
def test_a_passive_stack_holds_no_label_of_any_training(ray_session: None, data: Dataset) -> None:
    prepared = [prepare_parties(_job(s).spec, data) for s in range(3)]
    stacks = [StackInit(tuple(p.inits[k] for p in prepared)) for k in range(2)]
    run = LockstepRun([p.protocol for p in prepared], [2] * 3, [None] * 3, [0, 1, 2])
    held = [p.inits[-1].labels for p in prepared]
    labels = [y for own in held if own is not None for y in (own.y_train, own.y_test)]
    with open_parties(stacks, Placement("ray", cpu_per_party=0.5)) as group:
        group.train(run, 0)
        actors = group.actors  # type: ignore[attr-defined]
        passive, active = ray.get([a.reachable_arrays.remote() for a in actors])

    def holds(state: dict[str, np.ndarray], y: np.ndarray) -> bool:
        return any(a.shape == y.shape and np.array_equal(a, y) for a in state.values())

    assert all(holds(active, y) for y in labels)  # the probe sees every training's labels
    assert not any(holds(passive, y) for y in labels)


@pytest.mark.ray
def test_a_lost_actor_is_raised_not_hung(ray_session: None, data: Dataset) -> None:
    prepared = [prepare_parties(_job(s).spec, data) for s in range(3)]
    stacks = [StackInit(tuple(p.inits[k] for p in prepared)) for k in range(2)]
    run = LockstepRun([p.protocol for p in prepared], [2] * 3, [None] * 3, [0, 1, 2])
    with open_parties(stacks, Placement("ray", cpu_per_party=0.5)) as group:
        ray.kill(group.actors[0])  # type: ignore[attr-defined]
        with pytest.raises(ray.exceptions.RayError):
            group.train(run, 0)


def test_eligible_only_for_nn_packs_on_actors() -> None:
    two = [_job(0), _job(1, partition="split")]
    assert eligible(two, WARM)
    assert not eligible(two, LOCAL)  # no round trip to save in one process
    assert not eligible(two[:1], WARM)
    assert not eligible([_job(0), _job(1, n_parties=3)], WARM)
    hssl = _job(0, ssl_variant="hssl_simsiam", aligned_ratio=0.5, n_labeled=60)
    assert plain_nn([job.spec for job in two])  # what the planner sizes packs by
    assert not plain_nn([_job(1).spec, hssl.spec])  # a pack holds one kind (run_pack)
