"""A sweep prints its own lines only: no Ray/Tune/MLflow warnings, INFO lines, boxes or
tracebacks a user cannot act on (``sweep_engine/quiet.py``); ``--verbose`` shows them."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sweep_engine import quiet, tune_state

ROOT = Path(__file__).resolve().parents[1]
NOISE = ("WARNING", "ERROR", "Traceback", "Configuration for experiment", "View detailed", "╭")


def sweep(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """A 2-training sweep (one pack) in a fresh process with its own local Ray."""
    space = tmp_path / "quiet.yaml"
    space.write_text(
        "name: quiet\nbase: {dataset: breast_cancer, epochs: 3}\ngrid: {seed: [0, 1]}\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
    )
    # RAY_AIR_NEW_OUTPUT: quiet.py sets it in this process once the runner is imported;
    # inherited, it would read as the user's own choice
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AIR_NEW_OUTPUT")}
    args = ["--space", str(space), "--results", str(tmp_path / "r"), "--num-cpus", "2"]
    return subprocess.run(
        [sys.executable, "sweep.py", *args, *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**env, "RAY_USAGE_STATS_ENABLED": "0"},
    )


@pytest.mark.ray
def test_a_sweep_prints_no_warning_info_box_or_traceback(tmp_path: Path) -> None:
    """Before: Ray's token-auth WARNING, Ray/Tune INFO lines, Tune's box, MLflow's database
    INFO lines, "2 trainings in 1 packs". MLflow on: its sqlite store is created here."""
    proc = sweep(tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    for noise in NOISE:
        assert noise not in out, out
    assert not re.search(r"\bINFO\b", out), out
    assert "2 trainings in 1 pack (run.pack=auto)" in proc.stdout  # one pack, said so
    assert "done: 2 trainings recorded, 0 failed" in proc.stdout
    assert "mlflow: sqlite:///" in proc.stdout  # MLflow ran, only its own line shows


@pytest.mark.ray
def test_verbose_shows_ray_and_tune_again(tmp_path: Path) -> None:
    proc = sweep(tmp_path, "--verbose", "--no-mlflow")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "INFO worker.py" in out and "Started a local Ray instance" in out, out
    assert "Configuration for experiment" in out and "View detailed results here" in out
    assert "done: 2 trainings recorded, 0 failed" in proc.stdout


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_only_rays_token_enabled_notice_is_dropped() -> None:
    """Token auth is on by design; Ray's warning that it is *off* must still show."""
    logger = logging.getLogger("ray._private.authentication.authentication_token_setup")
    seen = _Lines()
    logger.addHandler(seen)
    try:
        quiet.configure(verbose=False)
        logger.warning("Token authentication is enabled for this Ray cluster. Set ...")
        logger.warning("Token authentication is disabled for this Ray cluster. Anyone ...")
        quiet.configure(verbose=True)
        logger.warning("Token authentication is enabled for this Ray cluster. Set ...")
    finally:
        quiet.configure(verbose=False)
        logger.removeHandler(seen)
    assert [line.split(".")[0] for line in seen.lines] == [
        "Token authentication is disabled for this Ray cluster",
        "Token authentication is enabled for this Ray cluster",
    ]
    assert logging.getLogger("mlflow.store.db.utils").getEffectiveLevel() == logging.WARNING


def test_optuna_study_notices_are_quiet() -> None:
    import sweep_engine.search  # noqa: F401  (imports Optuna, which sets its level)

    assert logging.getLogger("optuna").getEffectiveLevel() == logging.WARNING


def test_a_state_snapshot_waits_for_the_upload_in_flight(tmp_path: Path) -> None:
    """The end-of-run ``FileNotFoundError``: Tune rewrote its state folder (a temporary file
    renamed into place) while uploading it. Unpatched, the second snapshot below writes
    during the first upload; patched (``tune_state.install``), never."""
    from ray.train._internal.syncer import _BackgroundSyncer
    from ray.tune.execution.experiment_state import _ExperimentCheckpointManager

    assert tune_state.install()
    uploading = threading.Event()

    def upload(**_: Any) -> None:
        uploading.set()
        time.sleep(0.3)  # a slow disk
        uploading.clear()

    class Syncer(_BackgroundSyncer):
        def _sync_up_command(self, local_path: str, uri: str, exclude: Any = None) -> Any:
            return upload, {}

    def overlaps(sync_up: Any) -> int:
        storage = SimpleNamespace(
            experiment_driver_staging_path=str(tmp_path),
            experiment_fs_path=str(tmp_path / "up"),
            syncer=Syncer(),
        )
        manager = _ExperimentCheckpointManager(storage=storage, checkpoint_period=0)  # type: ignore[arg-type]
        hits = []
        for _ in range(2):  # two snapshots in a row, as two packs checkpointing at once
            sync_up(manager, lambda: hits.append(uploading.is_set()))
        storage.syncer.wait()
        return sum(hits)

    patched = _ExperimentCheckpointManager.sync_up_experiment_state
    assert overlaps(patched.__wrapped__) == 1  # Tune's own order: the race
    assert overlaps(patched) == 0
