"""Attack defaults are VFLAIR's; stronger/faster settings are named presets, and every
record, plan and analysis says which one ran."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from analysis.load import table_to_frame
from sweep_engine.plan import expand
from sweep_engine.space import load_space
from trainables.attacks import ATTACKS
from trainables.errors import ConfigError
from trainables.records import records_to_table
from trainables.trial import run_trial

# VFLAIR's settings (/work/shared/ALGORITHMS.md "Attacks"; VFLAIR's
# configs/main_task/attack_defense/mnist_test_attack_allattack_10class.json for
# val_iteration, MaliciousAdam's gamma and GRN's generator input, (own features, noise)).
VFLAIR: dict[str, dict[str, Any]] = {
    "lrb": {"margin": 0.0, "test_ratio": 0.01, "poison_ratio": 0.01, "trigger_size": 4},
    "bli": {"lr": 0.05, "steps": 10000, "init_scale": 1.0, "match_tol": 0.0},
    "tbm": {"lr": 1e-4, "epochs": 50, "batch_size": 32, "min_steps": 0},
    "amc": {"gamma_lr_scale_up": 1.0, "epochs": 25, "lr": 2e-3, "batch_size": 16},
    "pmc": {"epochs": 25, "lr": 2e-3, "batch_size": 16, "steps_per_epoch": 1024},
    "mc": {"steps_per_epoch": 1024, "stop_patience": 0},
    "grn": {"epochs": 60, "batch_size": 1024, "lr": 5e-3, "condition_on_output": 0, "min_steps": 0},
    "nsb": {"noise_rate": 0.01, "noise_std": 2.0},
    "mf": {"missing_rate": 0.25},
}
# the settings each preset changes (what it was measured stronger or faster with)
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "lrb": {"strong": {"margin": 15.0, "test_ratio": 1.0}},
    "bli": {"strong": {"init_scale": 0.1}, "converge": {"match_tol": 1e-6}},
    "tbm": {"strong": {"lr": 1e-3, "min_steps": 1500}},
    "amc": {
        "strong": {"gamma_lr_scale_up": 2.0},
        "fast": {"steps_per_epoch": 80},
        "converge": {"stop_patience": 2},
    },
    "pmc": {"fast": {"steps_per_epoch": 80}, "converge": {"stop_patience": 2}},
    "mc": {"fast": {"steps_per_epoch": 80}, "converge": {"stop_patience": 2}},
    "grn": {"strong": {"condition_on_output": 1, "min_steps": 1000}},
}


@pytest.mark.parametrize("name", sorted(VFLAIR))
def test_defaults_are_vflairs_settings(name: str) -> None:
    attack = ATTACKS.create(name)
    for key, value in VFLAIR[name].items():
        assert attack.params[key] == value, (name, key)  # type: ignore[attr-defined]
    assert attack.changed_params() == {}  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_set_their_values_and_explicit_params_win(name: str) -> None:
    assert ATTACKS.get(name).presets == PRESETS[name]
    for preset, values in PRESETS[name].items():
        attack = ATTACKS.create(name, preset=preset)
        assert attack.preset == preset  # type: ignore[attr-defined]
        assert attack.changed_params() == values  # type: ignore[attr-defined]
        assert attack.label() == f"{name}@{preset}"  # type: ignore[attr-defined]
    preset, values = next(iter(PRESETS[name].items()))
    key = next(iter(values))  # given explicitly at VFLAIR's value: it beats the preset's
    own = ATTACKS.create(name, preset=preset, **{key: VFLAIR[name][key]})
    assert own.params[key] == VFLAIR[name][key] != values[key]  # type: ignore[attr-defined]


def test_explicit_param_over_a_preset_is_in_the_label() -> None:
    attack = ATTACKS.create("lrb", preset="strong", margin=5.0)
    assert attack.params["margin"] == 5.0 and attack.params["test_ratio"] == 1.0  # type: ignore[attr-defined]
    assert attack.label() == "lrb@strong[margin=5.0]"  # type: ignore[attr-defined]
    assert attack.record_extra() == {  # type: ignore[attr-defined]
        "attack_label": "lrb@strong[margin=5.0]",
        "attack_preset": "strong",
        "attack_params": {"margin": 5.0, "test_ratio": 1.0},
    }


def test_unknown_preset_names_attack_preset_and_allowed_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"attack 'lrb': unknown preset 'mighty'; allowed: strong"
    ):
        ATTACKS.create("lrb", preset="mighty")
    with pytest.raises(ConfigError, match=r"'ns'.*'strong'.*no presets"):
        ATTACKS.create("ns", preset="strong")


def _space(tmp_path: Path, attacks: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(f"name: p\nbase: {{dataset: breast_cancer, epochs: 2}}\nattacks: {attacks}\n")
    return path


def test_a_preset_plans_into_the_training_and_changes_its_id(tmp_path: Path) -> None:
    plain = expand(load_space(str(_space(tmp_path, "[lrb, dli, {name: bli, params: {steps: 5}}]"))))
    strong = expand(
        load_space(
            str(
                _space(
                    tmp_path,
                    "[{name: lrb, preset: strong}, dli,"
                    " {name: bli, preset: strong, params: {steps: 5}}]",
                )
            )
        )
    )
    own = {t.spec.train_attack: t for t in strong.trainings}["lrb"]
    assert own.spec.train_attack_params == {"preset": "strong"}
    shared = {t.spec.train_attack: t for t in strong.trainings}["none"]
    assert ("bli", {"steps": 5, "preset": "strong"}) in shared.attacks
    plain_ids = {t.trial_id for t in plain.trainings}
    assert plain_ids.isdisjoint(t.trial_id for t in strong.trainings)


@pytest.mark.parametrize(
    ("entry", "fragments"),
    [
        ("{name: lrb, preset: mighty}", ["attacks[0].preset='mighty'", "'lrb'", "allowed: strong"]),
        ("{name: ns, preset: strong}", ["attacks[0].preset='strong'", "no presets"]),
        ("{name: lrb, params: {preset: strong}}", ["attacks[0]='lrb'", "preset key"]),
    ],
)
def test_bad_preset_in_a_space_exits_2_with_its_key_path(
    tmp_path: Path, refused_sweep: Callable[..., str], entry: str, fragments: list[str]
) -> None:
    refused_sweep(_space(tmp_path, f"[{entry}]"), fragments)


def test_records_say_the_preset_and_params_and_analysis_keeps_them_apart(tmp_path: Path) -> None:
    plan = expand(load_space(str(_space(tmp_path, "[{name: lrb, preset: strong}, lrb, dli]"))))
    records = []
    for training in plan.trainings:
        records += run_trial(training.spec, attacks=training.attacks)
    by_label = {json.loads(r.extra).get("attack_label", r.attack): r for r in records}
    assert set(by_label) == {"none", "lrb@strong", "lrb", "dli"}
    extra = json.loads(by_label["lrb@strong"].extra)
    assert extra["attack_preset"] == "strong"
    assert extra["attack_params"] == {"margin": 15.0, "test_ratio": 1.0}
    assert json.loads(by_label["lrb"].extra)["attack_preset"] is None
    assert json.loads(by_label["none"].extra).get("attack_preset", "absent") == "absent"
    assert all(r.attack in ("none", "lrb", "dli") for r in records)  # the registry name
    frame = table_to_frame(records_to_table(records))
    assert sorted(frame["attack"].astype(str)) == ["dli", "lrb", "lrb@strong", "none"]
