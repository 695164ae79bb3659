"""Answers a researcher can trust: chance-aware DCS, honest intervals, rank groups, ties,
and the printed answer, on hand-built records scored by the real chance rules.

The attack rows here are what the judge would write: each guess (labels, AUC scores) goes
through ``trainables.attacks.chance.score_labels`` on the same test rows, and its AP,
chance, advantage and errors become the record.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.answer import answer_lines, build_answer
from analysis.axes import flatten
from analysis.by_axis import best_cells, by_axis_table, per_training
from analysis.ranking import DEFAULT_WEIGHTS, ranking_table
from analysis.report import prepare
from analysis.synthetic import frame, row
from analysis.uncertainty import Z
from trainables.attacks.base import LabelGuess
from trainables.attacks.chance import Score, accuracy_se, score_labels
from trainables.records import RECORD_SCHEMA

ROOT = Path(__file__).resolve().parents[1]
N_TEST = 1000
TRUTH = np.r_[np.zeros(760, dtype=np.int64), np.ones(240, dtype=np.int64)]  # majority 0.76
ROWS = np.arange(N_TEST)


def labels_guess(labels: np.ndarray) -> dict[str, float]:
    """The record fields the judge writes for a label guess on TRUTH."""
    return fields_of(score_labels(LabelGuess("test", ROWS, labels=labels), TRUTH, TRUTH))


def fields_of(s: Score) -> dict[str, float]:
    return {
        "ap": s.ap,
        "ap_chance": s.chance,
        "ap_advantage": s.advantage,
        "ap_advantage_se": s.advantage_se,
        "ap_collapse": s.collapse,
    }


def auc_guess(auc: float) -> dict[str, float]:
    """Scores whose AUC on TRUTH is exactly ``auc`` (a share of pairs ranked right)."""
    positives = np.flatnonzero(TRUTH == 1)
    scores = np.where(TRUTH == 1, 1.0, 0.0)
    flip = positives[: round((1 - auc) * len(positives))]
    scores[flip] = -1.0  # these positives rank below every negative
    s = score_labels(LabelGuess("test", ROWS, scores=scores), TRUTH, TRUTH)
    assert s.ap == pytest.approx(auc, abs=1e-3)
    return fields_of(s)


def some_right(share: float, seed: int) -> np.ndarray:
    """Labels right on about ``share`` of the rows (the rest flipped), varied by seed."""
    rng = np.random.default_rng(seed)
    wrong = rng.random(N_TEST) > share
    return np.where(wrong, 1 - TRUTH, TRUTH)


def cell(mp: float, defense: str, param: float | None, seed: int, **attacks: dict) -> list:
    """One training's rows: the clean row and one per attack (fields as the judge writes)."""
    fields: dict[str, Any] = {"defense": defense, "defense_param": param, "seed": seed}
    se = accuracy_se(mp, N_TEST)
    rows = [row(mp=mp, mp_se=se, **fields)]
    for name, scored in attacks.items():
        kind = "LI"
        rows.append(row(mp=mp, mp_se=se, attack=name, attack_type=kind, **scored, **fields))
    return rows


def collapse_sweep(seeds: tuple[int, ...] = (0, 1, 2)) -> list[dict]:
    rows: list[dict] = []
    for seed in seeds:
        rows += cell(0.85, "none", None, seed, pmc=labels_guess(some_right(0.9, seed)))
        minority = labels_guess(np.ones(N_TEST, dtype=np.int64))  # AP 0.24: "protection"
        majority = labels_guess(np.zeros(N_TEST, dtype=np.int64))  # AP 0.76: "leak"
        rows += cell(0.84, "gdp", 0.1, seed, pmc=minority)
        rows += cell(0.84, "gdp", 0.01, seed, pmc=majority)
        rows += cell(0.84, "gs", 99.0, seed, pmc=labels_guess(some_right(0.95, seed + 10)))
    return rows


def test_minority_and_majority_guesses_have_no_advantage_and_equal_chance_aware_dcs() -> None:
    dcs = prepare(frame(collapse_sweep()), 0.5)
    attacked = dcs[dcs["attack"] == "pmc"]
    minority = attacked[attacked["defense_param"] == 0.1]
    majority = attacked[attacked["defense_param"] == 0.01]
    assert minority["ap"].to_numpy() == pytest.approx([0.24] * 3)
    assert majority["ap"].to_numpy() == pytest.approx([0.76] * 3)
    assert (minority["adv"] == 0).all() and (majority["adv"] == 0).all()
    assert (minority["ap_collapse"] == 1).all()
    # VFLAIR's DCS tells them apart (the blind spot); the chance-aware one does not
    assert minority["dcs"].mean() > majority["dcs"].mean() + 0.1
    assert minority["ca_dcs"].to_numpy() == pytest.approx(majority["ca_dcs"].to_numpy())
    ranking = ranking_table(dcs, DEFAULT_WEIGHTS)
    by = ranking.set_index(["defense", "strength"])
    assert by.loc[("gdp", 0.1), "ca_cdcs"] == pytest.approx(by.loc[("gdp", 0.01), "ca_cdcs"])
    assert by.loc[("gdp", 0.1), "rank"] < by.loc[("gdp", 0.01), "rank"]  # VFLAIR's, unchanged
    # the two collapsed cells tie exactly at the top and are named as tied
    assert by.loc[("gdp", 0.1), "ca_group"] == by.loc[("gdp", 0.01), "ca_group"] == 1
    assert by.loc[("gdp", 0.1), "ca_tied"] and by.loc[("gdp", 0.01), "ca_tied"]
    assert by.loc[("gs", 99.0), "ca_group"] > 1  # a real advantage: told apart from them


def test_an_auc_below_half_is_worth_its_mirror() -> None:
    rows: list[dict] = []
    for seed in (0, 1, 2):
        rows += cell(0.9, "none", None, seed, ns=auc_guess(0.9))
        rows += cell(0.9, "mid", 1.0, seed, ns=auc_guess(0.3))
        rows += cell(0.9, "mid", 100.0, seed, ns=auc_guess(0.7))
    dcs = prepare(frame(rows), 0.5)
    low = dcs[(dcs["attack"] == "ns") & (dcs["defense_param"] == 1.0)]
    high = dcs[(dcs["attack"] == "ns") & (dcs["defense_param"] == 100.0)]
    assert low["adv"].to_numpy() == pytest.approx(high["adv"].to_numpy(), abs=2e-3)
    assert low["adv"].iloc[0] == pytest.approx(0.4, abs=2e-3)
    assert low["ca_dcs"].to_numpy() == pytest.approx(high["ca_dcs"].to_numpy(), abs=2e-3)
    assert low["dcs"].iloc[0] > high["dcs"].iloc[0] + 0.1  # VFLAIR counts 0.3 as protection


def test_two_seeds_print_no_interval_and_no_group() -> None:
    dcs = prepare(frame(collapse_sweep(seeds=(0, 1))), 0.5)
    ranking = ranking_table(dcs, DEFAULT_WEIGHTS)
    assert ranking["cdcs_ci_low"].isna().all() and ranking["ca_cdcs_lo"].isna().all()
    assert ranking["ca_group"].isna().all()
    answer = build_answer(dcs, ranking)
    assert answer.cells["mp_half"].isna().all() and answer.by_attack["adv_half"].isna().all()
    text = "\n".join(answer_lines(answer))
    assert not re.search(r"\d±\d", text) and "(n=2)" in text
    assert "no intervals and no groups" in text
    # the exact tie is still named without groups
    assert "=" in text.split("gdp")[1].split("\n")[0]


def test_three_seed_interval_holds_the_test_set_noise_by_hand() -> None:
    dcs = prepare(frame(collapse_sweep()), 0.5)
    answer = build_answer(dcs, ranking_table(dcs, DEFAULT_WEIGHTS))
    none = answer.cells[answer.cells["defense"] == "none"].iloc[0]
    # every seed's MP is 0.85 on 1000 test rows: no spread over seeds, only test noise
    se = math.sqrt(0.85 * 0.15 / N_TEST)
    assert none["mp_half"] == pytest.approx(Z * se, rel=1e-9)
    # GS's advantage varies by seed: t over 3 seeds and the test noise, in quadrature
    gs = answer.by_attack[answer.by_attack["defense"] == "gs"].iloc[0]
    advs = [labels_guess(some_right(0.95, s + 10)) for s in (0, 1, 2)]
    values = np.array([a["ap_advantage"] for a in advs])
    test_se = np.mean([a["ap_advantage_se"] for a in advs])
    t = 4.302652729911275  # Student t, 2 degrees of freedom, 0.975
    by_hand = math.sqrt((t * values.std(ddof=1) / math.sqrt(3)) ** 2 + (Z * test_se) ** 2)
    assert gs["adv"] == pytest.approx(values.mean())
    assert gs["adv_half"] == pytest.approx(by_hand, rel=1e-9)
    assert gs["adv_half"] > Z * test_se  # wider than the test noise alone
    # by_axis.csv's interval is the same one
    flat, axes = flatten(dcs.drop(columns=["scenario"]))
    table = by_axis_table(per_training(flat, [a for a in axes if a != "seed"]), ["defense_param"])
    row_none = table[table["defense_param"].isna()].iloc[0]
    assert row_none["mp_ci_hi"] - row_none["mp_mean"] == pytest.approx(Z * se, rel=1e-9)


def test_best_names_ties_and_gives_no_best_to_a_metric_that_never_varied() -> None:
    rows: list[dict] = []
    for seed in (0, 1, 2):
        for lr, mp in ((0.01, 0.9737), (0.03, 0.9737), (0.1, 0.9737), (0.3, 0.90)):
            spec = json.dumps({"lr": lr, "seed": seed})
            rows += [row(mp=mp, val_mp=mp, lr=lr, seed=seed, spec_json=spec)]
    flat = frame(rows)
    flat["lr"] = [r["lr"] for r in rows]
    table = by_axis_table(per_training(flat, ["lr"]), ["lr"])
    best = best_cells(table, ["lr"])
    mp = best["metrics"]["mp"]
    assert mp["best"]["cell"] == "lr=0.01"
    assert [c["cell"] for c in mp["tied"]] == ["lr=0.03", "lr=0.1"]
    assert best["metrics"]["rounds"]["best"] is None  # 10 rounds everywhere
    assert "never varied" in best["metrics"]["rounds"]["note"]


def test_cli_prints_the_answer_and_names_an_attack_at_chance(tmp_path: Path) -> None:
    rows: list[dict] = []
    for seed in (0, 1, 2):
        chance_level = labels_guess(np.zeros(N_TEST, dtype=np.int64))  # always majority
        rows += cell(0.85, "none", None, seed, pmc=labels_guess(some_right(0.9, seed)),
                     dli=chance_level)  # fmt: skip
        rows += cell(0.83, "gdp", 0.1, seed, pmc=labels_guess(some_right(0.6, seed)),
                     dli=chance_level)  # fmt: skip
    records = tmp_path / "s" / "records"
    records.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=RECORD_SCHEMA), records / "a.parquet")
    out = subprocess.run(
        [sys.executable, "-m", "analysis", str(tmp_path / "s"), "--no-plots", "--no-mlflow"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    assert "at chance even undefended: dli" in text and "pmc" not in text.split("at chance")[1][:5]
    header = next(line for line in text.splitlines() if "ca-C-DCS" in line)
    assert "dli adv" in header and "pmc adv" in header and "cost" in header
    assert (tmp_path / "s" / "report" / "index.html").exists()
    md = (tmp_path / "s" / "report" / "index.md").read_text()
    assert "at chance even undefended: dli" in md and "| gdp | 0.1 |" in md
    summary = json.loads((tmp_path / "s" / "report" / "summary.json").read_text())
    assert summary["at_chance_undefended"] == [{"scenario": "digits", "attack": "dli"}]
    ranking = pd.read_csv(tmp_path / "s" / "report" / "ranking.csv")
    assert {"ca_cdcs", "ca_cdcs_lo", "ca_group", "cdcs", "rank"} <= set(ranking.columns)


def test_records_without_a_baseline_keep_vflair_scores_and_say_so() -> None:
    """Records written before ap_chance existed: VFLAIR's DCS as before, no chance-aware
    score invented for them, and the answer counts them."""
    rows: list[dict] = []
    for seed in (0, 1, 2):
        rows += cell(0.85, "none", None, seed, pmc={"ap": 0.8})
        rows += cell(0.84, "gdp", 0.1, seed, pmc={"ap": 0.24})
    dcs = prepare(frame(rows), 0.5)
    ranking = ranking_table(dcs, DEFAULT_WEIGHTS)
    assert ranking["cdcs"].notna().all() and "ca_cdcs" not in ranking.columns
    answer = build_answer(dcs, ranking)
    assert answer.cells["ca_cdcs"].isna().all()
    assert "6 scored attack rows have no chance baseline" in answer.notes[0]
    assert "note: 6 scored attack rows" in "\n".join(answer_lines(answer))
