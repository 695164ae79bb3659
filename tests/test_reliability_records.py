"""Record files and the sweep lock: corrupt files are found, set aside and re-run; one
driver per sweep folder. Real Parquet files, real ``sweep.py`` processes, real Ray."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as pads
import pytest
from test_verified_reads import flip_silently

from sweep_engine.lock import LOCK_NAME, SweepLock, SweepLockedError
from sweep_engine.plan import expand
from sweep_engine.sink import RecordSink
from sweep_engine.space import load_space
from trainables.errors import ConfigError
from trainables.results.checks import check_file
from trainables.results.faults import FAULT_ENV
from trainables.trial import run_trial

ROOT = Path(__file__).resolve().parents[1]
SPACE = (
    "base: {dataset: breast_cancer, epochs: 3}\ngrid: {seed: [0, 1, 2, 3]}\n"
    "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\nrun: {max_concurrent_trials: 2}\n"
)


def sweep(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "sweep.py", *args, "--no-mlflow"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(env or {})},
    )


def write_space(tmp_path: Path, name: str, body: str = SPACE) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\n{body}")
    return path


def ray_address() -> str:
    import ray

    return ray.get_runtime_context().gcs_address


def record_everything(space: Path, results: Path) -> RecordSink:
    """Record every training of ``space`` in-process (local transport), as a sweep would."""
    plan = expand(load_space(str(space)))
    sink = RecordSink(results / plan.space.name)
    for t in plan.trainings:
        sink.write(t.trial_id, run_trial(t.spec, sweep=plan.space.name, trial_id=t.trial_id))
    return sink


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    else:  # "flipped": bytes in the middle (data pages) overwritten, footer intact
        mid = len(data) // 3
        path.write_bytes(
            data[:mid] + bytes(b ^ 0xFF for b in data[mid : mid + 16]) + data[mid + 16 :]
        )


def test_check_file_finds_truncated_empty_and_flipped_files(tmp_path: Path) -> None:
    sink = record_everything(write_space(tmp_path, "check"), tmp_path / "r")
    files = sink.files()
    assert len(files) == 4 and all(check_file(p) is None for p in files)
    for path, how in zip(files, ("truncated", "empty", "flipped"), strict=False):
        damage(path, how)
    bad = sink.bad_files()
    assert set(bad) == set(files[:3]), bad
    assert all("unreadable Parquet" in reason for reason in bad.values())
    with pytest.warns(UserWarning, match="skipping corrupt record file") as caught:
        table = sink.read()
    messages = " ".join(str(w.message) for w in caught)
    assert all(str(p) in messages for p in files[:3])  # each reported with its path
    assert table.column("trial_id").to_pylist() == [files[3].stem]
    assert sink.done() == {files[3].stem}  # a bad file is not a finished training


@pytest.mark.ray
@pytest.mark.slow
def test_resume_sets_corrupt_files_aside_and_reruns_only_their_trainings(
    tmp_path: Path, ray_session: None
) -> None:
    space = write_space(tmp_path, "corrupt")
    results = tmp_path / "r"
    sink = record_everything(space, results)
    files = sink.files()
    damage(files[0], "truncated")
    flip_silently(files[1])  # one bit of a data page: a plain read decodes another MP
    intact = {p: p.stat().st_mtime_ns for p in files[2:]}

    out = sweep("--space", str(space), "--results", str(results), "--address", ray_address())
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    for path in files[:2]:
        assert f"corrupt record file {path}" in out.stderr  # reported with its path
    assert "4 trainings planned, 2 already recorded, 2 to run" in out.stdout
    quarantined = sorted((results / "corrupt" / "records_quarantine").iterdir())
    assert sorted(p.name.split(".")[0] for p in quarantined) == sorted(p.stem for p in files[:2])
    assert all(check_file(p) is not None for p in quarantined)  # kept as found, not deleted
    assert {p: p.stat().st_mtime_ns for p in files[2:]} == intact  # not re-run
    rows = pads.dataset(results / "corrupt" / "records", format="parquet").to_table().to_pylist()
    assert sorted(r["trial_id"] for r in rows) == sorted(p.stem for p in files)
    assert all(r["status"] == "ok" for r in rows) and sink.bad_files() == {}


def test_a_second_driver_on_a_locked_sweep_exits_2_naming_the_holder(tmp_path: Path) -> None:
    space = write_space(tmp_path, "locked")
    results = tmp_path / "r"
    with SweepLock(results / "locked"):
        out = sweep("--space", str(space), "--results", str(results))
        assert out.returncode == 2, out.stderr[-2000:]
        assert "another sweep driver is running" in out.stderr
        assert f"pid {os.getpid()} on host {socket.gethostname()}" in out.stderr
        assert not (results / "locked" / "records").exists()
    assert not results.exists()  # released: the lock file and the folders it made are gone


def test_a_stale_lock_of_a_dead_driver_is_taken_over(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    sweep_dir = tmp_path / "stale"
    sweep_dir.mkdir()
    holder = {"pid": dead.pid, "host": socket.gethostname(), "started": "x", "command": "y"}
    (sweep_dir / LOCK_NAME).write_text(json.dumps(holder))
    with SweepLock(sweep_dir) as lock:
        assert lock.stale == holder
        assert json.loads((sweep_dir / LOCK_NAME).read_text())["pid"] == os.getpid()
        with pytest.raises(SweepLockedError, match=f"pid {os.getpid()}"):
            SweepLock(sweep_dir).acquire()  # a live holder is never taken over
    assert not (sweep_dir / LOCK_NAME).exists()


@pytest.mark.ray
@pytest.mark.slow
def test_two_sweeps_started_at_once_one_refuses_and_nothing_is_duplicated(
    tmp_path: Path, ray_session: None
) -> None:
    space = write_space(tmp_path, "twice")
    results = tmp_path / "r"
    cmd = [sys.executable, "sweep.py", "--space", str(space), "--results", str(results)]
    cmd += ["--address", ray_address(), "--no-mlflow"]
    procs = [
        subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outs
    refused = next(err for p, (_, err) in zip(procs, outs, strict=True) if p.returncode == 2)
    assert "another sweep driver is running" in refused
    rows = pads.dataset(results / "twice" / "records", format="parquet").to_table().to_pylist()
    assert len(rows) == 4 and len({r["trial_id"] for r in rows}) == 4


def test_the_fault_variable_is_inert_unless_set_and_checked_when_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(FAULT_ENV, raising=False)
    sink = record_everything(write_space(tmp_path, "inert"), tmp_path / "r")
    assert len(sink.files()) == 4
    monkeypatch.setenv(FAULT_ENV, "kill_sometime")
    with pytest.raises(ConfigError, match=r"VFLSWEEP_FAULT='kill_sometime'.*kill_during_write:N"):
        RecordSink(tmp_path / "r" / "inert")
    out = sweep("--space", str(tmp_path / "inert.yaml"), "--results", str(tmp_path / "r2"))
    assert out.returncode == 2 and "VFLSWEEP_FAULT='kill_sometime'" in out.stderr, out.stderr
    assert not (tmp_path / "r2").exists()


def test_no_bit_flip_in_a_record_file_changes_a_result_unnoticed(tmp_path: Path) -> None:
    """One bit flipped in every 23rd byte of a real record file (page data, page headers,
    footer, digest): each flip is caught by ``check_file`` or leaves every column name,
    type and value as written. ``python -m benchmarks.checksums`` runs every 7th byte."""
    from benchmarks.checksums import classify, flip, record_file

    original = record_file(tmp_path / "sweep")
    damaged = tmp_path / original.name
    kinds: dict[str, list[int]] = {"detected": [], "harmless": [], "silent": []}
    for offset in range(5, original.stat().st_size, 23):
        flip(original, damaged, offset)
        kinds[classify(original, damaged)].append(offset)
    assert kinds["silent"] == [], kinds["silent"]  # accepted, yet the records differ
    assert len(kinds["detected"]) > 2 * len(kinds["harmless"]) > 0
