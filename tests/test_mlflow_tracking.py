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
        # as `vflsweep ui` starts it: without MLflow's GenAI job workers (six more Python
        # processes importing MLflow, which a sweep never uses)
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
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
        params = run.data.params  # the name shows what varies, not what every run shares
        head = f"partition={params['partition']} protocol={params['protocol']} seed"
        assert run.info.run_name.startswith(head), run.info.run_name
        assert "breast_cancer" not in run.info.run_name and "none" not in run.info.run_name
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
        "dcs_gap_partition_agg_vs_split.csv",
        "dcs_gap_partition_agg_vs_split.png",
        "dcs_gap_protocol_fedsgd_vs_fedbcd.csv",
        "contrast_partition_agg_vs_split.csv",  # every contrast and interaction, with intervals
        "contrast_protocol_fedsgd_vs_fedbcd.csv",
        "contrast_protocol_fedsgd_vs_fedbcd_baselines.csv",
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


# --- an interrupted sync never blocks the next; the analysis never fails on MLflow ---------


def hand_sweep(results: Path, name: str = "hand") -> tuple[Path, set[str]]:
    """Three trainings' records written by hand (no Ray): two clean, one defended."""
    sweep_dir = results / name
    sink = RecordSink(sweep_dir)
    ids = {
        write_training(sink, training(0.9, {"dli": ("LI", 0.8, None)}, seed=seed))
        for seed in (0, 1)
    }
    defended = training(0.85, {"dli": ("LI", 0.3, None)}, seed=0, defense="gdp", defense_param=0.1)
    ids.add(write_training(sink, defended))
    return sweep_dir, ids


def half_made_store(results: Path) -> Path:
    """What a first sync SIGKILLed among MLflow's schema statements leaves: a real process
    creating the store, killed by ``kill_during_mlflow_sync`` at its 100th statement."""
    code = (
        "from pathlib import Path\nfrom analysis.tracking import create_store, default_uri\n"
        f"create_store(default_uri(Path({str(results)!r})))\n"
    )
    env = {**os.environ, "VFLSWEEP_FAULT": "kill_during_mlflow_sync:100"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    return results / "mlflow.db"


def test_a_store_half_made_by_a_killed_sync_is_set_aside_and_rebuilt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking import MlflowClient

    results = tmp_path / "results"
    sweep_dir, ids = hand_sweep(results)
    db = half_made_store(results)
    uri = default_uri(results)
    with pytest.raises(Exception, match="already exists"):  # MLflow alone: broken for good
        SqlAlchemyStore(uri, (results / "mlartifacts").as_uri())
    synced = sync_sweep(sweep_dir, uri)
    assert (synced.created, len(synced.children)) == (3, 3)
    err = capsys.readouterr().err
    assert f"warning: the MLflow store {db} was left half made by an interrupted sync" in err
    (aside,) = results.glob("mlflow.db.broken-*")  # set aside, not deleted
    assert "set aside as " + aside.name in err
    again = sync_sweep(sweep_dir, uri)
    assert (again.created, again.updated) == (0, 0) and capsys.readouterr().err == ""
    runs = children(MlflowClient(uri), synced.experiment_id, synced.parent_run_id)
    assert {r.data.tags["trial_id"] for r in runs} == ids


def test_a_child_run_cut_short_while_logged_is_completed_by_the_next_sync(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    results = tmp_path / "results"
    sweep_dir, ids = hand_sweep(results)
    uri = default_uri(results)
    first = sync_sweep(sweep_dir, uri)
    client = MlflowClient(uri)
    cut = sorted(ids)[0]  # as if the sync died between the run's creation and its metrics:
    logged = client.get_run(first.children[cut]).data
    client.delete_run(first.children[cut])  # (a deleted run is out of every search)
    run = client.create_run(
        first.experiment_id, tags={"trial_id": cut, "mlflow.parentRunId": first.parent_run_id}
    )
    again = sync_sweep(sweep_dir, uri)
    assert (again.created, again.updated) == (0, 1)
    done = client.get_run(run.info.run_id)
    assert done.info.status == "FINISHED" and done.data.metrics == logged.metrics
    assert done.data.params == logged.params and done.data.tags["status"] == "ok"


def test_the_analysis_warns_and_answers_when_mlflow_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from analysis.cli import main as analysis_main

    sweep_dir, _ = hand_sweep(tmp_path / "results")
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    uri = f"sqlite:///{blocked}/mlflow.db"  # its folder is a file: every MLflow call fails
    assert analysis_main([str(sweep_dir), "--no-plots", "--mlflow-uri", uri]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if "MLflow" in x]
    assert line.startswith(f"warning: MLflow logging to {uri} failed (") and "re-run" in line
    assert "report:" in out and (sweep_dir / "report" / "ranking.csv").exists()


@pytest.mark.ray
@pytest.mark.slow
def test_a_driver_killed_during_its_first_mlflow_sync_then_rerun_syncs_every_training(
    tmp_path: Path, ray_session: None
) -> None:
    """A real driver SIGKILLed among the schema statements of its first sync (every record
    written by then): the analysis of the sweep still exits 0, and the same command again
    puts one child per training into MLflow."""
    import ray
    from mlflow.tracking import MlflowClient

    space = tmp_path / "synced.yaml"
    space.write_text(
        "name: synced\nbase: {dataset: breast_cancer, epochs: 2}\ngrid: {seed: [0, 1, 2]}\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\nrun: {max_concurrent_trials: 1}\n"
    )
    results = tmp_path / "results"
    cmd = [sys.executable, "sweep.py", "--space", str(space), "--results", str(results)]
    cmd += ["--address", ray.get_runtime_context().gcs_address]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    killed = subprocess.run(
        cmd,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "VFLSWEEP_FAULT": "kill_during_mlflow_sync:150"},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    sweep_dir = results / "synced"
    ids = {p.stem for p in (sweep_dir / "records").glob("[!.]*.parquet")}
    assert len(ids) == 3 and (results / "mlflow.db").exists()

    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "3 already recorded, 0 to run" in again.stdout
    assert "re-run to sync" not in again.stderr and "Traceback" not in again.stderr
    assert "left half made by an interrupted sync" in again.stderr
    assert "3 new, 0 updated, 3 child runs" in again.stdout

    analysis = subprocess.run(
        [sys.executable, "-m", "analysis", str(sweep_dir), "--no-plots"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert analysis.returncode == 0 and "warning" not in analysis.stderr, analysis.stderr
    client = MlflowClient(default_uri(results))
    exp = client.get_experiment_by_name("synced")
    parents = client.search_runs([exp.experiment_id], "tags.`vflsweep.role` = 'parent'")
    assert len(parents) == 1
    runs = children(client, exp.experiment_id, parents[0].info.run_id)
    assert len(runs) == 3 and {r.data.tags["trial_id"] for r in runs} == ids
    assert all(r.info.status == "FINISHED" and "mp" in r.data.metrics for r in runs)


def test_child_run_names_show_the_fields_that_vary_and_only_those() -> None:
    """Issue 63: names read "agg fedsgd iso@25.0 seed2" though only ``ssl_variant`` varied;
    a name holds each varying field (the defense with its strength), the seed and the id."""
    from analysis.tracking import run_name, varying_fields

    base = {"dataset": "mnist", "partition": "agg", "protocol": "fedsgd", "seed": 2}
    specs = [
        {**base, "ssl_variant": v, "defense": d, "defense_param": p}
        for v in ("splitnn", "hssl_simsiam")
        for d, p in (("iso", 25.0), ("none", None))
    ]
    varying = varying_fields(specs, None)
    assert varying == ["defense", "defense_param", "ssl_variant"]
    name = run_name(specs[0], varying, "1a2b3c4d5e6f")
    assert name == "defense=iso@25 ssl_variant=splitnn seed2 1a2b3c4d"
    assert (
        run_name(specs[1], varying, "ffff0000") == "defense=none ssl_variant=splitnn seed2 ffff0000"
    )
    manifest = {
        "experiment": {"fields": {"ssl_variant": ["a", "b"], "lr": ["0.1"], "attacks": ["x", "y"]}}
    }
    assert varying_fields(specs, manifest) == ["ssl_variant"]  # the whole plan, not the rows so far
