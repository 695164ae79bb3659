"""Adaptive attacks (issue 43): the attacker tunes on its own rows only, the judge scores
once at the chosen setting, records carry both settings, the analysis ranks both ways."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis.ranking import DEFAULT_WEIGHTS
from analysis.report import build, prepare, write
from analysis.synthetic import frame, training
from analysis.worst_case import default_view, worst_case, worst_lines, worst_view
from sweep_engine.packs import cost
from sweep_engine.plan import Training
from trainables.attacks import ATTACKS
from trainables.attacks.harness import attacker_index, draw_aux, evaluate, make_view, peer_index
from trainables.attacks.judge import Judge
from trainables.attacks.tuning import (
    Adapt,
    fold_scores,
    holdout_view,
    masked_view,
    plan_folds,
    runs,
    tune,
)
from trainables.data import load_dataset
from trainables.errors import ConfigError
from trainables.results.labels import adapted_label, base_label, is_adapted
from trainables.spec import TrialSpec
from trainables.trial import prepare_parties, train_local_parties

SPEC = TrialSpec.build(dataset="digits", epochs=3, seed=1)
CHEAP_PMC = {"epochs": 2, "steps_per_epoch": 40}  # the tuning's rules, not PMC's strength


@pytest.fixture(scope="module")
def trained() -> list[Any]:
    ds = load_dataset("digits")
    prepared = prepare_parties(SPEC, ds, [("pmc", {}), ("tbm", {})])  # TBM: a message log
    return train_local_parties(prepared, int(SPEC.epochs))[1]  # type: ignore[arg-type]


def view_of(parties: list[Any], name: str) -> Any:
    info = ATTACKS.get(name).info
    who = attacker_index(info, len(parties))
    y = parties[-1].y_train.cpu().numpy()
    aux = draw_aux(info, y, parties[peer_index(who)].X_train.cpu().numpy(), SPEC.seed)
    return make_view(parties[who], info, aux, None, SPEC.seed)


def test_labels_round_trip() -> None:
    assert (
        adapted_label("pmc") == "pmc@adapted"
        and adapted_label("tbm@strong") == "tbm@strong+adapted"
    )
    for label in ("pmc", "tbm@strong", "pmc[lr=0.01]"):
        assert is_adapted(adapted_label(label)) and not is_adapted(label)
        assert base_label(adapted_label(label)) == label


def test_the_tuning_view_holds_no_test_row_and_no_held_out_label(trained: list[Any]) -> None:
    view = view_of(trained, "pmc")  # passive: no labels but its 4 per class
    tuning, _, held = holdout_view(view, ATTACKS.get("pmc").info, 0.5)
    assert view.y_train is None and tuning.y_train is None
    assert held == 20 and len(tuning.aux.label_rows) == 20  # 2 + 2 of 4 per class
    held_rows = np.setdiff1d(view.aux.label_rows, tuning.aux.label_rows)
    assert len(held_rows) == 20
    # the test rows of the tuning view are the held-out rows' own features
    np.testing.assert_array_equal(tuning.X_test, view.X_train[held_rows])
    judge_test = trained[0].X_test.cpu().numpy()
    for row in tuning.X_test:  # none of the judge's test rows is in the tuning view
        assert not (np.abs(judge_test - row).sum(axis=1) == 0).any()
    assert not np.shares_memory(tuning.X_test, view.X_train)


@pytest.mark.parametrize("name", ["pmc", "tbm"])
def test_tuning_never_reads_the_judges_rows(trained: list[Any], name: str) -> None:
    """The same choice with the view's test rows replaced by NaN (and, for the active
    attacker, its labels of the held-out aux rows are not what it scores on): the tuner
    reads the attacker's own training rows and aux only."""
    view = view_of(trained, name)
    params = CHEAP_PMC if name == "pmc" else {}
    attack = ATTACKS.create(name, **params)
    adapt = Adapt(trials=3)
    got = tune(attack, view, adapt)
    blind = dataclasses.replace(view, X_test=np.full_like(view.X_test, np.nan))
    again = tune(attack, blind, adapt)
    assert (got.best, got.self_default, got.self_best) == (
        again.best,
        again.self_default,
        again.self_best,
    )
    assert got.trials == 3 and got.self_best >= got.self_default


def test_the_folds_of_a_setting_train_as_one_stack_with_each_folds_own_score(
    trained: list[Any],
) -> None:
    """``fold_scores`` runs a setting's k folds as one ``run_many`` (PMC: k completions
    stacked); each fold scores what it scores run alone."""
    view = view_of(trained, "pmc")
    info = ATTACKS.get("pmc").info
    masks, _ = plan_folds(view, info, Adapt(trials=2))
    folds = [masked_view(view, info, m) for m in masks]
    attack = ATTACKS.create("pmc", **CHEAP_PMC)
    alone = [score(attack.run(tuning)) for tuning, score, _ in folds]
    assert len(folds) >= 2
    np.testing.assert_array_equal(fold_scores(attack, folds), np.array(alone))


def test_the_judge_scores_once_per_setting_and_never_during_tuning(trained: list[Any]) -> None:
    judge = Judge(trained)
    calls: list[tuple[str, int]] = []

    def views(info: Any) -> tuple[int, Any]:
        return attacker_index(info, len(trained)), view_of(trained, "tbm")

    def score_of(guess: Any, who: int) -> tuple[Any, dict[str, Any]]:
        calls.append((type(guess).__name__, len(guess.rows)))
        return judge.score(guess, who), {}

    out = evaluate([("tbm", {"adapt": {"trials": 4}})], views, score_of)
    default, adapted = out
    assert default.extra["attack_label"] == "tbm"
    assert adapted.extra["attack_label"] == "tbm@adapted"
    record = adapted.extra["adapted"]
    assert record["trials_run"] == 4 and record["default_label"] == "tbm"
    assert record["held_out_rows"] > 0 and record["sampler"] == "tpe"
    n_guessed = len(trained[0].X_train) - len(view_of(trained, "tbm").aux.feature_rows)
    expected = 2 if record["best"] else 1  # the default reused when it won
    assert calls == [("FeatureGuess", n_guessed)] * expected
    if record["best"]:
        assert adapted.extra["attack_params"] == {
            k: v for k, v in record["best"].items() if v != ATTACKS.get("tbm").defaults[k]
        }
    else:
        assert adapted.score == default.score


def test_tbm_gains_on_its_own_rows_at_vflairs_weak_default(trained: list[Any]) -> None:
    """VFLAIR's TBM (50 epochs at lr 1e-4) underfits (tbm.py); its attacker sees that on
    its held-out aux rows and picks a setting that scores higher there."""
    got = tune(ATTACKS.create("tbm"), view_of(trained, "tbm"), Adapt(trials=8))
    assert got.best and got.self_best > got.self_default + 0.1


def test_what_cannot_adapt_is_refused() -> None:
    from trainables.attacks.tuning import check_adapt

    for name, why in (("bli", "declares no tunable"), ("amc", "training-time attack")):
        with pytest.raises(ConfigError, match=why):
            check_adapt(ATTACKS.get(name), Adapt())
    check_adapt(ATTACKS.get("amc"), Adapt(sampler="random"))  # its trials train as one stack
    with pytest.raises(ConfigError, match="sampler"):
        check_adapt(ATTACKS.get("pmc"), Adapt(sampler="grid"))


def test_the_plans_cost_counts_the_tuning() -> None:
    spec = TrialSpec.build(dataset="digits")
    plain = cost(Training(spec, {}, attacks=(("pmc", {}),)), remote=False)
    tuned = cost(Training(spec, {}, attacks=(("pmc", {"adapt": {"trials": 8}}),)), remote=False)
    # cross-validated (the default): each trial scored on up to 5 folds, plus the default
    # and the chosen setting; one holdout: one run per trial
    assert runs({"adapt": {"trials": 8}}) == 8 * 5 + 2 and runs({}) == 1
    assert runs({"adapt": {"trials": 8, "method": "holdout"}}) == 10
    assert runs({"adapt": {"trials": 8, "folds": 3}}) == 8 * 3 + 2
    assert tuned.attacks == pytest.approx(42 * plain.attacks)


# -- issue 65: cross-validated choices, on enough rows, that beat their own noise ----------
def test_folds_cover_the_aux_rows_once_and_none_holds_fewer_than_min_rows(
    trained: list[Any],
) -> None:
    from trainables.attacks.tuning import plan_folds

    view = view_of(trained, "pmc")  # digits: 4 labelled rows per class, 40 in all
    info = ATTACKS.get("pmc").info
    masks, why = plan_folds(view, info, Adapt())
    assert why == "" and len(masks) == 4  # auto: 40 rows // min_rows 10, at most 5
    stacked = np.stack(masks)
    assert (stacked.sum(axis=0) == 1).all()  # every aux row held out exactly once
    assert all(m.sum() >= 10 for m in masks)
    labels = view.aux.labels
    for m in masks:  # stratified: each fold holds every class once (4 per class, 4 folds)
        assert sorted(labels[m].tolist()) == list(range(10))
    none, why = plan_folds(view, info, Adapt(min_rows=25))
    assert none == [] and "40 auxiliary rows cannot give 2 folds of at least min_rows=25" in why
    single, _ = plan_folds(view, info, Adapt(method="holdout", holdout=0.5))
    assert len(single) == 1 and single[0].sum() == 20
    few, why = plan_folds(view, info, Adapt(method="holdout", holdout=0.25, min_rows=15))
    assert few == [] and "10 held-out auxiliary rows of 40, fewer than min_rows=15" in why


def test_the_tuned_setting_replaces_the_default_only_above_its_fold_noise() -> None:
    from scipy.stats import t

    from trainables.attacks.tuning import choose

    default = np.array([0.10, 0.12, 0.08, 0.11])
    steady = default + np.array([0.05, 0.06, 0.05, 0.04])
    replace, noise, why = choose(default, steady, "cv")
    gain = steady - default
    assert replace and why == ""
    assert noise == pytest.approx(t.ppf(0.95, 3) * gain.std(ddof=1) / 2)
    noisy = default + np.array([0.30, -0.20, 0.25, -0.15])  # mean +0.05, sd 0.26
    replace, noise, why = choose(default, noisy, "cv")
    assert not replace and noise > 0.05 and why.startswith("gain +0.0500 over 4 fold(s)")
    assert choose(default, default, "cv")[2] == "no setting scored above the default"
    assert choose(default[:1], default[:1] + 0.01, "holdout")[0]  # one split: any gain


def test_no_record_chooses_on_fewer_held_out_rows_than_the_minimum(trained: list[Any]) -> None:
    """Every adapted record either scored each setting on folds of at least ``min_rows``
    held-out rows, or says it was not tuned and why (and keeps the default's score)."""
    judge = Judge(trained)

    def views(info: Any) -> tuple[int, Any]:
        return attacker_index(info, len(trained)), view_of(trained, "pmc")

    def score_of(guess: Any, who: int) -> tuple[Any, dict[str, Any]]:
        return judge.score(guess, who), {}

    for min_rows in (10, 25):
        budget = {"trials": 2, "min_rows": min_rows}
        default, adapted = evaluate([("pmc", {**CHEAP_PMC, "adapt": budget})], views, score_of)
        record = adapted.extra["adapted"]
        assert record["min_rows"] == min_rows and record["method"] == "cv"
        if record["why_default"].startswith("not tuned"):
            assert record["folds"] == 0 and record["default_kept"] and record["trials_run"] == 0
            assert adapted.score == default.score
        else:
            assert record["held_out_rows"] >= min_rows and record["folds"] >= 2
            assert len(record["fold_scores_default"]) == record["folds"]
        assert (min_rows == 25) == record["why_default"].startswith("not tuned")


# -- the analysis: default vs worst case --------------------------------------------------
DEFENSES = (("none", None), ("gdp", 0.1), ("mid", 1.0))
# (defense) -> (advantage at default, at adapted): the adapted attack breaks MID
ADV = {"none": (0.6, 0.7), "gdp": (0.1, 0.15), "mid": (0.05, 0.6)}


def records(seeds: int = 4) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    rows = []
    for seed in range(seeds):
        for defense, strength in DEFENSES:
            default, adapted = (v + rng.normal(0, 0.01) for v in ADV[defense])
            mp = 0.9 - (0.0 if defense == "none" else 0.02)
            attacks = {"tbm": ("FR", 0.5 + default / 2, None)}
            part = training(mp, attacks, defense=defense, defense_param=strength, seed=seed)
            extra = {"attack_label": "tbm@adapted", "adapted": {"trials_run": 8}}
            twin = {**part[1], "ap": 0.5 + adapted / 2, "extra": json.dumps(extra)}
            part.append(twin)
            for r in part[1:]:
                value = (2 * r["ap"] - 1) if r is twin else default
                r.update(ap_chance=0.5, ap_advantage=value, ap_advantage_se=0.005)
            part[0].update(mp_se=0.001)
            rows += part
    return frame(rows)


def test_views_split_default_and_adapted_records() -> None:
    dcs = prepare(records(), 0.5)
    default, worst = default_view(dcs), worst_view(dcs)
    assert set(default["attack"].astype(str)) == {"none", "tbm"}
    assert len(default) == len(worst) == len(dcs) - 12  # 4 seeds x 3 cells adapted
    adv = worst[worst["attack"].astype(str) == "tbm"].groupby("defense")["ap_advantage"].mean()
    assert adv["mid"] == pytest.approx(0.6, abs=0.02)  # the adapted numbers, under tbm


def test_worst_case_ranks_by_the_adapted_attack_and_names_what_moved() -> None:
    found = worst_case(prepare(records(), 0.5), DEFAULT_WEIGHTS)
    assert found is not None
    rows = found.attacks.set_index("defense")
    assert rows.loc["mid", "adv_default"] == pytest.approx(0.05, abs=0.02)
    assert rows.loc["mid", "adv_adapted"] == pytest.approx(0.6, abs=0.02)
    assert rows.loc["mid", "ca_group_default"] == 1 and rows.loc["mid", "ca_group_adapted"] > 1
    cells = found.cells.set_index("defense")
    assert cells.loc["mid", "ca_rank_default"] == 1 and cells.loc["gdp", "ca_rank_worst"] == 1
    assert bool(cells.loc["mid", "group_changed"])
    assert found.tau["tau"].iloc[0] < 1.0  # mid fell from first to below gdp
    text = "\n".join(worst_lines(found))
    assert "mid 1 (1->" in text and "Kendall tau" in text


def test_a_report_reads_the_default_view_and_writes_the_worst_case(tmp_path: Any) -> None:
    report = build(records(), 0.5, DEFAULT_WEIGHTS, [])
    assert report.worst is not None and "worst_case" in report.summary
    assert not report.dcs["attack"].astype(str).str.endswith("adapted").any()
    assert report.answer is not None
    assert set(report.answer.by_attack["attack"]) == {"tbm"}  # counted once, at default
    assert build(records().pipe(default_view), 0.5, DEFAULT_WEIGHTS, []).worst is None
    out = write(report, tmp_path / "report", [], plots=False)
    cells = pd.read_csv(out / "worst_case_cells.csv")
    assert set(cells["defense"]) == {"none", "gdp", "mid"}
    assert "Worst case" in (out / "index.md").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["worst_case"]["cells_changed"]
    from analysis.paper_tables import write_paper_tables  # issue 64: paper-ready, same numbers

    md = write_paper_tables(report, tmp_path, "markdown").read_text()
    mid = report.worst.attacks.set_index("defense").loc["mid"]
    assert "**Worst case (tuned attacks): " in md
    assert f"| {mid['adv_default']:.3f} | {mid['adv_adapted']:.3f} | {mid['gain']:+.3f} |" in md


def test_mlflow_logs_both_settings_under_legal_names() -> None:
    from analysis.tracking import training_payload

    rows = records(seeds=1)
    one = rows[rows["trial_id"] == rows["trial_id"].iloc[0]]
    _, metrics, _ = training_payload(one)
    assert {"ap/tbm", "ap/tbm_adapted"} <= set(metrics)
    assert metrics["ap/tbm"] != metrics["ap/tbm_adapted"]


def test_the_shipped_space_plans_every_evaluation_adapted() -> None:
    from sweep_engine.plan import expand
    from sweep_engine.space import load_space

    plan = expand(load_space("adaptive_attacks"))
    assert plan.n_trainings == 19 * 3 and plan.n_evaluations == plan.n_adapted == 2 * 57
    for planned in plan.trainings:
        assert [p["adapt"]["trials"] for _, p in planned.attacks] == [8, 8]


def test_the_estimate_learns_what_a_tuning_run_costs(tmp_path: Any) -> None:
    from sweep_engine.costs import Costs, attack_key, train_key, tuning_runs
    from sweep_engine.probe import seconds_of as _seconds

    spec = TrialSpec.build(dataset="digits")
    costs = Costs(path=tmp_path / "costs.json")
    costs.add_training(train_key(spec), 0.0, 0.1, "sweep")
    costs.add_evaluation(attack_key("pmc", spec), 2.0, "sweep")
    tuned = Training(spec, {}, attacks=(("pmc", {"adapt": {"trials": 8}}),))
    got = _seconds(tuned, costs, remote=False)
    # cross-validated (the default), k unknown before the run: 8 trials x 5 folds + the choice
    assert got is not None and got[1] == pytest.approx(2.0 + 41 * 2.0)  # the default's per run
    assert tuning_runs(json.dumps({"adapted": {"trials_run": 8}})) == 9  # one holdout
    assert tuning_runs(json.dumps({"adapted": {"trials_run": 8, "folds": 4}})) == 33
    assert tuning_runs(json.dumps({"adapted": {"trials_run": 0, "folds": 0}})) == 1  # not tuned
    assert tuning_runs("{}") == 0
    costs.add_evaluation(attack_key("pmc@adapted", spec), 18.0 / 9, "sweep")  # as learn() does
    costs.add_evaluation(attack_key("pmc@adapted", spec), 0.5, "sweep")
    got = _seconds(tuned, costs, remote=False)
    assert got is not None and got[1] == pytest.approx(2.0 + 41 * 1.25)  # the median measured
