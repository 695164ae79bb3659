"""Issue 62: one experiment per sweep folder, and no cell pools two settings.

Re-running an edited space under the same name and folder is refused (exit 2, nothing
started, what changed named); ``--new-version`` runs it beside the old one as ``NAME.v2``,
and each folder's analysis holds its own trainings only. Independently, records that
differ in any setting but the seed are never pooled into one cell by the analysis.
Real trainings, a real Ray for the versioned run, real Parquet files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_verified_reads import record

from analysis.load import read_records, scenario_labels
from sweep_engine import runner
from sweep_engine.cli import main

BODY = (
    "name: edit\nbase: {{dataset: breast_cancer, epochs: {epochs}}}\n"
    "grid: {{seed: [0, 1], lr: {lrs}}}\nresources: {{cpu_per_party: 0.5, cpu_per_trial: 0}}\n"
)


def space(tmp_path: Path, epochs: int, lrs: str = "[0.05, 0.1]") -> Path:
    path = tmp_path / "edit.yaml"
    path.write_text(BODY.format(epochs=epochs, lrs=lrs))
    return path


def epochs_of(sweep_dir: Path) -> set[int]:
    df = read_records(sweep_dir)
    return {json.loads(s)["epochs"] for s in df["spec_json"].astype(str)}


def test_an_edited_space_is_refused_naming_what_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "r"
    first = record(space(tmp_path, epochs=3), results)
    before = sorted(p.name for p in (first / "records").iterdir())
    edited = space(tmp_path, epochs=2, lrs="[0.1]")
    starts = runner.START_CALLS
    assert main(["--space", str(edited), "--results", str(results), "--no-mlflow"]) == 2
    err = capsys.readouterr().err
    assert runner.START_CALLS == starts, "Ray started for a refused re-run"
    assert "another definition of its space" in err and "Traceback" not in err, err
    assert "epochs: 3 → 2" in err and "lr: 0.05, 0.1 → 0.1" in err, err
    assert "cells: 2 → 1" in err and "--new-version" in err, err
    assert sorted(p.name for p in (first / "records").iterdir()) == before  # untouched
    # the dry run says so too, as a warning, and still prints the plan
    assert main(["--space", str(edited), "--results", str(results), "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert "a real run here would stop" in captured.err and "trainings:" in captured.out
    # more seeds of the same cells extend the experiment: not refused
    more = space(tmp_path, epochs=3)
    more.write_text(more.read_text().replace("seed: [0, 1]", "seed: [0, 1, 2]"))
    assert main(["--space", str(more), "--results", str(results), "--dry-run"]) == 0
    assert "would stop" not in capsys.readouterr().err


@pytest.mark.ray
def test_new_version_runs_beside_the_old_and_neither_analysis_pools_them(
    tmp_path: Path, ray_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    results = tmp_path / "r"
    first = record(space(tmp_path, epochs=3), results)
    edited = space(tmp_path, epochs=2, lrs="[0.1]")
    address = ray.get_runtime_context().gcs_address
    argv = ["--space", str(edited), "--results", str(results), "--no-mlflow"]
    assert main([*argv, "--address", address, "--new-version"]) == 0
    out = capsys.readouterr().out
    second = results / "edit.v2"
    assert f"--new-version: starting {second}" in out, out
    assert epochs_of(first) == {3} and epochs_of(second) == {2}
    assert set(read_records(second)["sweep"].astype(str)) == {"edit.v2"}
    # the same command again resumes the new version, nothing re-runs
    assert main([*argv, "--address", address, "--new-version"]) == 0
    out = capsys.readouterr().out
    assert f"--new-version: resuming {second}" in out and "2 already recorded, 0 to run" in out


def test_the_analysis_never_pools_two_settings_in_one_folder(tmp_path: Path) -> None:
    """Whatever is in the folder (here both definitions written into one, as the engine
    did before the guard), a cell differs in every field but the seed."""
    results = tmp_path / "r"
    sweep_dir = record(space(tmp_path, epochs=3, lrs="[0.1]"), results)
    record(space(tmp_path, epochs=2, lrs="[0.1]"), results)  # same name, written by hand
    df = read_records(sweep_dir)
    clean = df[df["attack"].astype(str) == "none"]
    assert len(clean) == 4 and set(clean["setting"].astype(str)) == {"epochs=2", "epochs=3"}
    scenarios = scenario_labels(clean)
    assert sorted(set(scenarios.astype(str))) == ["epochs=2", "epochs=3"]
    per_cell = clean.groupby(scenarios, observed=True)["seed"].nunique()
    assert list(per_cell) == [2, 2]  # two seeds in each, never four pooled
    # a sweep whose trainings differ by seed only gets no such column
    plain = read_records(record(space(tmp_path, epochs=3, lrs="[0.1]"), tmp_path / "p"))
    assert "setting" not in plain.columns and len(plain) == 2
