"""Issue 64, item 4: CAP as a metric of the contrasts and interactions, paired over seeds
with the same interval, Holm family and verdicts as MP and the advantages; flagged when it
averages an attack whose reference arm is no baseline; never "at chance"."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.baselines import not_a_baseline
from analysis.compare import Compare, parse_compare
from analysis.contrast import contrasts
from analysis.contrast_text import contrast_lines
from analysis.report import prepare
from analysis.synthetic import frame
from tests.test_analysis_contrast import LEAKY_BCD, sweep


def hand_caps(rows: list[dict]) -> pd.DataFrame:
    """CAP per (protocol, defense, seed) from the raw rows: U·E per LI attack (U the
    training's clean MP, E = 1 − AP), the mean over strengths (one here), over attacks."""
    raw = pd.DataFrame(rows)
    clean = raw[raw["attack"] == "none"].set_index("trial_id")["mp"]
    li = raw[raw["attack"] != "none"].copy()
    li["ue"] = li["trial_id"].map(clean) * (1.0 - li["ap"])
    per_attack = li.groupby(["protocol", "defense", "seed", "attack"])["ue"].mean()
    return per_attack.groupby(level=["protocol", "defense", "seed"]).mean().unstack("protocol")


def test_cap_contrast_and_interaction_match_the_records_by_hand() -> None:
    rows = sweep(LEAKY_BCD, seeds=4)
    found = contrasts(prepare(frame(rows), 0.5), parse_compare("protocol=fedsgd:fedbcd"))
    cap = found.table[found.table["metric"] == "cap"].set_index(["kind", "defense"])
    assert cap["defense_param"].isna().all()  # CAP spans the defense's strengths
    caps = hand_caps(rows)
    delta = caps["fedbcd"] - caps["fedsgd"]  # per (defense, seed)
    for defense in ("none", "gdp"):
        row = cap.loc[("contrast", defense)]
        assert row["delta"] == pytest.approx(delta[defense].mean(), abs=1e-12)
        assert row["n"] == 4 and row["lo"] < row["delta"] < row["hi"]
    inter = cap.loc[("interaction", "gdp")]
    assert inter["delta"] == pytest.approx((delta["gdp"] - delta["none"]).mean(), abs=1e-12)
    # fedbcd leaks 0.30 more undefended: lower CAP; G-DP gains 0.40 more advantage under it
    none = cap.loc[("contrast", "none")]
    assert none["delta"] < 0 and none["verdict"] == "fedbcd lower CAP"
    assert inter["delta"] > 0 and inter["verdict"] == "gains more CAP under fedbcd"
    # one family with the rest: 2 contrasts + 1 interaction each on MP, ns, CAP (pmc at chance)
    assert set(found.table["family"]) == {9}
    text = "\n".join(contrast_lines(found))
    assert any(line.split()[:3] == ["none", "-", "CAP"] for line in text.splitlines())
    assert "CAP" in text.split("undefended under fedsgd:")[1].splitlines()[0]  # the arms' CAP


def test_cap_is_never_left_out_as_at_chance() -> None:
    """An attack at chance in both arms is left out; CAP is a utility-privacy product, not
    an advantage, so the chance rule does not apply to it."""
    rows = sweep({k: 0.0 for k in LEAKY_BCD}, seeds=3)  # NS at chance too
    found = contrasts(prepare(frame(rows), 0.5), parse_compare("protocol=fedsgd:fedbcd"))
    assert set(found.left_out["metric"]) == {"ns", "pmc"}
    assert "cap" in set(found.table["metric"])


def test_cap_row_is_flagged_when_it_averages_an_attack_without_a_baseline() -> None:
    table = pd.DataFrame({"metric": ["mp", "cap", "mc_pretrained", "ns"]})
    compare = Compare("ssl_variant", "splitnn", "hssl_simsiam")
    flagged = not_a_baseline(table, compare, ["mc_pretrained", "ns"]) != ""
    assert flagged.tolist() == [False, True, True, False]
    clean = not_a_baseline(table, compare, ["ns"]) != ""
    assert clean.tolist() == [False, False, True, False]
    other = not_a_baseline(table, Compare("ssl_variant", "local_simsiam", "hssl_simsiam"))
    assert (other == "").all()
