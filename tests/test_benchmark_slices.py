"""The helpers of issue 45's wall-time benchmarks: a seed slice of a space, and the paired AP
change of an attack run at a preset."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from benchmarks.defenses_quick import cpu_of, paired
from benchmarks.estimate_accuracy import sliced
from sweep_engine.space import load_space

ROOT = Path(__file__).resolve().parents[1]


def test_a_seed_slice_keeps_everything_but_the_other_seeds(tmp_path: Path) -> None:
    assert sliced("ssl_iso", None, tmp_path) == "ssl_iso"
    path = Path(sliced("ssl_iso", [0, 2], tmp_path))
    doc = yaml.safe_load(path.read_text())
    whole = yaml.safe_load((ROOT / "search_spaces" / "ssl_iso.yaml").read_text())
    assert doc["grid"]["seed"] == [0, 2] and whole["grid"]["seed"] == [0, 1, 2, 3, 4]
    assert doc["name"] == "ssl_iso_seeds_0_2"
    doc["grid"]["seed"], doc["name"] = whole["grid"]["seed"], whole["name"]
    assert doc == whole
    assert load_space(str(path)).name == "ssl_iso_seeds_0_2"  # a valid space of its own


def test_a_space_without_a_seed_grid_cannot_be_sliced(tmp_path: Path) -> None:
    space = tmp_path / "flat.yaml"
    space.write_text("name: flat\nbase: {dataset: digits}\n")
    with pytest.raises(ValueError, match="no grid: seed"):
        sliced(str(space), [0], tmp_path)


def _rows(attack: str, aps: list[float], seconds: float) -> list[dict[str, object]]:
    return [
        {"dataset": "digits", "defense": "gdp", "defense_param": 0.1, "seed": s, "attack": attack,
         "base": attack.split("@")[0], "ap": ap, "attack_seconds": seconds, "train_seconds": 1.0}
        for s, ap in enumerate(aps)
    ]  # fmt: skip


def test_the_preset_is_paired_with_the_default_on_the_same_cell() -> None:
    default = pd.DataFrame(_rows("pmc", [0.70, 0.80, 0.60], 2.0) + _rows("none", [0, 0, 0], 0))
    unpaired = {**_rows("pmc", [0.0], 2.0)[0], "seed": 9}  # a cell the preset run lacks
    preset = pd.DataFrame(_rows("pmc@converge", [0.71, 0.78, 0.60], 0.5))
    got = paired(pd.concat([default, pd.DataFrame([unpaired])]), preset)["pmc"]
    assert got["cells"] == 3 and got["ap_default"] == pytest.approx(0.70)  # the paired cells'
    assert got["mean_diff"] == pytest.approx((0.01 - 0.02 + 0.0) / 3, abs=1e-4)
    assert got["max_abs_diff"] == pytest.approx(0.02)
    assert got["identical"] == 1  # seed 2: 0.60 both ways
    assert got["ci95"][0] < got["mean_diff"] < got["ci95"][1]
    assert cpu_of(default) == {"training": 3.0, "pmc": 6.0}


def test_the_same_records_give_the_same_answer_and_a_changed_attack_moves_it() -> None:
    from analysis.load import table_to_frame
    from analysis.synthetic import synthetic_table
    from benchmarks.defenses_quick import same_answer

    df = table_to_frame(synthetic_table(2000, n_defenses=4, n_strengths=3))
    df["attack"] = df["attack"].astype(str)
    df["base"] = df["attack"]
    got = same_answer(df, df.copy())
    assert got["cells"] > 10 and got["kendall_tau"] == 1.0
    assert got["top_default"] == got["top_preset"] and got["max_abs_cdcs_diff"] == 0.0
    moved = df.copy()
    weak = (moved["defense"] == "def0").to_numpy() & (moved["attack"] != "none").to_numpy()
    moved.loc[weak, "ap"] = 0.0  # the first defense now stops every attack
    after = same_answer(df, moved)
    assert after["kendall_tau"] < 1.0 and after["max_abs_cdcs_diff"] > 0.0
