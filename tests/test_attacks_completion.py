"""Model completion attacks (PMC, AMC, MC) on real trainings: undefended 2-party aggVFL
FedSGD on digits (10 classes, chance 0.1)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from trainables.attacks import ATTACKS
from trainables.attacks.amc import MaliciousOptimizer, MaliciousScaling
from trainables.data import load_dataset
from trainables.errors import ConfigError
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.trial import prepare_parties, run_trial, train_local_parties

SEEDS = (0, 1, 2)
CHANCE = 0.1
FAST = {"preset": "fast"}  # 80 steps per epoch instead of VFLAIR's 1024 (completion.py)
# AMC's targets hold for Fu et al.'s gamma 2 (its strong preset), trained like FAST
AMC = {"preset": "strong", **ATTACKS.get("amc").presets["fast"]}


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models: one torch thread trains several times faster on a busy 2-core box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _row(records: list[Record], name: str) -> Record:
    return next(r for r in records if r.attack == name)


@pytest.fixture(scope="module")
def undefended() -> dict[int, list[Record]]:
    """One clean training per seed, attacked by PMC and MC after training."""
    return {
        s: run_trial(
            TrialSpec.build(dataset="digits", seed=s), attacks=[("pmc", FAST), ("mc", FAST)]
        )
        for s in SEEDS
    }


@pytest.fixture(scope="module")
def amc() -> dict[int, Record]:
    """A training of its own per seed, with AMC's malicious optimizer at party 0."""
    out = {}
    for s in SEEDS:
        spec = TrialSpec.build(
            dataset="digits", seed=s, train_attack="amc", train_attack_params=AMC
        )
        records = run_trial(spec)
        assert [r.attack for r in records] == ["amc"]  # a training-time attack: its row only
        out[s] = records[0]
    return out


def test_pmc_infers_test_labels_well_above_chance(undefended: dict[int, list[Record]]) -> None:
    for s in SEEDS:
        row = _row(undefended[s], "pmc")
        assert row.attack_type == "LI" and row.attacker_party == 0
        assert row.ap is not None and row.ap >= CHANCE + 0.2, (s, row.ap)


def test_amc_beats_chance_and_pmc_on_average(
    undefended: dict[int, list[Record]], amc: dict[int, Record]
) -> None:
    for s in SEEDS:
        assert amc[s].ap is not None and amc[s].ap >= CHANCE + 0.2, (s, amc[s].ap)
    pmc_mean = np.mean([_row(undefended[s], "pmc").ap for s in SEEDS])
    amc_mean = np.mean([amc[s].ap for s in SEEDS])
    assert amc_mean >= pmc_mean, (amc_mean, pmc_mean)


def test_mc_with_80_labels_beats_chance(undefended: dict[int, list[Record]]) -> None:
    assert ATTACKS.get("mc").info.aux_labels_total == 80
    for s in SEEDS:
        row = _row(undefended[s], "mc")
        assert row.ap is not None and row.ap >= CHANCE + 0.3, (s, row.ap)


def test_amc_changes_training_and_records_mp_under_attack(
    undefended: dict[int, list[Record]], amc: dict[int, Record]
) -> None:
    s = SEEDS[0]
    clean = _row(undefended[s], "none")
    row = amc[s]
    assert row.mp is not None and 0.0 < row.mp <= 1.0
    assert row.spec_json != clean.spec_json  # its own spec (train_attack="amc")
    # same seed, same data order: only the malicious optimizer differs
    weights = []
    for train_attack in ("none", "amc"):
        spec = TrialSpec.build(dataset="digits", seed=s, train_attack=train_attack)
        prepared = prepare_parties(spec, load_dataset("digits"))
        _, parties = train_local_parties(prepared, 3)
        weights.append(torch.cat([p.detach().flatten() for p in parties[0].bottom.parameters()]))
        marked = any(isinstance(h, MaliciousScaling) for h in parties[0].hooks)
        assert marked == (train_attack == "amc")  # its stack wrapped its optimizer
        assert not any(isinstance(h, MaliciousScaling) for h in parties[1].hooks)
    assert not torch.allclose(weights[0], weights[1])


def test_malicious_optimizer_scales_consistent_updates_up() -> None:
    """Same gradient twice: the 2nd update is 1 + gamma times the 1st (clamped to max)."""
    for gamma, expected in ((1.0, 2.0), (10.0, 5.0)):
        w = torch.nn.Parameter(torch.zeros(3))
        opt = MaliciousOptimizer(torch.optim.SGD([w], lr=0.1), gamma, 1.0, 5.0)
        steps = []
        for _ in range(2):
            before = w.detach().clone()
            opt.zero_grad()
            w.grad = torch.tensor([1.0, -2.0, 0.5])
            opt.step()
            steps.append(w.detach() - before)
        torch.testing.assert_close(steps[1], expected * steps[0])


def test_completion_rejects_unknown_method_before_training() -> None:
    with pytest.raises(ConfigError, match="method"):
        ATTACKS.create("pmc", method="nope")
    with pytest.raises(ConfigError, match="head"):
        ATTACKS.create("amc", head="nope")
