"""The VFLAIR-code columns benchmark's bookkeeping (``benchmarks/vflair_code_columns.py``; needs no
data): which measured entries are its points, VFLAIR's DCS per cell, and the three-way
summary."""

from __future__ import annotations

import math

from benchmarks.vflair_code_columns import SUFFIX, points, summary, tdcs


def test_points_are_the_table_settings_entries_only() -> None:
    measured = {
        "meta": {}, "lrb": {"seeds": []}, "lrb_batch128": {"seeds": []},
        "lrb" + SUFFIX: {"seeds": [{"seed": 0}]},
        "lrb_gdp0.0001" + SUFFIX: {"seeds": [{"seed": 1}]},
        "lrb_mid1e-08" + SUFFIX: {"seeds": []},
        "lrb_gs99.5_batch273_lr0.005_epochs30": {"seeds": []},  # another lr: not a point
    }  # fmt: skip
    got = points(measured)
    assert set(got) == {("none", 0.0), ("gdp", 1e-4), ("mid", 1e-8)}
    assert got[("gdp", 1e-4)] == [{"seed": 1}]
    measured["nsb_gs99.5" + SUFFIX] = {"seeds": [{"seed": 2}]}
    assert points(measured, "nsb") == {("gs", 99.5): [{"seed": 2}]}


def test_tdcs_is_vflairs_dcs_with_the_mp_gap_clipped_at_zero() -> None:
    assert math.isclose(tdcs([0.0], [0.9], [0.9]), 1.0)
    assert math.isclose(tdcs([0.0], [0.95], [0.9]), 1.0)  # a better MP is no gap
    want = 1.0 / (1.0 + math.sqrt(0.5 * 0.4**2 + 0.5 * 0.1**2))
    assert math.isclose(tdcs([0.4, 0.4], [0.8, 0.8], [0.9, 0.9]), want)


def test_summary_sets_the_three_columns_against_each_other() -> None:
    cells = [
        {"ap_agrees": True, "tdcs_ours": 0.80, "tdcs_vflair_code": 0.78, "tdcs_published": 0.66},
        {"ap_agrees": False, "tdcs_ours": 0.95, "tdcs_vflair_code": 0.94, "tdcs_published": 0.83},
        {"ap_agrees": True, "tdcs_ours": 0.70, "tdcs_vflair_code": 0.71, "tdcs_published": 0.72},
        {"ap_agrees": True, "tdcs_ours": 0.9, "tdcs_vflair_code": 0.9, "tdcs_published": None},
    ]
    out = summary(cells)
    assert out["cells"] == 3 and out["ap_agree"] == 3
    assert out["ours_vs_vflair_code"] == {"mean_abs_gap": 0.0133, "over_tolerance": 0}
    assert out["ours_vs_published"]["over_tolerance"] == 2
    gaps = (0.78 - 0.66) + (0.94 - 0.83) + (0.72 - 0.71)  # |VFLAIR's code - published|
    assert math.isclose(out["vflair_code_vs_published"]["mean_abs_gap"], gaps / 3, abs_tol=1e-4)
    # of the 3 pairs, (first, third) is ordered the other way round on both sides
    assert out["tau_ours_vs_published"] == out["tau_vflair_code_vs_published"] == 0.333
