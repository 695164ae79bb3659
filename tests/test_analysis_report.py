"""β sensitivity, DCS-gap pairing, CAP, Pareto front, plots and ``python -m analysis``."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.stats import kendalltau

from analysis.cap import cap_table
from analysis.gaps import dcs_gaps, gap_summary, parse_compare
from analysis.plots import pareto_mask
from analysis.ranking import DEFAULT_WEIGHTS, beta_sensitivity
from analysis.report import prepare
from analysis.synthetic import frame, training
from trainables.errors import ConfigError
from trainables.records import RECORD_SCHEMA

ROOT = Path(__file__).resolve().parents[1]


def dcs(ap_gap: float, mp_gap: float, beta: float = 0.5) -> float:
    return 1 / (1 + math.sqrt((1 - beta) * ap_gap**2 + beta * mp_gap**2))


def tradeoff_rows() -> pd.DataFrame:
    """Undefended MP 0.9 / AP 0.8; 'keep' keeps MP but leaks, 'hide' hides but costs MP:
    which one ranks first flips with β."""
    rows = training(0.9, {"dli": ("LI", 0.8, None)})
    rows += training(0.9, {"dli": ("LI", 0.5, None)}, defense="keep", defense_param=1.0)
    rows += training(0.6, {"dli": ("LI", 0.1, None)}, defense="hide", defense_param=1.0)
    rows += training(0.8, {"dli": ("LI", 0.3, None)}, defense="mid", defense_param=1.0)
    return frame(rows)


def test_kendall_tau_is_scipys_bit_for_bit() -> None:
    """The numpy τ-b (no scipy import at run time) equals scipy's, ties and NaN included."""
    from analysis.ranking import kendall_tau

    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(2, 250))
        x = rng.integers(0, int(rng.integers(1, 30)), n).astype(float)
        y = rng.random(n) if trial % 3 else rng.integers(0, 5, n).astype(float)
        got, want = kendall_tau(x, y), kendalltau(x, y).statistic
        assert (math.isnan(got) and math.isnan(want)) or got == want, (n, got, want)
    x = np.arange(5.0)
    assert kendall_tau(x, -x) == kendalltau(x, -x).statistic == pytest.approx(-1.0)
    assert math.isnan(kendall_tau(x, np.ones(5)))  # a constant ranking: τ undefined


def test_bootstrap_blocks_draw_the_same_numbers() -> None:
    """Drawing the bootstrap in cache-sized blocks gives exactly the one-array result."""
    from analysis import ranking

    rng = np.random.default_rng(1)
    index = pd.MultiIndex.from_arrays(
        [rng.integers(0, 40, 3000), np.arange(3000) % 50], names=["defense", "seed"]
    )
    per_seed = pd.Series(rng.random(3000), index=index)
    per_seed = per_seed[~per_seed.index.duplicated()]
    blocked = ranking.bootstrap_ci(per_seed)
    whole_chunk = ranking.BOOT_CHUNK
    ranking.BOOT_CHUNK = 1 << 40  # one block: the draw as a single (B, N) array
    try:
        pd.testing.assert_frame_equal(ranking.bootstrap_ci(per_seed), blocked, check_exact=True)
    finally:
        ranking.BOOT_CHUNK = whole_chunk


def test_beta_sensitivity_ranks_and_kendall_tau() -> None:
    table = beta_sensitivity(prepare(tradeoff_rows(), 0.5), DEFAULT_WEIGHTS)
    assert sorted(table["beta"].unique()) == [round(0.1 * i, 1) for i in range(11)]

    def ranks(beta: float) -> dict[str, float]:
        part = table[table["beta"] == beta]
        return dict(zip(part["defense"].astype(str), part["rank"], strict=True))

    assert ranks(0.0) == {"hide": 1, "mid": 2, "keep": 3, "none": 4}  # AP only
    assert ranks(1.0) == {"keep": 1, "none": 1, "mid": 3, "hide": 4}  # MP only
    for beta in (0.0, 0.3, 1.0):
        names = ["none", "keep", "hide", "mid"]
        want = kendalltau([ranks(beta)[n] for n in names], [ranks(0.5)[n] for n in names])
        got = table.loc[table["beta"] == beta, "kendall_tau_vs_0.5"].unique()
        assert got == pytest.approx([want.statistic])
    assert table.loc[table["beta"] == 0.5, "kendall_tau_vs_0.5"].eq(1.0).all()
    mid = table[(table["defense"] == "mid") & (table["beta"] == 0.2)]["cdcs"].item()
    assert mid == pytest.approx(dcs(0.3, 0.1, beta=0.2))


def two_partitions() -> pd.DataFrame:
    return frame(two_partition_rows())


def two_partition_rows() -> list[dict]:
    rows = []
    for seed in (0, 1):
        for partition, ap_u, ap_d in (("agg", 0.8, 0.4), ("split", 0.8, 0.2)):
            common = {"seed": seed, "partition": partition}
            rows += training(0.9, {"dli": ("LI", ap_u, None), "grn": ("FR", 0.5, None)}, **common)
            rows += training(
                0.85,
                {"dli": ("LI", ap_d, None), "grn": ("FR", 0.6, None)},
                defense="gdp",
                defense_param=0.1,
                **common,
            )
    # an unpaired split row (seed 2 has no agg twin) must not be paired
    rows += training(0.9, {"dli": ("LI", 0.1, None)}, seed=2, partition="split")
    return rows


def test_gap_pairs_by_everything_but_the_axis() -> None:
    """``partition=agg:split`` is VFLAIR's splitVFL − aggVFL: every gap is B − A."""
    pairs = dcs_gaps(prepare(two_partitions(), 0.5), parse_compare("partition=agg:split"))
    assert len(pairs) == 8  # 2 seeds x 2 defenses (none, gdp) x 2 attacks
    assert set(pairs["seed"].astype(int)) == {0, 1}
    gdp_li = pairs[(pairs["defense"] == "gdp") & (pairs["attack"] == "dli")]
    assert gdp_li["gap"].to_numpy() == pytest.approx([dcs(0.2, 0.05) - dcs(0.4, 0.05)] * 2)
    fr = pairs[(pairs["defense"] == "gdp") & (pairs["attack"] == "grn")]
    assert fr["gap"].to_numpy() == pytest.approx([0.0, 0.0])
    assert pairs["ca_gap"].isna().all()  # records without chance baselines: VFLAIR's only
    summary = gap_summary(pairs).set_index("attack_type")
    assert summary.loc["LI", "share_positive_vflair"] == 0.5  # gdp > 0, undefended = 0
    assert summary.loc["FR", "share_positive_vflair"] == 0.0
    assert summary.loc["all", "n_pairs"] == 8
    assert math.isnan(summary.loc["all", "mean_ca_gap"])


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("partition", "AXIS=A:B"),
        ("color=a:b", "not one of the spec's fields"),
        ("partition=agg:agg", "same value"),
        ("partition=split:vertical", "present: agg, split"),
    ],
)
def test_bad_compare_names_the_problem(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        dcs_gaps(prepare(two_partitions(), 0.5), parse_compare(text))


def test_cap_averages_utility_times_protection_over_strengths() -> None:
    rows = training(0.9, {"dli": ("LI", 0.8, None), "grn": ("FR", 0.5, None)})
    for strength, mp, ap in ((0.1, 0.85, 0.4), (1.0, 0.7, 0.2)):
        rows += training(mp, {"dli": ("LI", ap, None)}, defense="gdp", defense_param=strength)
    rows += training(0.8, {"grn": ("FR", 0.3, None)}, defense="dcor", defense_param=0.1)
    cap = cap_table(prepare(frame(rows), 0.5)).set_index(["defense", "attack"])
    assert cap.loc[("gdp", "dli"), "cap"] == pytest.approx((0.85 * 0.6 + 0.7 * 0.8) / 2)
    assert cap.loc[("gdp", "dli"), "n_strengths"] == 2
    assert cap.loc[("none", "dli"), "cap"] == pytest.approx(0.9 * 0.2)
    assert np.isnan(cap.loc[("dcor", "all LI"), "cap"])  # no label attack: undefined
    assert "no label-inference" in cap.loc[("dcor", "all LI"), "note"]
    assert cap.loc[("gdp", "dli"), "n_seeds"] == 1 and np.isnan(cap.loc[("gdp", "dli"), "cap_lo"])


def test_cap_has_a_t_interval_over_seeds_as_by_hand() -> None:
    """Issue 64: CAP per cell with its 95 % interval over seeds (per seed, CAP over the
    strengths; then t over the seeds), computed here by hand from the same numbers."""
    from scipy.stats import t

    aps = {0: (0.40, 0.20), 1: (0.45, 0.30), 2: (0.35, 0.10)}  # seed -> AP at 0.1, 1.0
    rows = []
    for seed, (ap1, ap2) in aps.items():
        rows += training(0.9, {"dli": ("LI", 0.8, None)}, seed=seed)
        rows += training(0.8, {"dli": ("LI", ap1, None)}, defense="gdp", defense_param=0.1,
                         seed=seed)  # fmt: skip
        rows += training(0.7, {"dli": ("LI", ap2, None)}, defense="gdp", defense_param=1.0,
                         seed=seed)  # fmt: skip
    cap = cap_table(prepare(frame(rows), 0.5)).set_index(["defense", "attack"])
    per_seed = np.array([(0.8 * (1 - a) + 0.7 * (1 - b)) / 2 for a, b in aps.values()])
    half = t.ppf(0.975, 2) * per_seed.std(ddof=1) / np.sqrt(3)
    for attack in ("dli", "all LI"):
        got = cap.loc[("gdp", attack)]
        assert got["cap"] == pytest.approx(per_seed.mean())
        assert got["n_seeds"] == 3
        assert (got["cap_lo"], got["cap_hi"]) == pytest.approx(
            (per_seed.mean() - half, per_seed.mean() + half)
        )


def test_pareto_front_keeps_only_undominated_points() -> None:
    mp = np.array([0.9, 0.85, 0.8, 0.7, 0.9, 0.6])
    ap = np.array([0.8, 0.4, 0.5, 0.1, 0.9, 0.1])
    assert pareto_mask(mp, ap).tolist() == [True, True, False, True, False, False]


def write_sweep(tmp_path: Path) -> Path:
    sweep = tmp_path / "results" / "demo"
    (sweep / "records").mkdir(parents=True)
    table = pa.Table.from_pylist(two_partition_rows(), schema=RECORD_SCHEMA)
    pq.write_table(table, sweep / "records" / "a.parquet")
    return sweep


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "analysis", *args], cwd=ROOT, capture_output=True, text=True
    )


def test_cli_writes_every_table_and_plot(tmp_path: Path) -> None:
    sweep = write_sweep(tmp_path)
    args = ["--compare", "partition=agg:split", "--weights", "LI=0.5,FR=0.5", "--json"]
    out = run_cli(str(sweep), *args)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["attack_rows_scored"] == 17 and summary["attack_rows_without_mp_star"] == 0
    assert "mlflow" not in summary  # no store next to the sweep and no --mlflow-uri
    report = sweep / "report"
    names = {p.name for p in report.iterdir()}
    assert {
        "dcs.parquet",
        "ranking.csv",
        "beta_sensitivity.csv",
        "beta_sensitivity.png",
        "cap.csv",
        "dcs_gap_partition_agg_vs_split.csv",
        "dcs_gap_partition_agg_vs_split.png",
        "contrast_partition_agg_vs_split.csv",
        "contrast_partition_agg_vs_split.parquet",
        "contrast_partition_agg_vs_split_baselines.csv",
        "ap_mp_dli.png",
        "ap_mp_grn.png",
        "summary.json",
        "index.md",
        "index.html",
        "answer_cells.csv",
        "answer_by_attack.csv",
    } <= names
    assert not list(sweep.glob(".report*"))  # no temporary folder left
    dcs = pd.read_parquet(report / "dcs.parquet")
    assert len(dcs) == 26 and {"mp_star", "dcs"} <= set(dcs.columns)
    ranking = pd.read_csv(report / "ranking.csv")
    assert set(ranking["defense"]) == {"none", "gdp"} and ranking["rank"].min() == 1
    # a wide block of text (the worst-case section) scrolls in its own box, never the page
    page = (report / "index.html").read_text()
    rule = re.search(r"pre\{([^}]*)\}", page)
    assert rule is not None and "overflow-x:auto" in rule.group(1), page[:600]


def test_plots_are_titled_labeled_and_have_legends(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    from analysis import plots

    captured = []
    real_save = plots._save

    def keep(fig, path):  # inspect the figure, then save it as usual
        captured.append(
            (
                path.name,
                [
                    (ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), ax.get_legend())
                    for ax in fig.axes
                    if ax.get_visible()
                ],
                fig._suptitle.get_text() if fig._suptitle else "",
                list(fig.legends),
            )
        )
        real_save(fig, path)

    plots._save = keep
    try:
        from analysis.report import build

        compare = parse_compare("partition=agg:split")
        report = build(two_partitions(), 0.5, DEFAULT_WEIGHTS, [compare])
        plots.PLOT_WORKERS = 1
        plots.write_plots(report, tmp_path, [compare])
    finally:
        plots._save = real_save
        plt.close("all")
    assert {name for name, *_ in captured} == {
        "ap_mp_dli.png",
        "ap_mp_grn.png",
        "beta_sensitivity.png",
        "dcs_gap_partition_agg_vs_split.png",
    }
    for name, axes, suptitle, fig_legends in captured:
        assert suptitle, name
        for title, xlabel, ylabel, legend in axes:
            assert title and xlabel and ylabel, name
            assert legend is not None or fig_legends, name
        assert (tmp_path / name).stat().st_size > 10_000


def test_cli_bad_input_exits_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from analysis.cli import main

    assert main([str(tmp_path / "nothing")]) == 2
    assert "no records" in capsys.readouterr().err
    sweep = write_sweep(tmp_path)
    for args in (["--beta", "1.5"], ["--weights", "LI=2"], ["--compare", "protocol=a:b"]):
        assert main([str(sweep), *args]) == 2, args
        assert "error:" in capsys.readouterr().err
    assert not (sweep / "report").exists() and not list(sweep.glob(".report*"))
