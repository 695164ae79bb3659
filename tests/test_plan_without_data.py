"""A fresh clone without ``../shared/datasets``: a dry run still plans (warning naming each
missing file), a real run refuses with exit 2 naming the file, before Ray or any write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweep_engine import runner
from sweep_engine.cli import main
from trainables.data import DATASETS, load_dataset
from trainables.data.catalog import DATA_ENV, known_classes
from trainables.errors import MissingDataError

CREDIT = "credit_card/UCI_Credit_Card.csv"


@pytest.fixture
def no_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    empty = tmp_path / "no_datasets"
    empty.mkdir()
    monkeypatch.setenv(DATA_ENV, str(empty))
    return empty


def test_a_dry_run_plans_a_file_dataset_space_without_its_files(
    no_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--space", "trees", "--dry-run", "--json"]) == 0  # before: exit 2
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["trainings"] == 3 * 11 * 3
    assert any(str(no_data / CREDIT) in m for m in summary["missing_data"])
    assert any(str(no_data / "nursery" / "nursery.data") in m for m in summary["missing_data"])
    assert f"warning: dataset 'credit' needs {no_data / CREDIT}" in err


def test_a_real_run_without_the_files_exits_2_naming_them_before_anything_starts(
    no_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "results"
    starts = runner.START_CALLS
    assert main(["--space", "trees", "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert str(no_data / CREDIT) in err and "--data-dir" in err
    assert runner.START_CALLS == starts and not results.exists()


def test_recorded_class_counts_match_the_files(shared_data: Path) -> None:
    checked = 0
    for name in DATASETS.names():
        known = known_classes(name)
        if known is None:
            continue
        try:
            ds = load_dataset(name, shared_data)
        except MissingDataError:
            continue  # a partial data folder: that dataset's own tests skip too
        assert ds.n_classes == known, name
        checked += 1
    assert checked >= 4
