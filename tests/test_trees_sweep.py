"""The tree space plans as intended, and a tiny tree sweep runs end to end on real Ray."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.dataset as pads
import pytest

from sweep_engine.cli import main
from sweep_engine.plan import expand
from sweep_engine.space import load_space

pytestmark = pytest.mark.ray


def test_shipped_tree_space_multiplies_only_encrypted_models_by_key_length() -> None:
    # credit and nursery are file datasets: without them (a fresh clone) the cells are
    # planned unchecked, which is all this test needs
    plan = expand(load_space("trees"), missing_ok=True)
    specs = [t.spec for t in plan.trainings]
    assert len(specs) == 3 * 11 * 3 and not plan.dropped  # datasets x model cells x seeds
    per_model = {m: {s.key_length for s in specs if s.model == m} for m in {s.model for s in specs}}
    assert per_model["xgboost"] == per_model["rf"] == {1024}  # the unused default, once
    for model in ("secureboost", "secure_rf", "paillier_lr"):
        assert per_model[model] == {512, 1024, 2048}


def test_tiny_tree_sweep_records_every_model(tmp_path: Path, ray_session: None) -> None:
    space = tmp_path / "tiny_trees.yaml"
    space.write_text(
        "name: tiny_trees\nbase: {dataset: breast_cancer}\n"
        "grid:\n  model:\n    - rf\n    - {model: secureboost, key_length: 512}\n"
        "    - {model: paillier_lr, key_length: 512, epochs: 1, batch_size: 128, lr: 0.5}\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\nrun: {max_concurrent_trials: 1}\n"
    )
    results = tmp_path / "results"
    assert main(["--space", str(space), "--results", str(results), "--no-mlflow"]) == 0
    rows = pads.dataset(results / "tiny_trees" / "records").to_table().to_pylist()
    by_model = {r["model"]: r for r in rows}
    assert set(by_model) == {"rf", "secureboost", "paillier_lr"} and len(rows) == 3
    assert all(r["status"] == "ok" and r["mp"] > 0.6 and r["comm_bytes"] > 0 for r in rows)
    assert json.loads(by_model["secureboost"]["extra"])["key_length"] == 512
    assert json.loads(by_model["rf"]["extra"])["encrypted"] is False
