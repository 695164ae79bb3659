"""Backdoor attacks (LRB, NSB, MF) on real, undefended 2-party aggVFL FedSGD on digits.

The LRB success targets hold for its ``strong`` preset (margin 15, all test rows
triggered); VFLAIR's plain swap reaches AP ~0.2 on digits (README, benchmarks.attacks).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from trainables.attacks import ATTACKS
from trainables.attacks.harness import draw_aux, make_view, run_attacks
from trainables.attacks.lrb import ReplacementHook, trigger_of
from trainables.data import load_dataset
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.trial import prepare_parties, run_trial, train_local_parties

SEEDS = (0, 1)
STRONG = {"preset": "strong"}


def _row(records: list[Record], name: str) -> Record:
    return next(r for r in records if r.attack == name)


def _lrb_spec(seed: int) -> TrialSpec:
    return TrialSpec.build(
        dataset="digits", seed=seed, train_attack="lrb", train_attack_params=STRONG
    )


@pytest.fixture(scope="module")
def lrb_records() -> dict[int, Record]:
    """The LRB record of a training with the attack installed, per seed."""
    return {s: _row(run_trial(_lrb_spec(s)), "lrb") for s in SEEDS}


@pytest.fixture(scope="module")
def clean_parties() -> dict[int, list[Any]]:
    """Parties trained with nothing installed, per seed."""
    out = {}
    for s in SEEDS:
        spec = TrialSpec.build(dataset="digits", seed=s)
        prepared = prepare_parties(spec, load_dataset("digits"))
        out[s] = train_local_parties(prepared, int(spec.epochs))[1]  # type: ignore[arg-type]
    return out


def _view(parties: list[Any], name: str, seed: int) -> Any:
    info = ATTACKS.get(name).info
    aux = draw_aux(info, parties[-1].y_train.numpy(), parties[1].X_train.numpy(), seed)
    return make_view(parties[0], info, aux, None, seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_lrb_sends_triggered_rows_to_the_target(lrb_records: dict[int, Record], seed: int) -> None:
    row = lrb_records[seed]
    assert row.attack_type == "TB" and row.attacker_party == 0
    assert row.ap is not None and row.ap >= 0.80
    assert row.mp is not None and row.mp > 0.80  # MP under attack: the main task survives


@pytest.mark.parametrize("seed", SEEDS)
def test_lrb_effect_comes_from_the_training_time_swap(
    lrb_records: dict[int, Record], clean_parties: dict[int, list[Any]], seed: int
) -> None:
    # the same trigger on a model trained with nothing installed barely moves predictions
    clean = run_attacks(clean_parties[seed], [("lrb", STRONG)], seed)[0]
    attacked = lrb_records[seed]
    assert attacked.ap is not None and attacked.ap - clean.ap >= 0.5
    assert attacked.mp is not None and abs(attacked.mp - clean.mp) < 0.05


def test_lrb_install_swaps_target_rows_and_keeps_own_features() -> None:
    spec = _lrb_spec(0)
    prepared = prepare_parties(spec, load_dataset("digits"))
    _, parties = train_local_parties(prepared, 2)
    hook = parties[0].hooks[0]
    assert isinstance(hook, ReplacementHook)
    assert len(hook.target_rows) == 10  # VFLAIR: 10 known samples of the target class
    assert hook.swaps == 2 * len(hook.target_rows)  # each target row once per epoch
    assert len(hook.poison_x) == round(0.01 * len(parties[0].X_train))
    np.testing.assert_array_equal(parties[0].X_train.numpy(), prepared.inits[0].X_train)
    columns, values = trigger_of(prepared.inits[0].X_train, 4)
    np.testing.assert_array_equal(
        hook.poison_x.numpy()[:, columns], np.tile(values, (len(hook.poison_x), 1))
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_nsb_and_mf_lower_the_main_task(seed: int) -> None:
    records = run_trial(
        TrialSpec.build(dataset="digits", seed=seed), attacks=[("nsb", {}), ("mf", {})]
    )
    clean = _row(records, "none")
    for name in ("nsb", "mf"):
        row = _row(records, name)
        assert row.attack_type == "NTB" and row.attacker_party == 0
        assert row.ap is not None and row.ap > 0
        # VFLAIR Eq. 7: AP = MP(all rows, clean) - MP(attacked rows, tampered); the
        # record's MP is the whole test set's MP under attack, never above the clean one
        assert row.mp <= clean.mp + 0.005


def test_nsb_noises_one_percent_of_test_rows_within_the_data_range(
    clean_parties: dict[int, list[Any]],
) -> None:
    view = _view(clean_parties[0], "nsb", 0)
    guess = ATTACKS.create("nsb").run(view)  # type: ignore[attr-defined]
    n_test = len(view.X_test)
    assert len(guess.rows) == round(0.01 * n_test) and guess.target is None
    others = np.setdiff1d(np.arange(n_test), guess.rows)
    np.testing.assert_array_equal(guess.X_test[others], view.X_test[others])
    assert not np.allclose(guess.X_test[guess.rows], view.X_test[guess.rows])
    noisy = guess.X_test[guess.rows]  # clipped to the attacker's training range per column
    assert (noisy >= view.X_train.min(axis=0)).all() and (noisy <= view.X_train.max(axis=0)).all()


def test_mf_zeroes_a_quarter_of_the_embeddings(clean_parties: dict[int, list[Any]]) -> None:
    view = _view(clean_parties[0], "mf", 0)
    guess = ATTACKS.create("mf").run(view)  # type: ignore[attr-defined]
    n_test = len(view.X_test)
    assert len(guess.rows) == int(0.25 * n_test) and len(np.unique(guess.rows)) == len(guess.rows)
    with torch.no_grad():
        h = view.bottom(torch.from_numpy(view.X_test)).numpy()
    others = np.setdiff1d(np.arange(n_test), guess.rows)
    np.testing.assert_allclose(guess.embeddings[others], h[others], rtol=1e-6)
    assert not guess.embeddings[guess.rows].any()


@pytest.mark.parametrize("name", ["mf", "nsb"])
def test_vflairs_count_takes_ap_against_the_tampered_mp(
    clean_parties: dict[int, list[Any]], name: str
) -> None:
    """``mp: tampered`` (VFLAIR's code): AP = MP with the attacked rows in it - their
    accuracy; the paper's Eq. 7 (default) subtracts from the clean MP. Same guess, same MP."""
    from trainables.attacks.judge import Judge

    ours, vflair = run_attacks(clean_parties[0], [(name, {}), (name, {"mp": "tampered"})], 0)
    clean_mp = Judge(clean_parties[0]).clean_mp
    assert ours.mp == vflair.mp and ours.score.chance == vflair.score.chance
    assert vflair.ap > 0 and ours.mp < clean_mp  # the attack costs MP on these rows
    assert ours.ap - vflair.ap == pytest.approx(clean_mp - ours.mp, abs=1e-12)
