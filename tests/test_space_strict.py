"""Strict scalars and "did you mean" when reading a space.

A quoted number (``epochs: "5"``) is text in YAML and is refused where a number is
expected, naming the key; an unquoted ``1e-3`` (text in YAML 1.1) is the number a user
means. Misspelled names and keys get the closest allowed ones. The malformed-space
corpus (``tests/spaces_malformed/*_quoted.yaml``, ``*_misspelled.yaml``) checks the
messages end to end; these tests pin the reading rules underneath.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sweep_engine.cli import main
from sweep_engine.plan import expand
from sweep_engine.space import load_space
from sweep_engine.yaml_read import load_yaml
from trainables.errors import did_you_mean
from trainables.spec import Quoted, TrialSpec

HEAD = "name: strict\nbase: {dataset: breast_cancer, epochs: 2"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


def test_did_you_mean_suggests_close_names_only() -> None:
    assert did_you_mean("gpd", ["gdp", "ldp", "mid"]) == "did you mean 'gdp'? "
    assert did_you_mean("mlp5", ["mlp2", "mlp4", "lr"]) == "did you mean 'mlp4' or 'mlp2'? "
    assert did_you_mean("MNIST", ["mnist", "digits"]) == "did you mean 'mnist'? "
    assert did_you_mean("resnet", ["lr", "mlp2"]) == ""
    assert did_you_mean(3, ["3"]) == ""  # only strings get suggestions


def test_quoted_scalars_are_marked_and_exponents_are_numbers(tmp_path: Path) -> None:
    text = (
        'a: "5"\nb: \'0.1\'\nc: "true"\nd: "auto"\ne: 1e-3\nf: 1.0e3\n'
        'g: [5E4, -2e+2, .5e-1]\n"1": key\nh: !!str 5\n'
    )
    data = load_yaml(_write(tmp_path, text))
    assert [(type(data[k]), data[k].kind) for k in "abc"] == [
        (Quoted, "int"),
        (Quoted, "float"),
        (Quoted, "bool"),
    ]
    assert data["a"].written == '"5"' and data["b"].written == "'0.1'"
    assert type(data["d"]) is str and type(data["h"]) is str  # text, or explicitly a str
    assert data["e"] == 0.001 and data["f"] == 1000.0 and data["g"] == [5e4, -200.0, 0.05]
    assert all(type(k) is str for k in data)  # a quoted key is a plain key


def test_unquoted_exponents_plan_as_numbers(tmp_path: Path) -> None:
    space = _write(
        tmp_path,
        HEAD + ", lr: 1e-3, defense: gdp, defense_params: {clip: 2e0}}\n"
        "grid: {defense_param: [1e-4, 1E-2]}\n",
    )
    plan = expand(load_space(str(space)))
    specs = [t.spec for t in plan.trainings]
    assert len(specs) == 2 and {s.defense_param for s in specs} == {1e-4, 1e-2}
    assert all(s.lr == 0.001 and s.defense_params["clip"] == 2.0 for s in specs)


def test_quoted_text_where_text_is_expected_still_plans(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    space = _write(
        tmp_path,
        'name: "123"\ndescription: "5"\nbase: {dataset: "breast_cancer", epochs: 2, '
        'defense: iso, defense_params: {target: "gradient", party: "active"}}\n'
        'run: {pack: "auto", transport: "local"}\ndefenses: {gdp: "vflair"}\n',
    )
    assert main(["--space", str(space), "--dry-run"]) == 0, capsys.readouterr().err
    loaded = load_space(str(space))
    assert type(loaded.name) is str and loaded.name == "123"


def test_a_plain_string_number_from_code_is_still_converted() -> None:
    """Only what a YAML file quoted is refused: the CLI and Optuna pass plain values."""
    assert TrialSpec(epochs="5", lr="0.1").epochs == 5  # type: ignore[arg-type]


CASES: dict[str, tuple[str, list[str]]] = {
    "hidden_element": (
        HEAD + ', hidden: [64, "32"]}\n',
        ["base.hidden[1]='32'", '"32" is a string', "allowed: an integer (write 32"],
    ),
    "quoted_float_for_int": (
        HEAD + ', n_parties: "2.5"}\n',
        ["base.n_parties='2.5'", '"2.5" is a string; allowed: an integer >= 2'],
    ),
    "grid_mapping_value": (
        HEAD + '}\ngrid: {lr: [{lr: 0.1, epochs: "3"}]}\n',
        ["grid.lr[0]: epochs='3'", '"3" is a string', "(write 3 without quotes)"],
    ),
    "search_choice": (
        HEAD + "}\nsearch: {params: {lr: {choices: [0.1, '0.2']}}, "
        "objectives: [{metric: mp, mode: max}]}\n",
        ["search.params.lr.choices[1]: lr='0.2'", "'0.2' is a string", "a number > 0"],
    ),
    "stack_strength": (
        HEAD + ', stack: [{name: gdp, strength: "0.1"}]}\n',
        ["base.stack[0].strength='0.1'", '"0.1" is a string', "allowed: a number"],
    ),
    "model_param": (
        HEAD + ', model: xgboost, model_params: {n_trees: "10"}}\n',
        ["base.model_params.n_trees='10'", '"10" is a string', "(write 10 without quotes)"],
    ),
    "search_flag": (
        HEAD + '}\nsearch: {params: {lr: {low: 0.01, high: 0.1, log: "yes"}}, '
        "objectives: [{metric: mp, mode: max}]}\n",
        ["search.params.lr.log='yes'", '"yes" is a string; allowed: true or false'],
    ),
    "model_misspelled": (
        HEAD + ", model: xgbost}\n",
        ["base.model='xgbost'", "did you mean 'xgboost'? known: lr, mlp2"],
    ),
    "ssl_variant_misspelled": (
        HEAD + ", ssl_variant: hssl_mocco}\n",
        ["base.ssl_variant='hssl_mocco'", "did you mean 'hssl_moco'", "allowed: none"],
    ),
    "split_scheme_misspelled": (
        HEAD + ", split_scheme: halfs}\n",
        ["base.split_scheme='halfs'", "did you mean 'halves'? allowed: auto"],
    ),
    "protocol_misspelled": (
        HEAD + "}\ngrid: {protocol: [fedsgd, fedbdc]}\n",
        ["grid.protocol[1]", "'fedbdc'", "did you mean 'fedbcd'", "known: celu"],
    ),
    "protocol_param_misspelled": (
        HEAD + ", protocol: fedbcd, protocol_params: {qq: 3}}\n",
        ["base.protocol_params", "unknown parameter(s) ['qq']", "did you mean 'q'? allowed"],
    ),
    "train_attack_misspelled": (
        HEAD + ", train_attack: tbmm}\n",
        ["base.train_attack='tbmm'", "did you mean 'tbm'? known:"],
    ),
    "stack_name_misspelled": (
        HEAD + ", stack: [{name: ldpp}]}\n",
        ["base.stack[0].name='ldpp'", "did you mean 'ldp'? known:"],
    ),
    "attack_preset_misspelled": (
        HEAD + "}\nattacks: [{name: lrb, preset: strnog}]\n",
        ["attacks[0].preset='strnog'", "did you mean 'strong'? allowed: strong"],
    ),
    "attack_dataset_misspelled": (
        HEAD + "}\nattacks: [{name: lrb, datasets: [digts]}]\n",
        ["attacks[0].datasets[0]='digts'", "did you mean 'digits'", "allowed: adult"],
    ),
    "optimizer_misspelled": (
        HEAD + ", optimizer: adamw}\n",
        ["base.optimizer='adamw'", "'adam' or 'sgd'; did you mean 'adam'?"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_refused_with_key_value_and_suggestion(
    case: str, tmp_path: Path, refused_sweep: Callable[..., str]
) -> None:
    text, fragments = CASES[case]
    refused_sweep(_write(tmp_path, text), fragments)


def test_nothing_is_suggested_when_nothing_is_close(
    tmp_path: Path, refused_sweep: Callable[..., str]
) -> None:
    err = refused_sweep(_write(tmp_path, HEAD + ", defense: shield}\n"), ["known: cae"])
    assert "did you mean" not in err
