"""benchmarks.vflair_cells maps our digits cells to VFLAIR's configs (issue 67 item 3).

Pure mapping only: fake VFLAIR config files stand in for VFLAIR's source, so neither
VFLAIR's venv nor its code is needed.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from benchmarks import vflair_cells as vc

MODELS = {
    "0": {"type": "MLP2", "input_dim": 392, "output_dim": 10},
    "1": {"type": "MLP2", "input_dim": 392, "output_dim": 10},
    "apply_trainable_layer": 0,
    "global_model": "ClassificationModelHostHead",
}
PASSIVE_ATTACKS = [
    "BatchLabelReconstruction",
    "DirectLabelScoring",
    "ActiveModelCompletion",
    "PassiveModelCompletion",
    "ReplacementBackdoor",
    "MissingFeature",
    "NoisySample",
]


def _cfg(epochs: int, attacks: list[str], defense: dict[str, Any] | None) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "epochs": epochs,
        "lr": 0.005,
        "batch_size": 1024,
        "communication": {"communication_protocol": "FedBCD_p", "iteration_per_aggregation": 5},
        "model_list": copy.deepcopy(MODELS),
        "attack_list": {
            str(i): {"name": a, "parameters": {"party": [0], "i": i}} for i, a in enumerate(attacks)
        },
    }
    if defense is not None:
        cfg["defense"] = defense
    return cfg


FILES = {
    vc.PASSIVE.format("nodefense"): _cfg(30, PASSIVE_ATTACKS, None),
    vc.PASSIVE.format("dcor"): _cfg(
        70,
        PASSIVE_ATTACKS,
        {"name": "DistanceCorrelation", "parameters": {"party": [1], "lambda": 1e-4}},
    ),
    vc.PASSIVE.format("gs"): _cfg(
        30,
        PASSIVE_ATTACKS[:5],
        {
            "name": "GradientSparsification",
            "parameters": {"party": [1], "gradient_sparse_rate": 100.0},
        },
    ),
    vc.PASSIVE.format("cae"): _cfg(
        30,
        PASSIVE_ATTACKS[:5],
        {"name": "CAE", "parameters": {"party": [1], "lambda": 1.0, "model_path": "x"}},
    ),
    vc.ACTIVE.format("nodefense"): _cfg(30, ["GenerativeRegressionNetwork", "ResSFL"], None),
    vc.ACTIVE.format("dcor"): _cfg(
        30,
        ["GenerativeRegressionNetwork", "ResSFL"],
        {"name": "DistanceCorrelation", "parameters": {"party": [0], "lambda": 1e-4}},
    ),
}


def read(rel: str) -> dict[str, Any]:
    return copy.deepcopy(FILES[rel])


def names(cfg: dict[str, Any]) -> list[str]:
    return [cfg["attack_list"][str(i)]["name"] for i in range(len(cfg["attack_list"]))]


def test_parse_cell() -> None:
    assert vc.parse_cell("none") == ("none", None)
    assert vc.parse_cell("gdp:0.0001") == ("gdp", 1e-4)
    with pytest.raises(ValueError):
        vc.parse_cell("gdp")
    with pytest.raises(ValueError):
        vc.parse_cell("nope:1")


def test_every_digits_attack_of_defenses_yaml_is_mapped_or_named_missing() -> None:
    import yaml

    doc = yaml.safe_load((vc.ROOT / "search_spaces" / "defenses.yaml").read_text())
    digits = {a["name"] for a in doc["attacks"] if "digits" in a["datasets"]}
    assert digits == set(vc.ATTACKS)
    assert set(doc["defenses"]) == set(vc.DEFENSES)
    assert vc.lacks([("iso", 1.0), ("gdp", 0.1)], list(vc.ATTACKS)) == {
        "attacks": ["mc"],
        "defenses": ["iso"],
    }


def test_passive_config_keeps_vflair_settings_and_sets_strength_fedsgd_and_digits_dims() -> None:
    cfg = vc.vflair_config("dcor", 0.3, "passive", list(vc.ATTACKS), read)
    assert cfg["epochs"] == 70 and cfg["lr"] == 0.005 and cfg["batch_size"] == 1024
    assert cfg["defense"] == {
        "name": "DistanceCorrelation",
        "parameters": {"party": [1], "lambda": 0.3},
    }
    assert cfg["communication"] == {
        "communication_protocol": "FedSGD",
        "iteration_per_aggregation": 1,
    }
    assert cfg["model_list"]["0"]["input_dim"] == 32 and cfg["model_list"]["1"]["input_dim"] == 32
    assert names(cfg) == PASSIVE_ATTACKS
    assert cfg["attack_list"]["6"]["parameters"]["i"] == 6  # the no-defense entry's parameters
    assert FILES[vc.PASSIVE.format("dcor")]["model_list"]["0"]["input_dim"] == 392  # not mutated


def test_only_asked_attacks_and_no_defense_block_for_none() -> None:
    cfg = vc.vflair_config("none", None, "passive", ["bli", "lrb", "mc"], read)
    assert "defense" not in cfg
    assert names(cfg) == ["BatchLabelReconstruction", "ReplacementBackdoor"]


def test_config_omitting_mf_nsb_still_gets_them_and_cae_loads_its_lambda_model() -> None:
    cfg = vc.vflair_config("cae", 0.5, "passive", list(vc.ATTACKS), read, src="/s")
    assert names(cfg) == PASSIVE_ATTACKS
    assert cfg["defense"]["parameters"]["lambda"] == 0.5
    assert cfg["defense"]["parameters"]["model_path"] == (
        "/s/evaluates/defenses/trained_CAE_models/autoencoder_10_0.5_1642396797"
    )
    with pytest.raises(ValueError):
        vc.vflair_config("cae", 0.3, "passive", ["bli"], read)


def test_active_family_uses_its_defense_config_or_carries_the_passive_defense_block() -> None:
    own = vc.vflair_config("dcor", 0.01, "active", ["grn", "tbm"], read)
    assert own["defense"]["parameters"] == {"party": [0], "lambda": 0.01}
    assert names(own) == ["GenerativeRegressionNetwork", "ResSFL"]
    carried = vc.vflair_config("gs", 99.0, "active", ["grn", "tbm", "bli"], read)
    assert carried["defense"]["parameters"] == {"party": [1], "gradient_sparse_rate": 99.0}
    assert names(carried) == ["GenerativeRegressionNetwork", "ResSFL"]
    assert vc.vflair_config("none", None, "active", ["grn"], read, epochs=2)["epochs"] == 2


def test_plan_one_run_per_cell_seed_and_family_with_attacks() -> None:
    runs = vc.vflair_plan([("none", None), ("dcor", 0.3)], [0, 1], ["bli", "grn"], read)
    assert [r["name"] for r in runs] == [
        "vflsweep_digits_none_passive_seed0",
        "vflsweep_digits_none_active_seed0",
        "vflsweep_digits_dcor0.3_passive_seed0",
        "vflsweep_digits_dcor0.3_active_seed0",
        "vflsweep_digits_none_passive_seed1",
        "vflsweep_digits_none_active_seed1",
        "vflsweep_digits_dcor0.3_passive_seed1",
        "vflsweep_digits_dcor0.3_active_seed1",
    ]
    assert [r["attacks"] for r in runs[:2]] == [["bli"], ["grn"]]
    only_passive = vc.vflair_plan([("none", None)], [0], ["lrb", "mc"], read)
    assert [r["role"] for r in only_passive] == ["passive"]
