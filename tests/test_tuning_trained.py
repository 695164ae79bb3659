"""Training-time attacks tuned by their attacker (issue 65 item 3): ``adapt`` trials are
trainings at random settings, stacked as one pack, scored on the attacker's own rows by
the folds and rule of the inference-time tuner; the budget is the plan's and the estimate's."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest
import torch

from sweep_engine.packs import cost, make_packs
from sweep_engine.plan import Training, expand
from sweep_engine.space import load_space
from trainables.attacks import ATTACKS
from trainables.attacks.tuning import Adapt, check_adapt
from trainables.attacks.tuning_trained import (
    budget,
    combine,
    own_scores,
    settings,
    trainings,
    trial_specs,
)
from trainables.data import load_dataset
from trainables.errors import ConfigError
from trainables.jobs import Job
from trainables.kinds.nn import NNKind
from trainables.schedule import ONE_BY_ONE, STACKED
from trainables.spec import TrialSpec
from trainables.transport.placement import LOCAL
from trainables.vfl.vectorized import run_jobs

ADAPT = {"trials": 3, "sampler": "random"}
SPEC = TrialSpec.build(
    dataset="digits", epochs=3, seed=0, train_attack="lrb", train_attack_adapt=ADAPT
)


@pytest.fixture(scope="module")
def records() -> list[Any]:
    return NNKind().run(SPEC, load_dataset("digits"), LOCAL, [])


def test_trial_settings_are_the_default_then_seeded_draws_in_the_declared_ranges() -> None:
    got = settings(SPEC)
    assert len(got) == 3 and got[0] == {} and got == settings(SPEC)  # a rerun trains the same
    assert settings(SPEC.model_copy(update={"seed": 1}))[1] != got[1]
    for params in got[1:]:
        assert set(params) == set(ATTACKS.get("lrb").search)
        assert all(ATTACKS.get("lrb").search[k].contains(v) for k, v in params.items())
    assert [s.train_attack_params for s in trial_specs(SPEC)] == got
    assert all(s.train_attack_adapt == SPEC.train_attack_adapt for s in trial_specs(SPEC))


def test_a_budget_is_checked_where_the_spec_is_read() -> None:
    with pytest.raises(ConfigError, match=r"training-time attack.*allowed: random"):
        budget(SPEC.model_copy(update={"train_attack_adapt": {"trials": 3}}))  # tpe
    with pytest.raises(ConfigError, match=r"unknown parameter.*'trails'"):
        budget(SPEC.model_copy(update={"train_attack_adapt": {"trails": 3}}))
    check_adapt(ATTACKS.get("lrb"), Adapt(sampler="random"))
    assert budget(SPEC.model_copy(update={"train_attack_adapt": {}})) is None
    # a budget keeps the spec's hash where it is unset (old records keep theirs)
    plain = TrialSpec.build(dataset="digits", epochs=3, train_attack="lrb")
    assert plain.config_hash != SPEC.config_hash
    assert plain.config_hash == plain.model_copy(update={"train_attack_adapt": {}}).config_hash


def test_the_cell_writes_the_default_and_the_chosen_trial(records: list[Any]) -> None:
    assert [r.label for r in records] == ["lrb", "lrb@adapted"]
    default, adapted = records
    assert default.config_hash == adapted.config_hash == SPEC.config_hash
    assert json.loads(default.spec_json)["train_attack_adapt"] == ADAPT
    info = json.loads(adapted.extra)["adapted"]
    assert info["trainings"] == 3 and len(info["trial_own_scores"]) == 3
    assert info["trial_params"][0] == {"margin": 0.0, "poison_ratio": 0.01, "trigger_size": 4}
    # the choice is the attacker's own: the best mean own score, kept only past its noise
    own = info["trial_own_scores"]
    assert info["self_default"] == pytest.approx(own[0], abs=1e-6)
    assert info["self_best"] == pytest.approx(max(own), abs=1e-6)
    if info["default_kept"]:
        assert info["why_default"] and adapted.ap == default.ap
    else:
        gains = np.subtract(info["fold_scores_best"], info["fold_scores_default"])
        assert gains.mean() > info["gain_noise"] and info["best"]
    assert info["folds"] == 5 and info["held_out_rows"] >= info["min_rows"]  # 90 rows: 5 x 18
    assert adapted.attack_adapted and not default.attack_adapted
    assert "own_scores" not in json.loads(default.extra)


def test_the_trials_stack_and_each_equals_its_training_alone() -> None:
    ds = load_dataset("digits")
    jobs = [Job(s, (), tuned=True) for s in trial_specs(SPEC)]
    stacked = dict(run_jobs(jobs, ds, LOCAL, STACKED))
    alone = dict(run_jobs(jobs, ds, LOCAL, ONE_BY_ONE))
    for i in range(len(jobs)):
        s, a = stacked[i][-1], alone[i][-1]
        assert json.loads(s.extra).get("vectorized") is True  # different settings, one stack
        assert "vectorized" not in json.loads(a.extra)
        assert s.ap == a.ap and s.mp == pytest.approx(a.mp, abs=1 / 360)
        assert json.loads(s.extra)["own_scores"]["folds"] == pytest.approx(
            json.loads(a.extra)["own_scores"]["folds"], abs=1 / 18
        )


def _with_own(record: Any, folds: list[float]) -> Any:
    extra = json.loads(record.extra)
    extra["own_scores"] = {**extra["own_scores"], "folds": folds}
    return dataclasses.replace(record, extra=json.dumps(extra))


def test_the_choice_reads_the_attackers_own_scores_and_beats_their_noise() -> None:
    """``combine`` picks the trial with the best own mean, whatever the judge's AP, and
    keeps the default when the paired gain over the folds is within its noise."""
    jobs = [Job(s, (), tuned=True) for s in trial_specs(SPEC)]
    trials = [out for _, out in sorted(run_jobs(jobs, load_dataset("digits"), LOCAL, STACKED))]
    low, high = [0.1] * 5, [0.8, 0.9, 0.8, 0.85, 0.9]
    mixed = [trials[0], trials[1], trials[2]]
    mixed = [[_with_own(t[-1], f)] for t, f in zip(mixed, (low, [0.2] * 5, high), strict=True)]
    default, adapted = combine(SPEC, mixed)
    info = json.loads(adapted.extra)["adapted"]
    assert adapted.ap == trials[2][-1].ap and adapted.mp == trials[2][-1].mp
    assert info["best"] and not info["default_kept"]
    assert default.ap == trials[0][-1].ap and default.label == "lrb"
    noisy = [[_with_own(t[-1], f)] for t, f in zip(
        trials, ([0.1, 0.5, 0.1, 0.5, 0.1], [0.5, 0.1, 0.5, 0.1, 0.6], [0.0] * 5), strict=True
    )]  # fmt: skip
    _, kept = combine(SPEC, noisy)
    info = json.loads(kept.extra)["adapted"]
    assert info["default_kept"] and "not above its noise" in info["why_default"]
    assert kept.ap == trials[0][-1].ap and info["best"] == {}


def test_the_attacker_scores_on_its_own_rows_only() -> None:
    """Its own score is the same with every party's test rows and test labels replaced:
    it reads its own labelled training rows and the deployed model's answers on them."""
    from trainables.trial import prepare_parties, train_local_parties

    spec = trial_specs(SPEC)[1]
    prepared = prepare_parties(spec, load_dataset("digits"), [("lrb", spec.train_attack_params)])
    parties = train_local_parties(prepared, 3)[1]
    adapt = budget(SPEC)
    assert adapt is not None
    before = own_scores("lrb", spec.train_attack_params, adapt, parties, spec.seed)
    for p in parties:
        p.X_test = torch.full_like(p.X_test, float("nan"))
    parties[-1].y_test = torch.zeros_like(parties[-1].y_test)
    assert own_scores("lrb", spec.train_attack_params, adapt, parties, spec.seed) == before
    scores, held, why = before
    assert why == "" and len(scores) == 5 and held >= 10


def test_one_trial_is_the_default_kept() -> None:
    """``trials: 1``: the budget holds only the default; the cell still writes both records,
    as the plan counts them."""
    spec = SPEC.model_copy(update={"train_attack_adapt": {"trials": 1, "sampler": "random"}})
    default, adapted = NNKind().run(spec, load_dataset("digits"), LOCAL, [])
    info = json.loads(adapted.extra)["adapted"]
    assert adapted.label == "lrb@adapted" and info["trainings"] == 1 and info["default_kept"]
    assert adapted.ap == default.ap and adapted.mp == default.mp


def test_too_few_own_rows_keeps_the_default_with_the_reason() -> None:
    """breast_cancer: LRB knows 10 rows of the other class, which cannot give 2 folds of
    min_rows=10; the cell still trains its trials, and the adapted record is the default's."""
    spec = TrialSpec.build(
        dataset="breast_cancer", epochs=2, train_attack="lrb", train_attack_adapt=ADAPT
    )
    default, adapted = NNKind().run(spec, load_dataset("breast_cancer"), LOCAL, [])
    info = json.loads(adapted.extra)["adapted"]
    assert info["default_kept"] and "cannot give 2 folds" in info["why_default"]
    assert info["held_out_rows"] == 0 and info["best"] == {}
    assert info["trial_own_scores"] == [None, None, None]  # JSON has no NaN
    assert adapted.ap == default.ap and adapted.mp == default.mp


def test_amc_tunes_its_optimizer_over_trainings() -> None:
    spec = TrialSpec.build(
        dataset="digits", epochs=2, train_attack="amc",
        train_attack_params={"epochs": 2, "steps_per_epoch": 40},
        train_attack_adapt={"trials": 2, "sampler": "random"},
    )  # fmt: skip
    default, adapted = NNKind().run(spec, load_dataset("digits"), LOCAL, [])
    info = json.loads(adapted.extra)["adapted"]
    assert default.label == "amc[epochs=2,steps_per_epoch=40]"
    assert adapted.label == default.label + "@adapted" and info["folds"] == 4  # 40 rows: 4 x 10
    assert set(info["trial_params"][1]) == {"gamma_lr_scale_up", "max_ratio"}
    assert info["trial_params"][0]["gamma_lr_scale_up"] == 1.0


SPACE = """
name: lrb_budget
base: {dataset: digits, n_parties: 2, epochs: 3}
grid: {seed: [0, 1]}
attacks:
  - {name: pmc}
  - {name: lrb, adapt: {trials: 4, sampler: random}}
"""


def _plan(text: str, where: Any) -> Any:
    path = where / "space.yaml"
    path.write_text(text)
    return expand(load_space(str(path)))


def test_the_plan_states_the_budget_and_the_estimate_prices_it(tmp_path: Any) -> None:
    plan = _plan(SPACE, tmp_path)
    tuned = [t for t in plan.trainings if t.spec.train_attack == "lrb"]
    assert len(tuned) == 2 and all(trainings(t.spec) == 4 for t in tuned)
    assert plan.n_trainings == 4 and plan.n_trial_trainings == 2 * 3
    assert plan.summary()["attacker_trial_trainings"] == 6
    one = cost(Training(tuned[0].spec.model_copy(update={"train_attack_adapt": {}}), {}))
    four = cost(tuned[0])
    assert four.training() == pytest.approx(4 * one.training())
    # a pack holds a cell's trials: the cell is one training of the plan
    packs = make_packs(plan.trainings, "auto", 2, 60.0)
    assert sum(len(p.trainings) for p in packs) == 4


def test_a_kind_with_its_own_loop_drops_the_tuned_cell_at_plan_time(tmp_path: Any) -> None:
    """FedCVT hosts AMC at fixed settings; tuned, its trials could not stack there."""
    space = SPACE.replace("epochs: 3}", "epochs: 3, ssl_variant: fedcvt, aligned_ratio: 0.2}")
    space = space.replace("{name: lrb,", "{name: amc,")
    plan = _plan(space, tmp_path)
    reasons = [d.reason for d in plan.dropped if d.cell.get("attack") == "amc"]
    assert len(reasons) == 2 and all("stack on the plain NN kind only" in r for r in reasons)
    assert plan.n_trial_trainings == 0
