"""Contrasts between two settings (``--compare AXIS=A:B``): pairing over seeds, intervals,
interactions, Holm's correction, attacks at chance left out, and the DCS-gap summary."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.compare import arm_of, parse_compare
from analysis.contrast import contrasts, holm, interval_pvalue
from analysis.contrast_text import contrast_lines
from analysis.gaps import dcs_gaps, gap_summary
from analysis.report import prepare
from analysis.synthetic import frame, training
from analysis.uncertainty import Z, half_width, t_quantile
from trainables.errors import ConfigError

FEDBCD = '{"q": 5}'


def sweep(
    adv: dict[tuple[str, str], float],
    seeds: int = 5,
    noise: float = 0.01,
    chance_attack: bool = True,
    extra_context: dict | None = None,
) -> list[dict]:
    """fedsgd vs fedbcd x (none, gdp 0.1) x seeds: NS's advantage from ``adv``
    [(protocol, defense)] plus noise; PMC at chance everywhere (when asked); MP 0.90 under
    fedsgd, 0.88 under fedbcd."""
    rng = np.random.default_rng(7)
    rows = []
    for seed in range(seeds):
        for protocol, params in (("fedsgd", "{}"), ("fedbcd", FEDBCD)):
            for defense, strength in (("none", None), ("gdp", 0.1)):
                value = adv[(protocol, defense)] + rng.normal(0, noise)
                attacks = {"ns": ("LI", 0.5 + value / 2, None)}
                if chance_attack:
                    attacks["pmc"] = ("LI", 0.5, None)
                mp = (0.90 if protocol == "fedsgd" else 0.88) + rng.normal(0, 0.002)
                fields = {"seed": seed, "protocol": protocol, "protocol_params": params}
                fields.update(extra_context or {})
                part = training(mp, attacks, defense=defense, defense_param=strength, **fields)
                for r in part:
                    if r["attack"] == "ns":
                        r.update(ap_chance=0.5, ap_advantage=value, ap_advantage_se=0.005)
                    elif r["attack"] == "pmc":
                        r.update(ap_chance=0.5, ap_advantage=0.0, ap_advantage_se=0.005)
                    else:
                        r.update(mp_se=0.001)
                rows += part
    return rows


LEAKY_BCD = {
    ("fedsgd", "none"): 0.30,
    ("fedsgd", "gdp"): 0.20,  # gdp removes 0.10 under fedsgd
    ("fedbcd", "none"): 0.60,  # fedbcd leaks 0.30 more undefended
    ("fedbcd", "gdp"): 0.10,  # gdp removes 0.50 under fedbcd
}


def test_parse_compare_takes_any_spec_field_and_refuses_the_rest() -> None:
    assert parse_compare("protocol=fedsgd:fedbcd").label == "fedbcd − fedsgd"
    assert parse_compare("split_params.alpha=0.1:10").axis == "split_params.alpha"
    assert parse_compare("aligned_ratio=0.2:0.4").b == "0.4"
    for text, match in (
        ("protocol", "AXIS=A:B"),
        ("colour=a:b", "not one of the spec's fields"),
        ("seed=0:1", "pairs over"),
        ("protocol=fedsgd:fedsgd", "same value"),
    ):
        with pytest.raises(ConfigError, match=match):
            parse_compare(text)
    compare = parse_compare("aligned_ratio=0.2:0.40")
    assert (arm_of(0.2, compare), arm_of(0.4, compare), arm_of(0.3, compare)) == ("a", "b", None)


def test_contrast_is_b_minus_a_paired_over_seeds_as_by_hand() -> None:
    rows = sweep(LEAKY_BCD)
    dcs = prepare(frame(rows), 0.5)
    found = contrasts(dcs, parse_compare("protocol=fedsgd:fedbcd"))
    table = found.table.set_index(["kind", "metric", "defense"])
    ns = table.loc[("contrast", "ns", "none")]
    # by hand, from the rows: per seed fedbcd − fedsgd, undefended NS
    adv = {
        (r["protocol"], r["seed"]): r["ap_advantage"]
        for r in rows
        if r["attack"] == "ns" and r["defense"] == "none"
    }
    diffs = np.array([adv[("fedbcd", s)] - adv[("fedsgd", s)] for s in range(5)])
    assert ns["delta"] == pytest.approx(diffs.mean())
    assert ns["n"] == 5
    se = math.hypot(0.005, 0.005)
    half = math.hypot(float(t_quantile(4)) * diffs.std(ddof=1) / math.sqrt(5), Z * se)
    assert ns["half"] == pytest.approx(half)
    assert ns["verdict"] == "fedbcd leaks more"
    mp = table.loc[("contrast", "mp", "none")]
    assert mp["delta"] == pytest.approx(-0.02, abs=0.004)
    assert mp["verdict"] == "fedbcd lower MP"
    # the interaction: gdp removes 0.5 under fedbcd and 0.1 under fedsgd -> -0.4
    inter = table.loc[("interaction", "ns", "gdp")]
    assert inter["mean_a"] == pytest.approx(-0.10, abs=0.02)
    assert inter["mean_b"] == pytest.approx(-0.50, abs=0.02)
    assert inter["delta"] == pytest.approx(-0.40, abs=0.02)
    assert inter["verdict"] == "protects more under fedbcd"
    assert set(found.table["family"]) == {len(found.table)}  # Holm over the whole table


def test_pmc_at_chance_in_both_arms_is_named_not_contrasted() -> None:
    found = contrasts(
        prepare(frame(sweep(LEAKY_BCD)), 0.5), parse_compare("protocol=fedsgd:fedbcd")
    )
    assert found.left_out[["context", "metric"]].values.tolist() == [["digits", "pmc"]]
    assert "pmc" not in set(found.table["metric"])
    text = "\n".join(contrast_lines(found))
    assert "left out: pmc (at chance undefended under both fedsgd and fedbcd" in text
    for arm, mp, ns in (("fedsgd", 0.90, 0.30), ("fedbcd", 0.88, 0.60)):
        found_line = re.search(rf"undefended under {arm}: MP (\S+)±\S+, ns adv (\S+)±", text)
        assert found_line is not None, text
        assert float(found_line[1]) == pytest.approx(mp, abs=0.003)
        assert float(found_line[2]) == pytest.approx(ns, abs=0.01)
    assert "interaction (does the defense act equally under both?)" in text


def test_no_effect_gives_no_verdict_after_holm() -> None:
    """20 seeds' worth of noise and nothing else: no contrast may claim a difference."""
    same = {k: 0.3 for k in LEAKY_BCD}
    rows = sweep(same, seeds=4, noise=0.05, chance_attack=False)
    found = contrasts(prepare(frame(rows), 0.5), parse_compare("protocol=fedsgd:fedbcd"))
    adv = found.table[found.table["metric"] == "ns"]
    assert set(adv["verdict"]) == {"cannot tell"}
    assert (adv["p_holm"] >= adv["p"]).all()


def test_contexts_are_held_fixed_and_unpaired_seeds_dropped() -> None:
    rows = sweep(LEAKY_BCD, seeds=3) + sweep(LEAKY_BCD, seeds=3, extra_context={"model": "mlp3"})
    rows += [r for r in sweep(LEAKY_BCD, seeds=4) if r["seed"] == 3 and r["protocol"] == "fedbcd"]
    found = contrasts(prepare(frame(rows), 0.5), parse_compare("protocol=fedsgd:fedbcd"))
    assert found.contexts == ["model=mlp2", "model=mlp3"]
    assert set(found.table["n"]) == {3}  # seed 3 has no fedsgd twin


def test_fewer_than_three_seeds_get_no_interval_and_no_verdict() -> None:
    rows = sweep(LEAKY_BCD, seeds=2)
    found = contrasts(prepare(frame(rows), 0.5), parse_compare("protocol=fedsgd:fedbcd"))
    assert found.table["half"].isna().all()
    assert set(found.table["verdict"]) == {"n=2: no verdict"}
    assert any("fewer than 3 paired seeds" in n for n in found.notes)


def test_missing_value_names_what_is_present() -> None:
    dcs = prepare(frame(sweep(LEAKY_BCD, seeds=3)), 0.5)
    with pytest.raises(ConfigError, match="present: fedbcd, fedsgd"):
        contrasts(dcs, parse_compare("protocol=fedsgd:celu"))
    with pytest.raises(ConfigError, match="no record's spec has 'aligned_ratio'"):
        contrasts(dcs, parse_compare("aligned_ratio=0.2:0.4"))


def test_holm_matches_the_step_down_by_hand() -> None:
    table = pd.DataFrame({"p": [0.01, 0.04, 0.03, np.nan]})
    got = holm(table)["p_holm"].tolist()
    assert got[:3] == pytest.approx([0.03, 0.06, 0.06]) and math.isnan(got[3])


def test_p_below_alpha_exactly_when_the_interval_excludes_zero() -> None:
    rng = np.random.default_rng(0)
    mean = rng.normal(0, 0.1, 2000)
    spread, se = rng.uniform(0, 0.05, 2000), rng.uniform(0, 0.05, 2000)
    n = rng.integers(3, 10, 2000).astype(float)
    p = interval_pvalue(mean, spread, se, n - 1)
    half = half_width(spread * np.sqrt(n), n, se)
    assert ((p < 0.05) == (np.abs(mean) > half)).all()
    from scipy.stats import t

    plain = interval_pvalue(mean, spread, np.zeros(2000), n - 1)  # no test-set error: t test
    assert plain == pytest.approx(2 * t.sf(np.abs(mean) / spread, n - 1), abs=1e-9)


def test_gaps_are_chance_aware_b_minus_a_and_leave_out_chance_attacks() -> None:
    dcs = prepare(frame(sweep(LEAKY_BCD)), 0.5)
    pairs = dcs_gaps(dcs, parse_compare("protocol=fedsgd:fedbcd"))
    ns = pairs[(pairs["attack"] == "ns") & (pairs["defense"] == "none")]
    assert (ns["ca_gap"] == ns["ca_dcs_b"] - ns["ca_dcs_a"]).all()
    assert (ns["ca_gap"] < 0).all()  # fedbcd leaks more undefended: lower DCS
    assert pairs.loc[pairs["attack"] == "pmc", "at_chance_both"].all()
    summary = gap_summary(pairs).set_index("attack_type")
    assert summary.loc["LI", "n_pairs"] == 10  # ns x (none, gdp) x 5 seeds; pmc left out
    assert summary.loc["LI", "left_out_at_chance"] == "pmc"
    assert summary.loc["LI", "ca_gap_lo"] <= summary.loc["LI", "mean_ca_gap"]
    assert summary.loc["LI", "mean_ca_gap"] <= summary.loc["LI", "ca_gap_hi"]
    assert np.isfinite(summary.loc["LI", "mean_gap_vflair"])


@pytest.mark.ray
def test_compare_on_a_real_sweep_prints_tables_and_matches_the_records_by_hand(
    tmp_path: Path, ray_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's question end to end on real trainings: fedsgd vs fedbcd q=5, none + G-DP
    at two strengths, NS, 3 seeds (docs/analysis.md's space); the space's own
    ``analysis.compare`` is what ``analyze`` prints, and one Δ equals the records' by hand."""
    import ray

    from analysis.cli import main as analysis_main
    from benchmarks.compare_walkthrough import SPACE, by_hand, cap_by_hand
    from benchmarks.compare_walkthrough import printed as written
    from sweep_engine.cli import main as sweep_main

    space = tmp_path / "fedbcd_ns.yaml"
    space.write_text(SPACE)
    results = tmp_path / "results"
    address = ray.get_runtime_context().gcs_address
    argv = ["--space", str(space), "--results", str(results), "--address", address]
    assert sweep_main([*argv, "--no-mlflow"]) == 0
    capsys.readouterr()
    sweep_dir = results / "fedbcd_ns"
    assert analysis_main([str(sweep_dir), "--no-mlflow", "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "== protocol: fedbcd − fedsgd | breast_cancer (up to 3 paired seeds) ==" in out
    assert "interaction (does the defense act equally under both?):" in out
    line = next(x for x in out.splitlines() if re.match(r"\s+none\s+-\s+ns adv", x))
    printed = re.search(r"([+-]\d\.\d{3}) \[([+-]\d\.\d{3}), ([+-]\d\.\d{3})\]", line)
    assert printed is not None, line  # Δ with its interval
    assert line.rstrip().endswith(("cannot tell", "fedbcd leaks more", "fedbcd leaks less"))
    hand = by_hand(sweep_dir)
    assert float(printed[1]) == pytest.approx(hand["mean"], abs=5e-4)
    table = pd.read_csv(sweep_dir / "report" / "contrast_protocol_fedsgd_vs_fedbcd.csv")
    assert set(table["kind"]) == {"contrast", "interaction"}
    # 2 strengths x (MP, ns), and CAP once per defense (it spans the strengths)
    assert len(table[table["kind"] == "interaction"]) == 5
    assert (table["n"] == 3).all() and table["half"].notna().all()
    # CAP as a contrast metric: G-DP's CAP under fedbcd minus under fedsgd, by hand
    assert written(table, "cap", "gdp") == pytest.approx(cap_by_hand(sweep_dir)["mean"], abs=1e-6)
    cap_line = next(x for x in out.splitlines() if re.match(r"\s+gdp\s+-\s+CAP", x))
    assert re.search(r"[+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]", cap_line), cap_line


def test_attacks_in_one_arm_only_still_get_mp_contrasts_and_no_gaps() -> None:
    from analysis.ranking import DEFAULT_WEIGHTS
    from analysis.report import build

    rows = [
        r
        for r in sweep(LEAKY_BCD, seeds=3)
        if not (r["protocol"] == "fedbcd" and r["attack"] != "none")
    ]
    report = build(frame(rows), 0.5, DEFAULT_WEIGHTS, [parse_compare("protocol=fedsgd:fedbcd")])
    key = "protocol_fedsgd_vs_fedbcd"
    table = report.contrasts[key].table
    assert set(table["metric"]) == {"mp"} and len(table[table["kind"] == "contrast"]) == 2
    assert key not in report.gaps
    assert "no scored attack rows with protocol='fedbcd'" in str(
        report.summary["contrasts"][key]["gaps"]  # type: ignore[index]
    )
