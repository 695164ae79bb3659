"""``benchmarks.adaptive_attacks``' tables (issue 65): the rows each attacker chooses on per
dataset, and the count of test-row wins of the tuned setting over the default."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from benchmarks.adaptive_attacks import beats, pairs, widths


def test_the_rows_each_attacker_chooses_on_are_the_tuners() -> None:
    got = widths()
    digits, bc = got["digits"], got["breast_cancer"]
    assert isinstance(digits, dict) and isinstance(bc, dict)
    assert digits["test_rows"] == 360 and digits["judge_half_width"] == pytest.approx(0.052, 1e-2)
    # PMC: 4 labels per class x 10 classes; cv folds of at least min_rows=10
    assert digits["pmc"]["rows"] == 40 and digits["pmc"]["cv_folds"] == 4
    assert digits["pmc"]["cv_fold_rows"] == 10 and digits["pmc"]["fold_half_width"] == 0.31
    # LRB scores on its known rows of the 9 other classes
    assert digits["lrb"]["rows"] == 90 and digits["lrb"]["cv_folds"] == 5
    for attack in ("pmc", "amc", "lrb"):  # binary: 8 or 10 rows, not two folds of 10
        assert bc[attack]["cv_folds"] == 0 and "not tuned" in bc[attack]["not_tuned"]
    assert bc["mc"]["rows"] == 80 and bc["mc"]["cv_fold_rows"] == 16


def _record(attack: str, label: str, seed: int, adv: float, adapted: dict | None) -> dict:
    extra = {} if adapted is None else {"adapted": adapted}
    return {"dataset": "digits", "defense": "gdp", "defense_param": 0.1, "seed": seed,
            "attack": attack, "attack_label": label, "attack_adapted": adapted is not None,
            "ap_advantage": adv, "extra": json.dumps(extra)}  # fmt: skip


def test_wins_are_counted_per_pair_of_cell_and_seed() -> None:
    tuned = {"best": {"lr": 0.01}, "held_out_rows": 10, "why_default": ""}
    kept = {"best": {}, "held_out_rows": 10, "why_default": "gain +0.01 not above its noise"}
    none = {"best": {}, "held_out_rows": 0, "why_default": "not tuned: 8 auxiliary rows"}
    rows = [
        _record("none", "none", 0, 0.0, None),
        _record("pmc", "pmc", 0, 0.30, None), _record("pmc", "pmc@adapted", 0, 0.40, tuned),
        _record("pmc", "pmc", 1, 0.30, None), _record("pmc", "pmc@adapted", 1, 0.20, tuned),
        _record("pmc", "pmc", 2, 0.30, None), _record("pmc", "pmc@adapted", 2, 0.30, kept),
        _record("lrb", "lrb", 0, 0.0, None), _record("lrb", "lrb@adapted", 0, 0.0, none),
    ]  # fmt: skip
    table = pairs(pd.DataFrame(rows))
    assert len(table) == 4 and set(table["attack"]) == {"pmc", "lrb"}
    got = beats(table)
    pmc = got["digits pmc"]
    assert (pmc["higher"], pmc["equal"], pmc["lower"]) == (1, 1, 1)
    assert (pmc["tuned"], pmc["kept"], pmc["not_tuned"]) == (2, 1, 0)
    assert pmc["mean_gain"] == pytest.approx(0.0) and pmc["gain_ci"] is not None
    lrb = got["digits lrb"]
    assert lrb["not_tuned"] == 1 and lrb["not_tuned_why"] == ["not tuned: 8 auxiliary rows"]
    assert lrb["gain_ci"] is None  # one pair: no interval below three
