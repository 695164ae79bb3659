"""Issue 64, item 7: the DCS-gap benchmark's arithmetic (``benchmarks.vflair_gaps``) and the
published tables it compares against (``benchmarks.vflair_published``), without training:
the gaps are B − A per type and point, paired by seed; the published gaps come from the
transcribed tables, which match the paper's text where ../shared has it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from benchmarks.vflair_gaps import BATCH, compare_gap, published_gaps, space_file
from benchmarks.vflair_mnist_table import PUBLISHED, TYPES
from benchmarks.vflair_published import AGG_FEDBCD, SPLIT_FEDSGD

PAPER = Path(__file__).resolve().parents[2] / "shared" / "papers" / "vflair_benchmark.txt"
NAMES = {"MID": "mid", "L-DP": "ldp", "G-DP": "gdp", "dCor": "dcor", "GS": "gs", "CAE": "cae",
         "DCAE": "dcae", "GPer": "gper"}  # fmt: skip


def test_published_gap_is_the_difference_of_the_transcribed_tables() -> None:
    gaps = published_gaps(SPLIT_FEDSGD, PUBLISHED).set_index(["defense", "strength"])
    assert gaps.loc[("mid", 1.0), "vflair_LI"] == pytest.approx(0.8846 - 0.8731)
    assert gaps.loc[("dcor", 1e-4), "vflair_NTB"] == pytest.approx(0.8164 - 0.8161)
    assert np.isnan(gaps.loc[("gs", 99.0), "vflair_FR"])  # "-" in both tables
    assert len(gaps) == len(PUBLISHED) == len(SPLIT_FEDSGD) == len(AGG_FEDBCD) == 37


@pytest.mark.parametrize(
    ("title", "table"),
    [("[MNIST dataset, splitVFL, FedSGD]", SPLIT_FEDSGD),
     ("[MNIST dataset, aggVFL, FedBCD(CH=5)]", AGG_FEDBCD)],
)  # fmt: skip
def test_transcribed_tables_match_the_paper(title: str, table: dict) -> None:
    if not PAPER.exists():
        pytest.skip(f"needs {PAPER} (../shared/papers; present in CI)")
    lines = PAPER.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Pinakas") and title in line)
    seen = {}
    for line in lines[start + 3 : start + 3 + len(table)]:
        cells = line.split("\t")
        value = [None if c == "-" else float(c) for c in (cells[3], *cells[5:9])]
        seen[(NAMES[cells[0]], float(cells[1]))] = (
            *value,
            None if cells[9] == "-" else int(cells[9]),
        )
    assert seen == table


def synthetic(shift: dict[str, float], seeds: int = 3) -> dict[str, pd.DataFrame]:
    """T-DCS per (defense, strength, seed) for the three settings: split and fedbcd are
    agg_fedsgd plus ``shift`` per type, with a little per-seed noise."""
    rng = np.random.default_rng(0)
    points = [*PUBLISHED, ("none", 0.0)]
    base = pd.DataFrame(
        [{"defense": d, "strength": s, "seed": k, **{f"tdcs_{t}": 0.7 for t in TYPES}}
         for d, s in points for k in range(seeds)]
    )  # fmt: skip
    out = {"agg_fedsgd": base}
    for setting in ("split_fedsgd", "agg_fedbcd"):
        other = base.copy()
        for t in TYPES:
            other[f"tdcs_{t}"] += shift.get(t, 0.0) + rng.normal(0, 0.001, len(other))
        out[setting] = other
    return out


def test_our_gap_is_b_minus_a_per_type_with_an_interval_over_seeds() -> None:
    found = compare_gap(synthetic({"LI": 0.05, "TB": -0.02}), "split_minus_agg")
    li, tb = found["per_type"]["LI"], found["per_type"]["TB"]  # type: ignore[index]
    assert li["points"] == 37 and li["ours_mean_gap"] == pytest.approx(0.05, abs=0.002)
    assert li["ours_share_positive"] == 1.0 and tb["ours_share_positive"] == 0.0
    lo, hi = li["ours_mean_gap_ci95"]
    assert lo < 0.05 < hi and hi - lo < 0.01
    assert li["ours_undefended_gap"] == pytest.approx(0.05, abs=0.003)
    published = published_gaps(SPLIT_FEDSGD, PUBLISHED)["vflair_LI"]
    assert li["vflair_mean_gap"] == pytest.approx(published.mean(), abs=1e-4)
    fr = found["per_type"]["FR"]  # type: ignore[index]
    assert fr["points"] == 21  # FR is published for the 21 ranked points only


def test_spaces_run_the_shipped_grid_under_vflairs_procedure(tmp_path: Path) -> None:
    path, name = space_file("agg_fedbcd", [0, 1, 2], tmp_path, ["gdp", "mid"])
    space = yaml.safe_load(Path(path).read_text())
    assert name == "vflair_gaps_agg_fedbcd_gdp_mid" and set(space["defenses"]) == {"gdp", "mid"}
    assert space["base"]["procedure"] == "vflair" and space["base"]["batch_size"] == BATCH
    assert space["base"]["protocol"] == "fedbcd" and space["grid"]["seed"] == [0, 1, 2]
    from sweep_engine.plan import expand
    from sweep_engine.space import load_space

    plan = expand(load_space(path), missing_ok=True)
    assert not plan.dropped and len(plan.trainings) > 0
    with pytest.raises(SystemExit, match="allowed"):
        space_file("split_fedsgd", [0], tmp_path, ["iso"])
    path, name = space_file("split_fedsgd", [0], tmp_path, ["mid"], ["tbm", "dli"])
    assert name == "vflair_gaps_split_fedsgd_mid_atk_dli_tbm"
    assert yaml.safe_load(Path(path).read_text())["attacks"] == ["dli", "tbm"]
    with pytest.raises(SystemExit, match="--attacks"):
        space_file("split_fedsgd", [0], tmp_path, None, ["ns"])


def test_seed_interval_is_t_over_seeds_and_none_below_three() -> None:
    from scipy import stats

    from benchmarks import seed_interval

    v = np.array([0.1, 0.2, 0.4])
    mean, ci = seed_interval(v)
    half = stats.t.ppf(0.975, 2) * v.std(ddof=1) / np.sqrt(3)
    assert mean == pytest.approx(v.mean(), abs=1e-4) and ci is not None
    assert ci == pytest.approx([v.mean() - half, v.mean() + half], abs=1e-4)
    assert seed_interval(np.array([0.1, 0.2, np.nan])) == (0.15, None)  # two seeds: no interval
    assert seed_interval(np.array([])) == (None, None)
