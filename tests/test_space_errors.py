"""Malformed spaces: exit 2, a message naming the key and what is allowed, nothing written."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from sweep_engine.cli import main
from sweep_engine.plan import expand
from sweep_engine.space import load_space

GOOD = "name: ok\nbase: {dataset: breast_cancer, epochs: 2}\n"

CASES: dict[str, tuple[str, list[str]]] = {
    "bad_yaml": ("name: x\ngrid: {seed: [1, 2}\n", ["not valid YAML"]),
    "not_a_mapping": ("- 1\n- 2\n", ["top level is a list", "must be a mapping"]),
    "missing_name": ("base: {dataset: digits}\n", ["name", "missing", "required"]),
    "unknown_top_key": ("name: x\ngrids: {seed: [1]}\n", ["grids", "allowed:", "grid", "base"]),
    "unknown_trial_field": (
        "name: x\nbase: {epoch: 3}\n",
        ["base.epoch", "unknown trial field 'epoch'", "epochs", "dataset"],
    ),
    "unknown_dataset": (
        "name: x\nbase: {dataset: imagenet}\n",
        ["base", "'imagenet'", "breast_cancer", "digits"],
    ),
    "unknown_protocol_in_grid": (
        GOOD + "grid: {protocol: [fedsgd, gossip]}\n",
        ["grid.protocol[1]", "'gossip'", "fedbcd", "fedsgd"],
    ),
    "wrong_type": (
        "name: x\nbase: {epochs: many}\n",
        ["base", "epochs='many'", "valid integer"],
    ),
    "empty_grid_axis": (GOOD + "grid: {seed: []}\n", ["grid.seed", "empty", "at least one"]),
    "negative_lr": (
        GOOD + "grid: {lr: [0.1, -0.5]}\n",
        ["grid.lr[1]", "lr=-0.5", "greater than 0"],
    ),
    "bad_partition": (
        GOOD + "grid: {partition: [agg, vertical]}\n",
        ["grid.partition[1]", "'agg'"],
    ),
    "unknown_protocol_param": (
        GOOD + "grid: {protocol_params.k: [3]}\n",
        ["grid.protocol_params.k[0]", "unknown parameter", "allowed"],
    ),
    "bad_resources": (
        GOOD + "resources: {cpu_per_party: 0}\n",
        ["resources.cpu_per_party=0", "greater than 0"],
    ),
    "bad_transport": (
        GOOD + "run: {transport: mpi}\n",
        ["run.transport='mpi'", "'ray'", "'local'"],
    ),
    "bad_search_range": (
        GOOD
        + "search: {params: {lr: {low: 0.5, high: 0.1}}, objectives: [{metric: mp, mode: max}]}\n",
        ["search.params.lr", "low=0.5", "below high=0.1"],
    ),
    "bad_objective": (
        GOOD
        + "search: {params: {lr: {low: 0.01, high: 0.1}}, objectives: [{metric: acc, mode: max}]}\n",
        ["search.objectives[0]", "'acc'", "mp", "comm_bytes"],
    ),
    "every_cell_dropped": (
        GOOD + "grid: {n_parties: [31, 40]}\n",
        ["every cell was dropped", "n_parties=31", "[2, 30]"],
    ),
    "split_alpha_not_positive": (
        GOOD + "grid: {split_scheme: [importance], split_params.alpha: [1.0, 0]}\n",
        ["grid.split_params.alpha[1]", "alpha=0", "a number > 0"],
    ),
    "split_beta_out_of_range": (
        "name: x\nbase: {split_scheme: correlation, split_params: {beta: 1.5}}\n",
        ["base.split_params.beta=1.5", "[0, 1]"],
    ),
    "split_param_unknown": (
        "name: x\nbase: {split_scheme: importance, split_params: {beta: 0.5}}\n",
        ["base.split_params.beta", "unknown for split_scheme 'importance'", "allowed: alpha"],
    ),
    "split_params_on_fixed_scheme": (
        "name: x\nbase: {split_scheme: blocks, split_params: {alpha: 1.0}}\n",
        ["base.split_params", "'blocks' takes none", "importance (alpha)"],
    ),
    "split_more_parties_than_fields": (
        "name: x\nbase: {split_scheme: importance}\ngrid: {n_parties: [31]}\n",
        ["every cell was dropped", "n_parties=31", "[2, 30]"],
    ),
    "adapt_not_a_mapping": (  # issue 63: pydantic's "instance of AdaptEntry" named no key
        GOOD + "attacks: [{name: pmc, adapt: 6}]\n",
        ["attacks[0].adapt=6", "not a mapping", "trials", "sampler", "holdout"],
    ),
    # a name that is what a results folder holds beside its sweeps breaks every sync there
    "name_mlflow_db": (
        "name: mlflow.db\nbase: {dataset: breast_cancer}\n",
        ["name='mlflow.db'", "reserved", "MLflow's files", "mlruns", "mlartifacts"],
    ),
    "name_mlflow_db_journal": (
        "name: mlflow.db-journal\nbase: {dataset: breast_cancer}\n",
        ["name='mlflow.db-journal'", "reserved", "mlflow.db*"],
    ),
    "name_mlruns_any_case": ("name: MLruns\n", ["name='MLruns'", "reserved", "any other name"]),
    "name_mlartifacts": ("name: mlartifacts\n", ["name='mlartifacts'", "reserved"]),
    "name_hidden": (
        "name: .cache\n",
        ["name='.cache'", "not a folder name", "starting with a letter or a digit"],
    ),
    "name_underscore": ("name: _tune\n", ["name='_tune'", "'.' or '_' is hidden"]),
    "aligned_ratio_out_of_range": (
        GOOD + "grid: {aligned_ratio: [0.5, 1.5]}\n",
        ["grid.aligned_ratio[1]", "1.5", "less than or equal to 1"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_space_exits_2_names_key_and_writes_nothing(
    case: str, tmp_path: Path, refused_sweep: Callable[..., str]
) -> None:
    text, fragments = CASES[case]
    space = tmp_path / f"{case}.yaml"
    space.write_text(text)
    refused_sweep(space, fragments)


def test_missing_space_file_lists_the_shipped_spaces(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--space", "no_such_space", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "no_such_space" in err and "smoke" in err


def test_incompatible_cells_are_dropped_with_their_reason(tmp_path: Path) -> None:
    space = tmp_path / "mixed.yaml"
    space.write_text(GOOD + "grid: {n_parties: [2, 40], seed: [0, 1]}\n")
    plan = expand(load_space(str(space)))
    assert len(plan.trainings) == 2 and len(plan.dropped) == 2
    assert all("n_parties=40" in d.reason for d in plan.dropped)
    assert plan.summary()["dropped"] == 2


def test_identical_cells_collapse_into_one_training(tmp_path: Path) -> None:
    space = tmp_path / "dup.yaml"
    # lr 0.05 is breast_cancer's default: both values give the same spec
    space.write_text(GOOD + "grid: {lr: [0.05, null]}\n")
    plan = expand(load_space(str(space)))
    assert len(plan.trainings) == 1 and plan.duplicates == 1


def test_dry_run_json_has_the_counts(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert main(["--space", "smoke", "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trainings"] == 8 and out["evaluations"] == 0 and out["dropped"] == 0
    assert out["trial_resources"]["2_parties"][1:] == [{"CPU": 0.5}, {"CPU": 0.5}]
