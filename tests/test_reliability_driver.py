"""The driver (``python sweep.py``) SIGKILLed at three points, then the same command re-run:
every training recorded once, no corrupt or temporary file left, nothing finished re-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as pads
import pytest

from sweep_engine.lock import LOCK_NAME
from sweep_engine.plan import expand
from sweep_engine.space import load_space
from sweep_engine.words import plural
from trainables.results.checks import check_file
from trainables.results.faults import FAULT_ENV

pytestmark = [pytest.mark.ray, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
N = 6


def start(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """``sweep.py`` with its stdout and stderr in ``log`` (a file: no pipe to fill up)."""
    with open(log, "w") as fh:
        return subprocess.Popen(
            [sys.executable, "sweep.py", *args],
            cwd=ROOT,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(env or {})},
        )


def wait_for(check: object, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while not check():  # type: ignore[operator]
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL


def test_driver_killed_at_three_points_then_rerun_completes_exactly_once(
    tmp_path: Path, ray_session: None
) -> None:
    import ray

    space = tmp_path / "killed3.yaml"
    space.write_text(
        "name: killed3\nbase: {dataset: digits, epochs: 15}\n"
        f"grid: {{seed: {list(range(N))}}}\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
        "run: {max_concurrent_trials: 2, pack: 1}\n"
    )
    results = tmp_path / "results"
    records = results / "killed3" / "records"
    args = ["--space", str(space), "--results", str(results)]
    args += ["--address", ray.get_runtime_context().gcs_address]

    def finals() -> list[Path]:
        return sorted(records.glob("[!.]*.parquet")) if records.is_dir() else []

    # 1. planning done, Ray about to be joined: killed before any training started
    log1 = tmp_path / "run1.log"
    proc = start(args, log1)
    wait_for(lambda: "to run" in log1.read_text())
    kill(proc)
    assert f"{N} trainings planned, 0 already recorded, {N} to run" in log1.read_text()
    assert finals() == [] and (results / "killed3" / LOCK_NAME).exists()  # a stale lock

    # 2. some trainings recorded, others in flight
    log2 = tmp_path / "run2.log"
    proc = start(args, log2)
    wait_for(lambda: len(finals()) >= 2)
    kill(proc)
    assert "took over the stale lock of a dead driver" in log2.read_text()
    after2 = {p: p.stat().st_mtime_ns for p in finals()}
    assert 2 <= len(after2) < N, len(after2)

    # 3. in the middle of a record write: half a file in a temporary, then SIGKILL
    log3 = tmp_path / "run3.log"
    proc = start(args, log3, {FAULT_ENV: "kill_during_write:1"})
    assert proc.wait(timeout=300) == -signal.SIGKILL, log3.read_text()[-3000:]
    (half,) = records.glob(".*.tmp")
    assert check_file(half) is not None  # really half a Parquet file
    assert {p: p.stat().st_mtime_ns for p in finals()} == after2  # nothing final touched
    assert f"{len(after2)} already recorded, {N - len(after2)} to run" in log3.read_text()

    # the same command, to the end
    log4 = tmp_path / "run4.log"
    proc = start(args, log4)
    assert proc.wait(timeout=300) == 0, log4.read_text()[-3000:]
    out = log4.read_text()
    assert f"{len(after2)} already recorded, {N - len(after2)} to run" in out
    # only the missing ones ran
    assert f"done: {plural(N - len(after2), 'training')} recorded, 0 failed" in out
    assert {p: p.stat().st_mtime_ns for p in after2} == after2  # finished ones not re-run
    plan = expand(load_space(str(space)))
    assert [p.stem for p in finals()] == sorted(t.trial_id for t in plan.trainings)
    assert all(check_file(p) is None for p in finals())
    assert not list(records.glob(".*")) and not (results / "killed3" / LOCK_NAME).exists()
    rows = pads.dataset(records, format="parquet").to_table().to_pylist()
    assert len(rows) == N and all(r["status"] == "ok" for r in rows)


def test_ctrl_c_stops_with_130_and_one_line_then_a_rerun_resumes(
    tmp_path: Path, ray_session: None
) -> None:
    """SIGINT (Ctrl-C) once a record exists: Tune stops quietly, the records stay valid,
    the lock is released, exit 130; the same command then runs only what is missing."""
    import ray

    n = 4
    space = tmp_path / "ctrlc.yaml"
    space.write_text(
        "name: ctrlc\nbase: {dataset: breast_cancer, epochs: 10}\n"
        f"grid: {{seed: {list(range(n))}}}\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
        "run: {max_concurrent_trials: 1, pack: 1}\n"
    )
    results = tmp_path / "results"
    records = results / "ctrlc" / "records"
    args = ["--space", str(space), "--results", str(results), "--no-mlflow"]
    args += ["--address", ray.get_runtime_context().gcs_address]

    def finals() -> list[Path]:
        return sorted(records.glob("[!.]*.parquet")) if records.is_dir() else []

    log1 = tmp_path / "run1.log"
    proc = start(args, log1)
    wait_for(lambda: len(finals()) >= 1)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130, log1.read_text()[-3000:]
    out = log1.read_text()
    kept = finals()
    assert 1 <= len(kept) < n, out[-3000:]
    assert f"interrupted: {len(kept)} of {n} recorded; re-run to resume" in out
    for noise in ("Traceback", "FileNotFoundError", "Tuner.restore", "Stop signal received"):
        assert noise not in out, out[-3000:]  # before: Tune's stop notices, then "done: …"
    assert "done:" not in out
    assert all(check_file(p) is None for p in kept)
    assert not list(records.glob(".*")) and not (results / "ctrlc" / LOCK_NAME).exists()

    log2 = tmp_path / "run2.log"
    before = {p: p.stat().st_mtime_ns for p in kept}
    proc = start(args, log2)
    assert proc.wait(timeout=300) == 0, log2.read_text()[-3000:]
    out = log2.read_text()
    assert f"{len(kept)} already recorded, {n - len(kept)} to run" in out
    assert f"done: {plural(n - len(kept), 'training')} recorded, 0 failed" in out
    assert {p: p.stat().st_mtime_ns for p in kept} == before  # recorded ones not re-run
    assert len(finals()) == n and all(check_file(p) is None for p in finals())
