"""``vflsweep ui``: a real MLflow UI process on 127.0.0.1 that answers, then stops on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from analysis.tracking import client_for, default_uri
from sweep_engine.ui import command, environment


def test_command_is_local_with_one_worker_and_no_job_workers(tmp_path: Path) -> None:
    cmd = command("sqlite:////x/mlflow.db", 5123, tmp_path / "mlartifacts")
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--workers") + 1] == "1"
    assert cmd[cmd.index("--default-artifact-root") + 1].startswith("file://")
    assert environment()["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"


def test_no_store_is_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sweep_engine.vflsweep", "ui", "--results", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "no MLflow store" in done.stderr


@pytest.mark.slow
def test_ui_answers_and_stops(tmp_path: Path) -> None:
    results = tmp_path / "results"
    client_for(default_uri(results)).create_experiment("demo")  # a real store with one sweep
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweep_engine.vflsweep", "ui", "--results", str(results),
         "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        url = None
        deadline = time.monotonic() + 240
        assert proc.stdout is not None
        while time.monotonic() < deadline and url is None:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("MLflow UI: "):
                url = line.split()[2]
        assert url is not None and url.startswith("http://127.0.0.1:"), url
        with urllib.request.urlopen(f"{url}/health", timeout=10) as response:
            assert response.status == 200
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
