"""Optuna's own analysis of a search: importances, history and Pareto plots per study,
written to the report and logged to the sweep's MLflow parent run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from analysis.optuna_report import write_studies


def write_summary(folder: Path, trials: list[dict]) -> None:
    """A study summary as ``search.write_summary`` writes it (one objective, one param)."""
    import optuna

    dist = optuna.distributions.FloatDistribution(0.001, 0.3, log=True)
    summary = {
        "cell": {},
        "objectives": [{"metric": "mp", "mode": "max"}],
        "trials": trials,
        "distributions": {"lr": optuna.distributions.distribution_to_json(dist)},
    }
    (folder / "search").mkdir(parents=True)
    (folder / "search" / "abc.json").write_text(json.dumps(summary))


def test_a_study_of_one_trial_says_importance_is_undefined(tmp_path: Path) -> None:
    write_summary(tmp_path, [{"trial_id": "t1", "params": {"lr": 0.01}, "values": [0.9]}])
    out = write_studies(tmp_path, tmp_path / "optuna")
    assert out is not None and out["studies"] == 1
    blob = json.loads((tmp_path / "optuna" / "importances_abc.json").read_text())
    assert blob["importances"] == {} and "at least 2 finished trials" in blob["undefined"]["mp"]
    assert (tmp_path / "optuna" / "history_abc.png").stat().st_size > 0
    assert not (tmp_path / "optuna" / "pareto_abc.png").exists()  # one objective: no front


def test_a_value_outside_the_searched_range_is_left_out_with_a_note(tmp_path: Path) -> None:
    trials = [
        {"trial_id": "t1", "params": {"lr": 0.01}, "values": [0.9]},
        {"trial_id": "t2", "params": {"lr": 0.02}, "values": [0.8]},
        {"trial_id": "t3", "params": {"lr": 5.0}, "values": [0.7]},
    ]
    write_summary(tmp_path, trials)
    out = write_studies(tmp_path, tmp_path / "optuna", plots=False)
    assert out is not None and any("t3 left out" in n for n in out["notes"])
    blob = json.loads((tmp_path / "optuna" / "importances_abc.json").read_text())
    assert blob["n_trials"] == 2 and blob["importances"]["mp"] == {"lr": 1.0}


@pytest.mark.ray
def test_search_report_has_importances_history_and_pareto(
    tmp_path: Path, ray_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray
    from mlflow.tracking import MlflowClient

    from analysis.cli import main as analysis_main
    from analysis.tracking import default_uri
    from sweep_engine.cli import main as sweep_main
    from sweep_engine.progress import vflsweep_command

    space = tmp_path / "twoobj.yaml"
    space.write_text(
        "name: twoobj\n"
        "base: {dataset: breast_cancer, epochs: 2}\n"
        "search:\n"
        "  params:\n"
        "    lr: {low: 0.001, high: 0.3, log: true}\n"
        "    batch_size: {choices: [32, 128]}\n"
        "  objectives: [{metric: mp, mode: max}, {metric: rounds, mode: min}]\n"
        "  n_trials: 5\n  sampler: random\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
    )
    results = tmp_path / "results"
    address = ray.get_runtime_context().gcs_address
    assert sweep_main(["--space", str(space), "--results", str(results), "--address", address]) == 0
    out = capsys.readouterr().out
    trial_lines = [line for line in out.splitlines() if re.match(r"\[\d/5\] study 1/1 ", line)]
    assert len(trial_lines) == 5, out
    assert all(re.search(r"lr=\S+ batch_size=(32|128) mp=", line) for line in trial_lines)
    pattern = r"study 1/1: best validation MP \S+ at lr=\S+ batch_size=\S+; its test MP 0\.\d{4}"
    assert re.search(pattern, out), out
    assert re.search(r"study 1/1: best rounds \(min\) \S+ at lr=", out), out
    assert f"mlflow: {vflsweep_command()} ui --results {results}" in out

    sweep_dir = results / "twoobj"
    assert analysis_main([str(sweep_dir)]) == 0
    folder = sweep_dir / "report" / "optuna"
    (path,) = folder.glob("importances_*.json")
    study = path.stem.removeprefix("importances_")
    blob = json.loads(path.read_text())
    assert blob["n_trials"] == 5 and set(blob["importances"]) == {"mp", "rounds"}
    for metric, values in blob["importances"].items():
        assert set(values) == {"lr", "batch_size"}, metric
        assert sum(values.values()) == pytest.approx(1.0, abs=1e-6)
        assert all(v >= 0 for v in values.values())
    # rounds are set by batch_size alone (batches per epoch), never by the learning rate
    assert blob["importances"]["rounds"]["batch_size"] > 0.5
    for name in (
        f"history_{study}_mp.png",
        f"history_{study}_rounds.png",
        f"pareto_{study}.png",
    ):
        assert (folder / name).stat().st_size > 1000, name

    client = MlflowClient(default_uri(results))
    exp = client.get_experiment_by_name("twoobj")
    (parent,) = client.search_runs([exp.experiment_id], "tags.`vflsweep.role` = 'parent'")
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "report/optuna")}
    assert f"report/optuna/{path.name}" in logged and f"report/optuna/pareto_{study}.png" in logged
