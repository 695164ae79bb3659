"""``sweep.py`` end to end against real Ray: records exactly once, resume, kill, cluster, search."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as pads
import pytest
from conftest import RAY_CPUS

from sweep_engine.plan import expand
from sweep_engine.space import load_space

pytestmark = pytest.mark.ray
ROOT = Path(__file__).resolve().parents[1]


def sweep(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "sweep.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )


def read_records(results: Path, name: str) -> list[dict]:
    return pads.dataset(results / name / "records", format="parquet").to_table().to_pylist()


def write_space(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\n{body}")
    return path


def test_smoke_records_exactly_the_plan_and_a_rerun_adds_nothing(tmp_path: Path) -> None:
    results = tmp_path / "results"
    first = sweep("--space", "smoke", "--results", str(results))
    assert first.returncode == 0, first.stderr[-3000:]
    plan = expand(load_space("smoke"))
    rows = read_records(results, "smoke")
    assert len(rows) == len(plan.trainings) == 8  # one clean row per training, no attacks yet
    assert len({(r["trial_id"], r["attack"]) for r in rows}) == len(rows)
    assert {r["trial_id"] for r in rows} == {t.trial_id for t in plan.trainings}
    assert all(r["status"] == "ok" and r["mp"] > 0.85 for r in rows)
    assert "done: 8 trainings recorded, 0 failed" in first.stdout
    files = {p: p.stat().st_mtime_ns for p in (results / "smoke" / "records").iterdir()}

    again = sweep("--space", "smoke", "--results", str(results))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 to run" in again.stdout and "Started a local Ray" not in again.stderr
    assert {p: p.stat().st_mtime_ns for p in (results / "smoke" / "records").iterdir()} == files
    assert len(read_records(results, "smoke")) == 8


# A driver SIGKILLed mid-sweep and the rerun recording every training exactly once (no
# temporary left, only the missing ones run) is tests/test_reliability_driver.py's
# test_driver_killed_at_three_points_then_rerun_completes_exactly_once (steps 2 and 4).


def test_sweep_on_a_multi_node_cluster_through_address(tmp_path: Path) -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=2)
        cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        space = write_space(
            tmp_path,
            "cluster",
            "base: {dataset: breast_cancer, epochs: 10}\ngrid: {seed: [0, 1, 2, 3]}\n"
            "resources: {cpu_per_party: 1, cpu_per_trial: 0}\n",
        )
        results = tmp_path / "results"
        out = sweep("--space", str(space), "--results", str(results), "--address", cluster.address)
        assert out.returncode == 0, out.stderr[-3000:]
        rows = read_records(results, "cluster")
        assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    finally:
        cluster.shutdown()


def test_optuna_search_of_lr_records_its_trials_and_best(tmp_path: Path, ray_session: None) -> None:
    import ray

    space = write_space(
        tmp_path,
        "lrsearch",
        "base: {dataset: breast_cancer, epochs: 5}\n"
        "search:\n  params: {lr: {low: 0.001, high: 0.3, log: true}}\n"
        "  objectives: [{metric: mp, mode: max}]\n  n_trials: 4\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n",
    )
    results = tmp_path / "results"
    address = ray.get_runtime_context().gcs_address
    out = sweep("--space", str(space), "--results", str(results), "--address", address)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = read_records(results, "lrsearch")
    assert len(rows) == 4
    lrs = {json.loads(r["spec_json"])["lr"] for r in rows}
    assert len(lrs) == 4 and all(0.001 <= lr <= 0.3 for lr in lrs)
    (summary_file,) = (results / "lrsearch" / "search").glob("*.json")
    summary = json.loads(summary_file.read_text())
    assert summary["n_trials"] == 4
    # chosen on the validation rows (val_ratio 0.2 by default in a search), test MP beside
    best = max(rows, key=lambda r: r["val_mp"])
    assert summary["best"]["values"][0] == best["val_mp"] and summary["selected_on"] == ["val_mp"]
    assert summary["best"]["test_mp"] == best["mp"] and rows[0]["val_ratio"] == 0.2
    assert summary["best"]["trial_id"] in {r["trial_id"] for r in rows}


def test_nsga2_search_of_two_objectives_runs_under_tune(tmp_path: Path, ray_session: None) -> None:
    """Tune pickles its search algorithm; Optuna 5.1's NSGA-II holds a lock (search.py)."""
    import pickle

    import ray

    from sweep_engine.search import PicklableNSGAII

    assert pickle.loads(pickle.dumps(PicklableNSGAII(seed=0)))._get_generation_key()
    space = write_space(
        tmp_path,
        "front",
        "base: {dataset: breast_cancer, epochs: 3, defense: gdp}\n"
        "search:\n  params: {defense_param: {low: 1.0e-4, high: 1.0, log: true}}\n"
        "  objectives: [{metric: mp, mode: max}, {metric: 'ap:ns', mode: min}]\n"
        "  n_trials: 3\n  sampler: nsga2\n"
        "attacks: [ns]\nresources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n",
    )
    results = tmp_path / "results"
    address = ray.get_runtime_context().gcs_address
    out = sweep("--space", str(space), "--results", str(results), "--address", address)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = read_records(results, "front")
    assert {r["status"] for r in rows} == {"ok"} and len({r["trial_id"] for r in rows}) == 3


def test_failing_training_is_recorded_as_error_and_exits_1(
    tmp_path: Path, ray_session: None
) -> None:
    import ray

    space = write_space(
        tmp_path,
        "failing",
        "base: {dataset: breast_cancer, epochs: 3}\ngrid: {device: [cpu, cuda]}\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\nrun: {max_failures: 1}\n",
    )
    results = tmp_path / "results"
    address = ray.get_runtime_context().gcs_address
    out = sweep("--space", str(space), "--results", str(results), "--address", address)
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    rows = {json.loads(r["spec_json"])["device"]: r for r in read_records(results, "failing")}
    assert rows["cpu"]["status"] == "ok"
    assert rows["cuda"]["status"] == "error" and "CUDA" in rows["cuda"]["error"]
    assert "1 failed" in out.stdout


def test_trial_bigger_than_the_cluster_exits_2(tmp_path: Path, ray_session: None) -> None:
    import ray

    space = write_space(
        tmp_path, "huge", "base: {dataset: breast_cancer}\nresources: {cpu_per_party: 64}\n"
    )
    address = ray.get_runtime_context().gcs_address
    out = sweep("--space", str(space), "--results", str(tmp_path / "r"), "--address", address)
    assert out.returncode == 2
    assert "resources" in out.stderr and "128.1 CPU" in out.stderr
    assert f"has {RAY_CPUS}" in out.stderr
    assert not (tmp_path / "r").exists()
