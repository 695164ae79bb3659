"""Attack evaluations of a stack's trainings run together (issue 45): model completion
trains the K heads as one (``completion_fast.train_fast``) and each training's record
equals its one-at-a-time evaluation; attacks without a stacked form, adaptive ones and
lists that differ run one training at a time. Real trainings on digits, few epochs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from trainables.attacks.completion_fast import head_grads
from trainables.attacks.harness import run_attacks, run_attacks_many
from trainables.data import load_dataset
from trainables.spec import TrialSpec
from trainables.vfl.training import prepare_parties, train_local_parties

FAST = {"preset": "fast", "epochs": 3}  # 3 x 80 completion steps: the same code, less of it


def test_stacked_head_gradients_equal_each_heads_own() -> None:
    rng = np.random.default_rng(0)
    k, bs, c, w = 4, 5, 3, 6
    theta = rng.standard_normal((k, c, w + 1)).astype(np.float32)
    feats = rng.standard_normal((k, 3 * bs, w + 1)).astype(np.float32)
    t0 = rng.random((k, 2 * bs, c)).astype(np.float32)
    mix_u = rng.random((k, 2 * bs, bs)).astype(np.float32)
    got = head_grads(theta, feats, t0.copy(), mix_u, 3.5, 1.25)
    for i in range(k):
        one = slice(i, i + 1)  # the same head as a stack of one
        want = head_grads(theta[one], feats[one], t0[one].copy(), mix_u[one], 3.5, 1.25)
        assert np.array_equal(got[i], want[0])
    assert np.abs(got).max() > 1e-4


@pytest.fixture(scope="module")
def trained() -> list[Any]:
    ds = load_dataset("digits")
    out = []
    for seed in (0, 1, 2):
        spec = TrialSpec.build(dataset="digits", seed=seed, epochs=2)
        prepared = prepare_parties(spec, ds, [("pmc", FAST), ("dli", {})])
        out.append(train_local_parties(prepared, 2)[1])
    return out


def _one_by_one(parties: Any, attacks: list[tuple[str, Any]], seed: int) -> list[Any]:
    """Each attack evaluated alone: nothing else in its stack."""
    return [run_attacks(parties, [attack], seed)[0] for attack in attacks]


def test_a_stacks_evaluations_equal_the_one_at_a_time_ones(trained: list[Any]) -> None:
    """PMC and MC (one stack key) train their 3 + 3 heads as one stack, DLI runs alone;
    every guess is the one it is alone."""
    attacks = [("pmc", FAST), ("dli", {}), ("mc", FAST)]
    items = [(parties, attacks, seed) for seed, parties in enumerate(trained)]
    alone = [_one_by_one(parties, attacks, seed) for parties, attacks, seed in items]
    together = run_attacks_many(items)
    for one, many in zip(alone, together, strict=True):
        assert [o.name for o in many] == ["pmc", "dli", "mc"]
        for a, b in zip(one, many, strict=True):
            assert a.ap == b.ap and a.attacker == b.attacker  # the same guesses, exactly
            assert b.seconds > 0
        assert many[0].extra["attack_stacked"] == 3 and many[2].extra["attack_stacked"] == 3
        assert many[0].seconds == many[2].seconds  # shares of one run_many
        assert "attack_stacked" not in many[1].extra  # DLI has no stacked form: its own run
    assert len({o[0].ap for o in together}) > 1  # three trainings, not one copied


def test_pmc_and_mc_of_one_training_run_as_one_stack(trained: list[Any]) -> None:
    attacks = [("pmc", FAST), ("dli", {}), ("mc", FAST), ("mc", {**FAST, "lr": 1e-2})]
    got = run_attacks(trained[0], attacks, 0)
    want = _one_by_one(trained[0], attacks, 0)
    assert [o.ap for o in got] == [o.ap for o in want]
    assert got[0].seconds == got[2].seconds != got[3].seconds  # other settings: its own
    assert got[0].ap != got[2].ap  # 40 labelled rows against 80: two completions
    assert all("attack_stacked" not in o.extra for o in got)  # one training


def test_attack_lists_that_differ_run_one_training_at_a_time(trained: list[Any]) -> None:
    items = [(trained[0], [("pmc", FAST), ("dli", {})], 0), (trained[1], [("pmc", FAST)], 1)]
    out = run_attacks_many(items)
    assert [o.name for o in out[0]] == ["pmc", "dli"] and [o.name for o in out[1]] == ["pmc"]
    assert out[0][0].ap == run_attacks(trained[0], [("pmc", FAST)], 0)[0].ap
