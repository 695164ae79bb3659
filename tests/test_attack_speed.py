"""The faster attack evaluation: same numbers by default, convergence stop only on request,
and the benchmark that measures both (``benchmarks.attack_speed``)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from benchmarks.attack_speed import compared, main, parse_setting, versus_before
from trainables.attacks.completion import (
    COMPLETION_DEFAULTS,
    CompletionModel,
    Convergence,
    _ema_updater,
    complete_model,
)


def _bottom() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))  # (N, 6) -> (N, 3)


def _data(n: int = 60) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    y = np.arange(n) % 3
    X = rng.normal(size=(n, 6)).astype(np.float32) + y[:, None]  # learnable classes
    return X, y


def test_ema_updater_gives_the_bits_of_the_per_tensor_update() -> None:
    """The foreach EMA must equal what the loop over parameters and buffers computed."""
    model = CompletionModel(_bottom(), 3, 3, "bn_relu")  # has BatchNorm buffers too
    ema = CompletionModel(_bottom(), 3, 3, "bn_relu")
    model(torch.randn(5, 6))  # moves the BN running stats away from the EMA copy's
    with torch.no_grad():
        for q in model.parameters():
            q.add_(torch.randn(q.shape))
    reference = CompletionModel(_bottom(), 3, 3, "bn_relu")
    reference.load_state_dict(ema.state_dict())
    with torch.no_grad():
        for e, q in zip(reference.parameters(), model.parameters(), strict=True):
            e.mul_(0.99).add_(q, alpha=1.0 - 0.99)
        for e, b in zip(reference.buffers(), model.buffers(), strict=True):
            e.copy_(b)
    _ema_updater(ema, model, 0.99)()
    got, want = ema.state_dict(), reference.state_dict()
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert not torch.equal(got["head.0.running_mean"], torch.zeros(3))  # the copy happened


def _complete(**params: Any) -> nn.Module:
    X, y = _data()
    quick = {"epochs": 4, "steps_per_epoch": 16, **params}
    return complete_model(_bottom(), X[:12], y[:12], X, 3, quick, seed=0)


def test_completion_runs_every_epoch_by_default() -> None:
    assert COMPLETION_DEFAULTS["stop_patience"] == 0  # the papers' setting: no early stop
    assert _complete().steps == 4 * 16


def test_convergence_stop_ends_training_early_and_changes_the_model() -> None:
    full, stopped = _complete(), _complete(stop_patience=1, stop_tol=1.0)
    assert stopped.steps == 16  # every epoch is "quiet" at tol 1.0: stops after the first
    a, b = full.state_dict(), stopped.state_dict()
    assert not all(torch.equal(a[k], b[k]) for k in a)
    never = _complete(stop_patience=1, stop_tol=-1.0)  # no epoch can be quiet
    assert never.steps == 4 * 16
    assert all(torch.equal(never.state_dict()[k], a[k]) for k in a)  # the checks change nothing


def test_convergence_needs_patience_quiet_epochs_in_a_row() -> None:
    ema = nn.Linear(6, 3)
    x = torch.randn(20, 6)
    stop = Convergence(ema, x, patience=2, tol=0.0)
    assert not stop.converged()  # first look: every label is new
    assert not stop.converged()  # one quiet epoch
    assert stop.converged()  # two in a row
    with torch.no_grad():
        ema.weight.neg_()  # flips the labels: the count starts over
    assert not stop.converged()


def test_parse_setting_reads_numbers_and_bare_strings() -> None:
    assert parse_setting("pmc:stop_patience=2,method=supervised,stop_tol=0.05") == (
        "pmc",
        {"stop_patience": 2, "method": "supervised", "stop_tol": 0.05},
    )
    assert parse_setting("bli") == ("bli", {})


def test_compared_flags_an_ap_drop_beyond_one_std() -> None:
    attacks = {
        "pmc": {"ap_mean": 0.70, "ap_std": 0.02, "ap": [0.68, 0.72], "seconds_median": 10.0},
        'pmc:{"stop_patience": 2}': {"ap_mean": 0.69, "ap_std": 0.01, "seconds_median": 3.0},
        'pmc:{"stop_patience": 9}': {"ap_mean": 0.65, "ap_std": 0.01, "seconds_median": 2.0},
    }
    got = compared(attacks, ["pmc:stop_patience=2", "pmc:stop_patience=9"])
    assert got["pmc:stop_patience=2"]["ap_within_one_std"] is True
    assert got["pmc:stop_patience=9"]["ap_within_one_std"] is False
    assert got["pmc:stop_patience=2"]["seconds"] == [10.0, 3.0]


def test_versus_before_gives_the_speedup_and_flags_an_ap_move_beyond_one_std() -> None:
    def row(cpu: float, mean: float, std: float) -> dict[str, float]:
        return {"cpu_seconds_median": cpu, "ap_mean": mean, "ap_std": std}

    before = {"pmc": row(21.0, 0.72, 0.03), "mc": row(20.0, 0.75, 0.01), "bli": row(4.0, 0.2, 0)}
    now = {"pmc": row(2.0, 0.70, 0.02), "mc": row(2.5, 0.73, 0.01)}
    got = versus_before(now, before)
    assert set(got) == {"pmc", "mc"}  # only what both trees ran
    assert got["pmc"]["speedup"] == 10.5 and got["pmc"]["cpu_seconds"] == [21.0, 2.0]
    assert got["pmc"]["ap_within_one_std"] is True  # moved 0.02 <= 0.03
    assert got["mc"]["ap_within_one_std"] is False  # moved 0.02 > 0.01


def test_benchmark_prints_seconds_and_a_repeatable_ap(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--attacks", "dli,mf", "--seeds", "0", "--repeats", "2", "--epochs", "2"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(out["attacks"]) == {"dli", "mf"}
    for row in out["attacks"].values():
        assert row["seconds_median"] > 0
        assert 0.0 <= row["ap_mean"] <= 1.0
