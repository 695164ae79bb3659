"""Hyperparameter sweeps: the manifest, spec flattening, ``by_axis.csv``, ``best.json``, the
per-axis figures, and all of it logged to a real MLflow server after a real sweep."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from test_mlflow_tracking import mlflow_server  # noqa: F401  (a real ``mlflow server``)

from analysis.axes import axis_roles, flatten, level_names
from analysis.by_axis import best_cells, by_axis_table, per_training
from analysis.synthetic import frame, training

LRS = (0.003, 0.03, 0.3)
SEEDS = (0, 1)


def spec_rows(lr: float, q: int, seed: int, mp: float, **fields: object) -> list[dict]:
    """A training's rows whose spec (as the engine writes it) varies lr and a nested q."""
    spec = {"dataset": "digits", "lr": lr, "seed": seed, "protocol_params": {"q": q}}
    spec.update(fields.pop("spec", {}))
    return training(
        mp, seed=seed, spec_json=json.dumps(spec), trial_id=f"t{lr}-{q}-{seed}", **fields
    )


def test_flatten_types_varying_fields_including_dotted_nested_ones() -> None:
    rows = []
    for seed in (0, 1):
        rows += spec_rows(0.01, 1, seed, 0.8, spec={"optimizer": "adam"})
        rows += spec_rows(0.1, 5, seed, 0.9, spec={"optimizer": "adam"})
    flat, axes = flatten(frame(rows))
    assert sorted(axes) == ["lr", "protocol_params.q", "seed"]  # optimizer is fixed
    assert "optimizer" not in flat.columns and "spec_json" in flat.columns
    assert flat["lr"].dtype == np.float64 and str(flat["protocol_params.q"].dtype) == "Int64"
    assert flat.groupby("lr")["protocol_params.q"].unique().map(list).to_dict() == {
        0.01: [1],
        0.1: [5],
    }
    # a manifest's list of varying fields wins over inference (and keeps its order)
    _, from_manifest = flatten(frame(rows), {"varying_fields": ["protocol_params.q", "lr"]})
    assert from_manifest == ["protocol_params.q", "lr", "seed"]


def test_a_field_set_per_dataset_follows_it_and_a_crossed_one_does_not() -> None:
    """epochs set per dataset (as the engine's defaults do) and q, the protocol's parameter,
    are no axes of their own; lr crossed with the dataset is one; defense_param with
    several strengths per defense is one."""
    cells = pd.DataFrame(
        [
            {"epochs": e, "dataset": d, "lr": lr, "protocol": p, "protocol_params.q": q,
             "defense": df, "defense_param": s}
            for d, e in (("adult", 50), ("digits", 30))
            for lr in (0.01, 0.1)
            for p, q in (("fedsgd", None), ("fedbcd", 5))
            for df, s in (("none", None), ("mid", 0.01), ("mid", 1.0))
        ]
    )  # fmt: skip
    fields = list(cells.columns)
    roles = axis_roles(cells, fields)
    assert roles.axes == ["dataset", "lr", "protocol", "defense", "defense_param"]
    assert roles.follows == {"epochs": "dataset", "protocol_params.q": "protocol"}
    assert roles.params == {"protocol": ["protocol_params.q"]}
    names = level_names(cells, "protocol", ["protocol_params.q"])
    assert sorted(set(names)) == ["fedbcd q=5", "fedsgd"]  # no "nan" for FedSGD's q

    # a search: every cell its own lr, so lr "determines" everything; it leads nothing
    search = pd.DataFrame({"lr": [0.011, 0.023, 0.051, 0.09], "batch_size": [32, 64, 32, 64]})
    assert axis_roles(search, ["lr", "batch_size"]).axes == ["lr", "batch_size"]
    # one value per cell both ways (a bundle): the record column leads
    bundle = pd.DataFrame({"epochs": [50, 30], "dataset": ["adult", "digits"]})
    assert axis_roles(bundle, ["epochs", "dataset"]).follows == {"epochs": "dataset"}


def test_intervals_need_three_values_and_are_t_intervals_with_the_test_error() -> None:
    from analysis.uncertainty import Z, half_width, t_quantile

    assert np.isnan(half_width(np.array([0.1]), np.array([2]), np.array([0.0]))[0])
    values = np.array([0.1, 0.5, 0.9, 0.4])
    plain = half_width(np.array([values.std(ddof=1)]), np.array([4]), np.array([0.0]))[0]
    assert plain == pytest.approx(3.182446305284263 * values.std(ddof=1) / 2)
    assert float(t_quantile(3)) == pytest.approx(3.182446305284263)
    noisy = half_width(np.array([values.std(ddof=1)]), np.array([4]), np.array([0.05]))[0]
    assert noisy == pytest.approx(np.hypot(plain, Z * 0.05))


def test_by_axis_and_best_with_attacks_and_a_failed_training() -> None:
    rows = []
    for seed in (0, 1, 2):
        for lr, mp, ap in ((0.01, 0.80, 0.9), (0.1, 0.90, 0.6)):
            rows += spec_rows(lr, 1, seed, mp + seed / 100, attacks={"ns": ("LI", ap, None)})
    rows += spec_rows(0.1, 1, 9, 0.1, status="error")  # not ok: left out of every cell
    flat, axes = flatten(frame(rows))
    cell_axes = [a for a in axes if a != "seed"]
    table = by_axis_table(per_training(flat, cell_axes), cell_axes)
    assert table["lr"].tolist() == [0.01, 0.1] and table["mp_n"].tolist() == [3, 3]
    assert table["ap:ns_mean"].tolist() == pytest.approx([0.9, 0.6])
    assert table["mp_mean"].tolist() == pytest.approx([0.81, 0.91])
    best = best_cells(table, cell_axes)
    mp = best["metrics"]["mp"]  # no validation rows: MP names no best (not on test rows)
    assert mp["best"] is None and "no validation rows" in mp["note"]
    assert best["metrics"]["ap:ns"]["direction"] == "min"
    assert best["metrics"]["ap:ns"]["best"]["cell"] == "lr=0.1"
    assert best["metrics"]["ap:ns"]["overlapping"] == []  # CIs [0.6, 0.6] and [0.9, 0.9]
    rounds = best["metrics"]["rounds"]  # every cell ran 10 rounds: never varied, no best
    assert rounds["best"] is None and "never varied" in rounds["note"]


def test_manifest_names_the_defense_axis_attacks_and_varying_fields(tmp_path: Path) -> None:
    from sweep_engine.manifest import build_manifest
    from sweep_engine.plan import expand
    from sweep_engine.space import load_space

    path = tmp_path / "d.yaml"
    path.write_text(
        "name: d\nbase: {dataset: breast_cancer, epochs: 2}\ngrid: {seed: [0, 1]}\n"
        "defenses: {gdp: [0.1, 1.0]}\nattacks: [ns]\n"
    )
    manifest = build_manifest(expand(load_space(str(path))))
    assert manifest["axes"]["defense"] == [
        {"defense": "none"},
        {"defense": "gdp", "defense_param": 0.1},
        {"defense": "gdp", "defense_param": 1.0},
    ]
    assert [a["name"] for a in manifest["attacks"]] == ["ns"]
    assert manifest["varying_fields"] == ["defense", "defense_param", "seed"]
    assert manifest["plan"]["trainings"] == 6 and manifest["plan"]["evaluations"] == 6
    json.dumps(manifest)  # JSON-ready as built


def lr_space(tmp_path: Path) -> Path:
    space = {
        "name": "lr_sweep",
        "base": {"dataset": "breast_cancer", "n_parties": 2, "epochs": 2, "val_ratio": 0.2},
        "grid": {"lr": list(LRS), "seed": list(SEEDS)},
        "resources": {"cpu_per_party": 0.5, "cpu_per_trial": 0},
        "run": {"transport": "local"},
    }
    path = tmp_path / "lr_sweep.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


@pytest.mark.ray
@pytest.mark.slow
def test_lr_sweep_report_and_mlflow_on_a_real_server(
    tmp_path: Path,
    mlflow_server: str,  # noqa: F811
    ray_session: None,
) -> None:
    import ray
    from mlflow.tracking import MlflowClient

    from analysis.cli import main as analysis_main
    from sweep_engine.cli import main as sweep_main

    results = tmp_path / "results"
    address = ray.get_runtime_context().gcs_address
    argv = ["--space", str(lr_space(tmp_path)), "--results", str(results), "--address", address]
    assert sweep_main([*argv, "--dry-run"]) == 0
    assert not (results / "lr_sweep" / "manifest.json").exists()  # a dry run writes nothing
    assert sweep_main([*argv, "--mlflow-uri", mlflow_server]) == 0
    sweep_dir = results / "lr_sweep"
    manifest = json.loads((sweep_dir / "manifest.json").read_text())
    assert manifest["axes"] == {"lr": list(LRS), "seed": list(SEEDS)}
    assert manifest["varying_fields"] == ["lr", "seed"]
    assert (
        manifest["plan"]["trainings"] == len(LRS) * len(SEEDS)
        and manifest["space_spec"]["run"]["transport"] == "local"
    )

    assert analysis_main([str(sweep_dir), "--mlflow-uri", mlflow_server]) == 0
    report = sweep_dir / "report"
    table = pd.read_csv(report / "by_axis.csv")
    assert table["lr"].tolist() == pytest.approx(list(LRS))  # one row per lr
    assert (table["mp_n"] == len(SEEDS)).all()
    assert table["mp_ci_lo"].isna().all() and table["mp_ci_hi"].isna().all()  # 2 seeds: none
    assert {"comm_bytes_mean", "train_seconds_mean"} <= set(table.columns)
    best = json.loads((report / "best.json").read_text())
    mp_best = best["metrics"]["mp"]["best"]
    assert mp_best["cell"] in set(table["cell"]) and mp_best["axes"]["lr"] in LRS
    # chosen on the validation rows, reported on the test rows
    chosen = table.loc[table["val_mp_mean"].idxmax()]
    assert best["metrics"]["mp"]["selected_on"] == "val_mp" and mp_best["cell"] == chosen["cell"]
    assert mp_best["mean"] == pytest.approx(chosen["mp_mean"])
    assert mp_best["selected_mean"] == pytest.approx(chosen["val_mp_mean"])
    assert (report / "axis_lr.png").stat().st_size > 10_000
    assert not (report / "ranking.csv").exists()  # no attacks: no empty DCS tables
    summary = json.loads((report / "summary.json").read_text())
    assert summary["axes"] == ["lr"] and summary["dcs"].startswith("skipped")

    client = MlflowClient(mlflow_server)
    exp = client.get_experiment_by_name("lr_sweep")
    parents = client.search_runs([exp.experiment_id], "tags.`vflsweep.role` = 'parent'")
    assert len(parents) == 1
    parent = client.get_run(parents[0].info.run_id)
    names = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/by_axis.csv", "report/best.json", "report/axis_lr.png"} <= names
    assert parent.data.metrics["best/mp"] == pytest.approx(mp_best["mean"])
    assert parent.data.tags["vflsweep.best/mp"] == mp_best["cell"]
