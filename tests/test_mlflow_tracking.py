"""MLflow tracking of sweeps against real stores: a sqlite store for the resume logic, and a
real ``mlflow server`` process for the smoke sweep + analysis end to end."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis.synthetic import row, training
from analysis.tracking import default_uri, metric_key, sync_sweep
from sweep_engine.sink import RecordSink
from trainables.records import Record

ROOT = Path(__file__).resolve().parents[1]


def write_training(sink: RecordSink, rows: list[dict]) -> str:
    records = [Record(**r) for r in rows]
    sink.write(records[0].trial_id, records)
    return records[0].trial_id


def children(client, exp_id: str, parent: str) -> list:
    return client.search_runs([exp_id], f"tags.`mlflow.parentRunId` = '{parent}'")


def test_sync_is_idempotent_and_updates_a_retried_training(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    sweep_dir = tmp_path / "results" / "hand"
    sink = RecordSink(sweep_dir)
    write_training(sink, training(0.9, {"dli": ("LI", 0.8, None)}, seed=0))
    write_training(
        sink, training(0.85, {"dli": ("LI", 0.3, None)}, seed=0, defense="gdp", defense_param=0.1)
    )
    failed = [row(mp=None, seed=1, status="error", error="RuntimeError: boom")]
    failed_id = write_training(sink, failed)
    uri = default_uri(tmp_path / "results")

    first = sync_sweep(sweep_dir, uri)
    assert (first.created, first.updated, len(first.children)) == (3, 0, 3)
    again = sync_sweep(sweep_dir, uri)  # a re-run / resume: nothing new, nothing duplicated
    assert (again.created, again.updated, again.parent_run_id) == (0, 0, first.parent_run_id)

    write_training(sink, [row(mp=0.91, seed=1)])  # the retry succeeded
    fixed = sync_sweep(sweep_dir, uri)
    assert (fixed.created, fixed.updated) == (0, 1)
    client = MlflowClient(uri)
    runs = children(client, fixed.experiment_id, fixed.parent_run_id)
    assert len(runs) == 3
    by_trial = {r.data.tags["trial_id"]: r for r in runs}
    assert by_trial[failed_id].data.tags["status"] == "ok"
    assert by_trial[failed_id].data.metrics["mp"] == pytest.approx(0.91)
    defended = next(r for r in runs if r.data.tags["defense"] == "gdp")
    assert defended.data.metrics["ap/dli"] == pytest.approx(0.3)
    assert defended.data.params["defense_param"] == "0.1"
    parents = client.search_runs([fixed.experiment_id], "tags.`vflsweep.role` = 'parent'")
    assert len(parents) == 1 and parents[0].data.metrics["trainings_ok"] == 3
    # artifacts of a sqlite store live next to it, not in the working directory
    assert client.get_experiment(fixed.experiment_id).artifact_location.startswith(
        (tmp_path / "results").resolve().as_uri()
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[str]:
    """A real tracking server: sqlite backend, artifacts proxied into tmp_path."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("mlflow")),
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp_path / 'server.db'}",
            "--artifacts-destination",
            str(tmp_path / "server-artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError((tmp_path / "server.log").read_text()[-3000:])
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


@pytest.mark.ray
@pytest.mark.slow
def test_smoke_sweep_and_analysis_on_a_real_server(
    tmp_path: Path, mlflow_server: str, ray_session: None
) -> None:
    import ray
    from mlflow.tracking import MlflowClient

    from analysis.cli import main as analysis_main
    from sweep_engine.cli import main as sweep_main

    # the smoke space with one label attack (NS), so DCS and the ranking have something to
    # score; epochs lowered to keep the test short
    space = yaml.safe_load((ROOT / "search_spaces" / "smoke.yaml").read_text())
    space["attacks"] = ["ns"]
    space["base"]["epochs"] = 10
    path = tmp_path / "smoke.yaml"
    path.write_text(yaml.safe_dump(space))
    results = tmp_path / "results"
    address = ray.get_runtime_context().gcs_address
    argv = ["--space", str(path), "--results", str(results), "--address", address]
    assert sweep_main([*argv, "--mlflow-uri", mlflow_server]) == 0
    assert sweep_main([*argv, "--mlflow-uri", mlflow_server]) == 0  # re-run: no duplicates
    sweep_dir = results / "smoke"
    records = pd.concat(pd.read_parquet(p) for p in (sweep_dir / "records").glob("*.parquet"))
    trial_ids = set(records["trial_id"])
    assert len(trial_ids) == 8 and set(records["attack"]) == {"none", "ns"}

    compare = ["--compare", "partition=agg:split", "--compare", "protocol=fedsgd:fedbcd"]
    assert analysis_main([str(sweep_dir), "--mlflow-uri", mlflow_server, *compare]) == 0

    client = MlflowClient(mlflow_server)
    exp = client.get_experiment_by_name("smoke")
    parents = client.search_runs([exp.experiment_id], "tags.`vflsweep.role` = 'parent'")
    assert len(parents) == 1
    parent = parents[0]
    runs = children(client, exp.experiment_id, parent.info.run_id)
    assert len(runs) == 8 and {r.data.tags["trial_id"] for r in runs} == trial_ids
    for run in runs:
        metrics = run.data.metrics
        assert {"mp", "rounds", "comm_bytes", "train_seconds", "ap/ns", "dcs/ns"} <= set(metrics)
        assert 0 < metrics["dcs/ns"] <= 1 and run.data.tags["status"] == "ok"
        assert run.data.params["dataset"] == "breast_cancer"
    ranking = pd.read_csv(sweep_dir / "report" / "ranking.csv")
    assert len(ranking) == 4  # the undefended baseline in each partition x protocol scenario
    logged = client.get_run(parent.info.run_id).data.metrics
    for entry in ranking.itertuples():
        assert logged[metric_key("cdcs", entry.scenario, "none")] == pytest.approx(entry.cdcs)
        assert logged[metric_key("rank", entry.scenario, "none")] == entry.rank == 1
        assert logged[metric_key("ca_cdcs", entry.scenario, "none")] == pytest.approx(entry.ca_cdcs)
    names = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    expected = {
        "ranking.csv",
        "beta_sensitivity.csv",
        "beta_sensitivity.png",
        "cap.csv",
        "dcs.parquet",
        "ap_mp_ns.png",
        "dcs_gap_partition.csv",
        "dcs_gap_partition.png",
        "dcs_gap_protocol.csv",
        "contrast_partition.csv",  # every contrast and interaction, with intervals
        "contrast_protocol.csv",
        "contrast_protocol_baselines.csv",
        "index.html",  # the printed answer with every figure, for the MLflow UI
        "index.md",
    }
    assert {f"report/{n}" for n in expected} <= names
    local = client.download_artifacts(parent.info.run_id, "report/ranking.csv", str(tmp_path))
    pd.testing.assert_frame_equal(pd.read_csv(local), ranking)


def test_a_new_store_keeps_default_experiment_artifacts_in_the_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow's own Default experiment must not point at ./mlruns of the working folder."""
    from analysis.tracking import client_for, default_uri

    monkeypatch.chdir(tmp_path)
    results = tmp_path / "results"
    client = client_for(default_uri(results))
    location = client.get_experiment("0").artifact_location
    assert location == (results / "mlartifacts" / "0").resolve().as_uri(), location
    assert not (tmp_path / "mlruns").exists()
