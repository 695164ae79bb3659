"""Issue 64, item 1: every level against a reference (``--compare AXIS=REF:B,C`` and
``AXIS=REF:*``), several comparisons in one analysis, files named by axis and levels, and a
later analysis that keeps an earlier one's comparisons (marked stale once the records
change) instead of deleting them. Real Parquet records in a folder, the real CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.cli import main as analysis_main
from analysis.compare import Compare, parse_compares, parse_group
from analysis.synthetic import training
from trainables.errors import ConfigError
from trainables.records import RECORD_SCHEMA

# NS advantage per (protocol, defense): celu leaks 0.20 more than fedsgd, fedbcd 0.30 more
ADV = {
    ("fedsgd", "none"): 0.30,
    ("fedsgd", "gdp"): 0.20,
    ("fedbcd", "none"): 0.60,
    ("fedbcd", "gdp"): 0.10,
    ("celu", "none"): 0.50,
    ("celu", "gdp"): 0.15,
}
PARAMS = {"fedsgd": "{}", "fedbcd": '{"q": 5}', "celu": '{"q": 5, "w": 5}'}


def rows(seeds: int = 3) -> list[dict]:
    rng = np.random.default_rng(3)
    out = []
    for seed in range(seeds):
        for protocol, params in PARAMS.items():
            for defense, strength in (("none", None), ("gdp", 0.1)):
                value = ADV[(protocol, defense)] + rng.normal(0, 0.01)
                part = training(
                    0.9 + rng.normal(0, 0.002),
                    {"ns": ("LI", 0.5 + value / 2, None)},
                    defense=defense,
                    defense_param=strength,
                    seed=seed,
                    protocol=protocol,
                    protocol_params=params,
                )
                for r in part:
                    if r["attack"] == "ns":
                        r.update(ap_chance=0.5, ap_advantage=value, ap_advantage_se=0.005)
                    else:
                        r.update(mp_se=0.001)
                out += part
    return out


def write_records(sweep_dir: Path, records: list[dict], name: str = "all") -> None:
    folder = sweep_dir / "records"
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(records, schema=RECORD_SCHEMA), folder / f"{name}.parquet")


def by_hand(records: list[dict], b: str, a: str = "fedsgd") -> float:
    """Mean over seeds of B − A in the undefended NS advantage."""

    def adv(protocol: str, seed: int) -> float:
        (r,) = [
            r for r in records
            if r["protocol"] == protocol and r["seed"] == seed
            and r["attack"] == "ns" and r["defense"] == "none"
        ]  # fmt: skip
        return float(r["ap_advantage"])

    seeds = sorted({r["seed"] for r in records})
    return float(np.mean([adv(b, s) - adv(a, s) for s in seeds]))


def test_levels_parse_against_one_reference_and_star_takes_the_rest() -> None:
    assert parse_group("protocol=fedsgd:fedbcd,celu") == ("protocol", "fedsgd", ["fedbcd", "celu"])
    levels = ["fedbcd", "fedsgd", "celu"]
    star = parse_compares(["protocol=fedsgd:*"], lambda axis: levels)
    assert star == [Compare("protocol", "fedsgd", "fedbcd"), Compare("protocol", "fedsgd", "celu")]
    assert [c.key for c in star] == ["protocol_fedsgd_vs_fedbcd", "protocol_fedsgd_vs_celu"]
    assert Compare("aligned_ratio", "0.2", "1.0").key == "aligned_ratio_0.2_vs_1.0"
    for bad, says in [
        ("protocol=fedsgd:*,celu", "'*' stands alone"),
        ("protocol=fedsgd:celu,celu", "celu listed twice"),
        ("protocol=fedsgd:fedsgd", "A and B are the same value"),
        ("protocol=fedsgd:", "AXIS=REF:*"),
        ("seed=0:*", "not one of the spec's fields"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(says)):
            parse_compares([bad], lambda axis: levels)
    with pytest.raises(ConfigError, match="asked for twice"):
        parse_compares(["protocol=fedsgd:celu", "protocol=fedsgd:*"], lambda axis: levels)
    with pytest.raises(ConfigError, match="no level of protocol besides 'fedsgd'"):
        parse_compares(["protocol=fedsgd:*"], lambda axis: ["fedsgd"])


def test_every_level_against_the_reference_in_one_analysis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = rows()
    sweep_dir = tmp_path / "three"
    write_records(sweep_dir, records)
    args = [str(sweep_dir), "--no-mlflow", "--no-plots"]
    assert analysis_main([*args, "--compare", "protocol=fedsgd:*"]) == 0
    out = capsys.readouterr().out
    report = sweep_dir / "report"
    for level in ("fedbcd", "celu"):
        assert f"== protocol: {level} − fedsgd | digits (up to 3 paired seeds) ==" in out
        table = json.loads((report / "summary.json").read_text())["contrasts"]
        assert f"protocol_fedsgd_vs_{level}" in table
        rows_b = (report / f"contrast_protocol_fedsgd_vs_{level}.csv").read_text()
        assert f"contrast_protocol_fedsgd_vs_{level}.csv" in out
        from io import StringIO

        import pandas as pd

        frame = pd.read_csv(StringIO(rows_b))
        undefended = frame[
            (frame["kind"] == "contrast") & (frame["defense"] == "none")
            & (frame["metric"].astype(str).str.contains("ns"))
        ]  # fmt: skip
        assert undefended["delta"].iloc[0] == pytest.approx(by_hand(records, level), abs=1e-9)
        assert (report / f"dcs_gap_protocol_fedsgd_vs_{level}.csv").is_file()
    # two comparisons on one axis, each with its own reference, also in one analysis
    two = ["--compare", "protocol=fedsgd:celu", "--compare", "protocol=celu:fedbcd"]
    assert analysis_main([*args, *two]) == 0
    assert (report / "contrast_protocol_celu_vs_fedbcd.csv").is_file()
    assert "== protocol: fedbcd − celu | digits" in capsys.readouterr().out
    # the same comparison twice: refused before anything is written
    before = sorted(p.name for p in report.iterdir())
    assert analysis_main([*args, "--compare", "protocol=fedsgd:celu", "--compare",
                          "protocol=fedsgd:*"]) == 2  # fmt: skip
    assert "protocol=fedsgd:celu: asked for twice" in capsys.readouterr().err
    assert sorted(p.name for p in report.iterdir()) == before


def test_a_later_analysis_keeps_the_earlier_comparisons_and_marks_them_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = rows(seeds=3)
    sweep_dir = tmp_path / "kept"
    write_records(sweep_dir, records)
    args = [str(sweep_dir), "--no-mlflow", "--no-plots"]
    report = sweep_dir / "report"
    assert analysis_main([*args, "--compare", "protocol=fedsgd:fedbcd,celu"]) == 0
    first = (report / "contrast_protocol_fedsgd_vs_fedbcd.csv").read_bytes()
    capsys.readouterr()

    assert analysis_main([*args, "--compare", "protocol=fedbcd:celu"]) == 0
    out = capsys.readouterr().out
    assert (report / "contrast_protocol_fedsgd_vs_fedbcd.csv").read_bytes() == first  # kept
    assert (report / "contrast_protocol_fedsgd_vs_celu_baselines.csv").is_file()
    assert (report / "contrast_protocol_fedbcd_vs_celu.csv").is_file()  # the new one
    summary = json.loads((report / "summary.json").read_text())
    kept = {k["compare"]: k for k in summary["comparisons_kept"]}
    assert set(kept) == {"protocol=fedsgd:fedbcd", "protocol=fedsgd:celu"}
    assert not any("stale" in k for k in kept.values())
    assert "kept from an earlier analysis" in out and "--compare protocol=fedsgd:celu" in out
    index = json.loads((report / "comparisons.json").read_text())
    assert index["protocol_fedsgd_vs_fedbcd"]["kept"] is True
    assert "kept from an earlier analysis" in (report / "index.md").read_text()

    # the sweep grows (a fourth seed): what was kept is now marked stale, with its command
    write_records(sweep_dir, [r for r in rows(seeds=4) if r["seed"] == 3], name="more")
    assert analysis_main([*args, "--compare", "protocol=fedbcd:celu"]) == 0
    out = capsys.readouterr().out
    summary = json.loads((report / "summary.json").read_text())
    stale = {k["compare"]: k.get("stale", "") for k in summary["comparisons_kept"]}
    assert "18 trainings then, 24 now" in stale["protocol=fedsgd:fedbcd"]
    assert "re-run with --compare protocol=fedsgd:fedbcd" in stale["protocol=fedsgd:fedbcd"]
    assert "STALE" in out


def test_a_space_asks_every_level_against_its_reference_and_a_lost_level_warns(
    tmp_path: Path,
) -> None:
    """``analysis: {compare: [n_parties=2:*]}``: every other value of the grid against 2; a
    level whose cells are all dropped (40 parties cannot split 30 columns) is said lost."""
    from sweep_engine.dropped import lost_arms
    from sweep_engine.plan import expand
    from sweep_engine.space import load_space

    space = tmp_path / "levels.yaml"
    space.write_text(
        "name: levels\nbase: {dataset: breast_cancer, epochs: 1}\n"
        "grid: {n_parties: [2, 3, 40], seed: [0]}\n"
        "analysis: {compare: ['n_parties=2:*']}\n"
    )
    plan = expand(load_space(str(space)), missing_ok=True)
    assert [c.text for c in plan.space.compares()] == ["n_parties=2:3", "n_parties=2:40"]
    (warning,) = lost_arms(plan)
    assert warning.startswith("warning: analysis.compare n_parties=2:40: every cell with ")
    bad = tmp_path / "bad.yaml"
    bad.write_text(space.read_text().replace("n_parties=2:*", "n_parties=5:*"))
    with pytest.raises(Exception, match=r"n_parties='5' is not a value of the axis"):
        load_space(str(bad))


def test_the_family_holm_corrects_over_is_chosen_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--family``: each comparison's rows (default), each metric's rows apart, or every
    comparison of the analysis at once; the legend says which and how large."""
    from analysis.contrast import contrasts
    from analysis.ranking import DEFAULT_WEIGHTS
    from analysis.report import build, prepare
    from analysis.synthetic import frame

    dcs = prepare(frame(rows()), 0.5)
    celu = Compare("protocol", "fedsgd", "celu")
    whole = contrasts(dcs, celu).table
    per_metric = contrasts(dcs, celu, family="attack").table
    assert set(whole["family"]) == {9}  # 2 contrasts + 1 interaction, on MP, ns and CAP
    assert set(per_metric["family"]) == {3} and set(per_metric["family_by"]) == {"attack"}
    # a smaller family never corrects more
    assert (per_metric["p_holm"].to_numpy() <= whole["p_holm"].to_numpy() + 1e-12).all()
    both = [celu, Compare("protocol", "fedsgd", "fedbcd")]
    joint = build(frame(rows()), 0.5, DEFAULT_WEIGHTS, both, family="analysis")
    for found in joint.contrasts.values():
        assert set(found.table["family"]) == {18} and set(found.table["family_by"]) == {"analysis"}
    alone = contrasts(dcs, both[1]).table
    assert (
        joint.contrasts[both[1].key].table["p_holm"].to_numpy() >= alone["p_holm"].to_numpy()
    ).all()
    assert joint.summary["contrasts"][both[1].key]["family"] == "analysis"  # type: ignore[index]

    sweep_dir = tmp_path / "fam"
    write_records(sweep_dir, rows())
    args = [str(sweep_dir), "--no-mlflow", "--no-plots", "--compare", "protocol=fedsgd:*"]
    assert analysis_main([*args, "--family", "analysis"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "over all 18 contrasts and interactions of every comparison of this analysis" in out
    assert "(--family analysis)" in out
    assert analysis_main([*args, "--effect", "0"]) == 2
    assert "--effect=0.0: must be above 0" in capsys.readouterr().err


def test_the_header_states_what_the_seeds_could_detect() -> None:
    """The smallest detectable Δ (80 % power) and the seeds a stated Δ needs, from the
    paired spread: the formula by hand, monotone in n, none when the test-set error alone
    exceeds the difference."""
    from scipy.stats import norm, t

    from analysis.contrast import contrasts
    from analysis.contrast_text import contrast_lines
    from analysis.power import detectable, seeds_needed
    from analysis.report import prepare
    from analysis.synthetic import frame

    std, n, se = 0.04, 3.0, 0.01
    seeds = (t.ppf(0.975, 2) + t.ppf(0.8, 2)) * std / np.sqrt(3)
    tests = (norm.ppf(0.975) + norm.ppf(0.8)) * se
    assert detectable(np.array([std]), np.array([n]), np.array([se]))[0] == pytest.approx(
        np.hypot(seeds, tests)
    )
    assert np.isnan(detectable(np.array([std]), np.array([2.0]), np.array([se]))[0])
    need = seeds_needed(std, n, se, 0.05)
    assert need is not None and need > 3
    assert detectable(np.array([std]), np.array([float(need)]), np.array([se]))[0] <= 0.05
    assert detectable(np.array([std]), np.array([need - 1.0]), np.array([se]))[0] > 0.05
    assert seeds_needed(std, n, 0.05, 0.05) is None  # 2.8 se alone is above 0.05

    found = contrasts(prepare(frame(rows()), 0.5), Compare("protocol", "fedsgd", "celu"))
    text = " ".join(" ".join(contrast_lines(found)).split())
    assert (
        "smallest Δ these seeds could detect (80 % power, α 0.05 uncorrected, undefended): MP ±"
        in text
    )
    assert "seeds to detect Δ 0.05: MP " in text
    assert {"mde", "std", "se"} <= set(found.table.columns)


def ssl_rows(seeds: int = 3) -> list[dict]:
    """splitnn / local_simsiam / hssl_simsiam x seeds: MC on the pretrained encoder leaks
    0.05 / 0.30 / 0.32 (splitnn's is untrained), MC after fine-tuning 0.40 everywhere."""
    rng = np.random.default_rng(5)
    leak = {"splitnn": 0.05, "local_simsiam": 0.30, "hssl_simsiam": 0.32}
    out = []
    for seed in range(seeds):
        for variant, pre in leak.items():
            spec = {"dataset": "digits", "seed": seed, "ssl_variant": variant,
                    "defense": "none", "defense_param": None}  # fmt: skip
            ids = {"spec_json": json.dumps(spec, sort_keys=True), "trial_id": f"{variant}{seed}"}
            advs = {"mc_pretrained": pre + rng.normal(0, 0.01), "mc": 0.4 + rng.normal(0, 0.01)}
            attacks = {name: ("LI", 0.1 + adv, None) for name, adv in advs.items()}
            part = training(0.9, attacks, seed=seed, ssl_variant=variant, **ids)
            for r in part:
                if r["attack"] != "none":
                    r.update(ap_chance=0.1, ap_advantage=advs[r["attack"]], ap_advantage_se=0.005)
            out += part
    return out


def test_a_reference_that_is_no_baseline_for_a_row_is_flagged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Under splitnn nothing is pretrained: its ``mc_pretrained`` rows are flagged as no
    baseline (column, mark, note naming the adversary's prior); ``mc`` rows and a
    ``local_simsiam`` reference are not."""
    from analysis.contrast import contrasts
    from analysis.contrast_text import contrast_lines
    from analysis.report import prepare
    from analysis.synthetic import frame

    dcs = prepare(frame(ssl_rows()), 0.5)
    flagged = contrasts(dcs, Compare("ssl_variant", "splitnn", "hssl_simsiam"))
    table = flagged.table[flagged.table["kind"] == "contrast"].set_index("metric")
    assert "untrained encoder" in table.loc["mc_pretrained", "not_a_baseline"]
    assert table.loc["mc", "not_a_baseline"] == "" and table.loc["mp", "not_a_baseline"] == ""
    text = "\n".join(contrast_lines(flagged))
    (row,) = [line for line in text.splitlines() if "mc_pretrained adv" in line and "none" in line]
    assert row.rstrip().endswith("†")
    assert "note: † not a baseline: splitnn pretrains nothing" in text
    assert "--compare ssl_variant=local_simsiam:*" in text
    prior = contrasts(dcs, Compare("ssl_variant", "local_simsiam", "hssl_simsiam"))
    assert (prior.table["not_a_baseline"] == "").all()
    assert not any("not a baseline" in n for n in prior.notes)


def test_paper_tables_hold_the_reports_numbers_in_latex_and_markdown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--table latex|markdown``: VFLAIR's ranking layout and ours with intervals per
    scenario, each comparison's contrasts; the same numbers as the CSVs, to 3 decimals."""
    import pandas as pd

    sweep_dir = tmp_path / "paper"
    write_records(sweep_dir, rows())
    args = [str(sweep_dir), "--no-mlflow", "--no-plots", "--compare", "protocol=fedsgd:celu"]
    report = sweep_dir / "report"
    assert analysis_main([*args, "--table", "latex"]) == 0
    assert f"paper tables (latex): {report / 'tables.tex'}" in capsys.readouterr().out
    tex = (report / "tables.tex").read_text()
    assert tex.count(r"\begin{table}") == tex.count(r"\end{table}") == 4  # 3 rankings + 1
    assert r"$\Delta$ celu-fedsgd [95\% CI]" in tex and "Δ" not in tex
    contrast = pd.read_csv(report / "contrast_protocol_fedsgd_vs_celu.csv")
    row = contrast[(contrast["kind"] == "contrast") & (contrast["metric"] == "ns")
                   & (contrast["defense"] == "none")].iloc[0]  # fmt: skip
    assert f"{row['delta']:+.3f} [{row['lo']:+.3f}, {row['hi']:+.3f}]" in tex
    ranking = pd.read_csv(report / "ranking.csv")
    best = ranking[ranking["scenario"] == "protocol=celu"].iloc[0]
    assert f"{best['cdcs']:.3f} & {int(best['rank'])} & {best['ca_cdcs']:.3f} [" in tex

    assert analysis_main([*args, "--table", "markdown"]) == 0
    md = (report / "tables.md").read_text()
    assert "**Defense ranking: protocol=celu**" in md
    assert (
        "| defense | strength | T-DCS LI | C-DCS | rank | ca-C-DCS [95% CI] | group | seeds |" in md
    )
    assert f"{row['delta']:+.3f} [{row['lo']:+.3f}, {row['hi']:+.3f}]" in md
