"""Faults outside the trainings end in one ``error:`` line and an exit code of their own
(``sweep_engine/fault_exits.py``, docs/cli.md): a results path that is a file, a folder
that cannot be written, a full disk, a lost Ray head; and a lock file deleted by hand.

Real processes throughout: ``sweep.py`` drivers, a real Ray (the session's, or a cluster
of its own whose head is killed). The full disk is the one simulation
(``VFLSWEEP_FAULT=disk_full:N``: the tests run as root, where no quota or read-only mount
can be set up, and a really full disk would starve the machine).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_reliability_records import sweep
from test_reliability_records import write_space as records_space

from sweep_engine.fault_exits import EXIT_NOT_WRITABLE, EXIT_RAY_LOST
from sweep_engine.lock import LOCK_NAME
from sweep_engine.status import read_progress
from trainables.results.faults import FAULT_ENV

ROOT = Path(__file__).resolve().parents[1]
SPACE = (
    "base: {dataset: breast_cancer, epochs: 2}\ngrid: {seed: [0, 1, 2, 3]}\n"
    "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
    "run: {max_concurrent_trials: 1, pack: 1}\n"
)


def write_space(tmp_path: Path, name: str, body: str = SPACE) -> Path:
    return records_space(tmp_path, name, body)


def one_error_line(err: str) -> str:
    """The single ``error:`` line of a fault's stderr, which holds no traceback."""
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


def finals(records: Path) -> list[Path]:
    return sorted(records.glob("[!.]*.parquet")) if records.is_dir() else []


def test_results_naming_a_file_exits_4_before_anything_runs(tmp_path: Path) -> None:
    space = write_space(tmp_path, "afile")
    taken = tmp_path / "results.txt"
    taken.write_text("not a folder")
    for results, named in ((taken, f"--results {taken} is a file"), (taken / "sub", str(taken))):
        out = sweep("--space", str(space), "--results", str(results))
        assert out.returncode == EXIT_NOT_WRITABLE, out.stderr[-3000:]
        line = one_error_line(out.stderr)
        assert named in line and "not a folder" in line and "nothing was run" in line
        assert "pass --results with a folder" in line
        assert "trainings planned" not in out.stdout  # refused before planning
    assert taken.read_text() == "not a folder"


def read_only_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write: chmod 0555; as root (which chmod does not stop)
    a read-only mount point: ``/sys`` here refuses root's writes too."""
    if os.geteuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    probe = Path("/sys") / f"vflsweep-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return Path("/sys")
    probe.rmdir()
    pytest.skip("running as root with a writable /sys: no folder here refuses root's writes")


def test_a_read_only_results_folder_exits_4_naming_it(tmp_path: Path) -> None:
    folder = read_only_folder(tmp_path)
    try:
        out = sweep("--space", str(write_space(tmp_path, "ro")), "--results", str(folder))
    finally:
        if folder != Path("/sys"):
            folder.chmod(0o755)
    assert out.returncode == EXIT_NOT_WRITABLE, out.stderr[-3000:]
    line = one_error_line(out.stderr)
    assert f"cannot write {folder}" in line and "not writable" in line, line
    assert "nothing was run" in line and "make it writable" in line
    assert "trainings planned" not in out.stdout


@pytest.mark.ray
@pytest.mark.slow
def test_a_full_disk_exits_4_with_what_is_recorded_then_a_rerun_resumes(
    tmp_path: Path, ray_session: None
) -> None:
    import ray

    space = write_space(tmp_path, "full")
    results = tmp_path / "r"
    args = ["--space", str(space), "--results", str(results)]
    args += ["--address", ray.get_runtime_context().gcs_address]
    out = sweep(*args, env={FAULT_ENV: "disk_full:2"})  # the second record write fails
    assert out.returncode == EXIT_NOT_WRITABLE, (out.stdout[-2000:], out.stderr[-3000:])
    line = one_error_line(out.stderr)
    records = results / "full" / "records"
    kept = finals(records)
    assert len(kept) == 1, kept
    assert f"disk full: cannot write {records}" in line and "No space left on device" in line
    assert "1 of 4 recorded" in line and "re-run the same command to resume" in line
    progress = read_progress(results / "full")
    assert progress is not None and progress["phase"] == "ended", progress
    assert progress["exit_code"] == EXIT_NOT_WRITABLE and progress["error"] == line
    assert not (results / "full" / LOCK_NAME).exists()

    again = sweep(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "1 already recorded, 3 to run" in again.stdout
    assert len(finals(records)) == 4 and not list(records.glob(".*"))


def test_a_deleted_lock_file_still_refuses_a_second_driver_before_planning(
    tmp_path: Path,
) -> None:
    """The holder is a real process holding ``SweepLock``; its lock file is removed by
    hand; a real second driver must still refuse (exit 2) without planning anything."""
    space = write_space(tmp_path, "held")
    sweep_dir = tmp_path / "r" / "held"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\n"
            "from sweep_engine.lock import SweepLock\n"
            f"with SweepLock(Path({str(sweep_dir)!r})):\n"
            "    print('held', flush=True)\n    time.sleep(120)\n",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        (sweep_dir / LOCK_NAME).unlink()  # by hand
        out = sweep("--space", str(space), "--results", str(tmp_path / "r"))
        assert out.returncode == 2, (out.stdout[-2000:], out.stderr[-2000:])
        line = one_error_line(out.stderr)
        assert "another sweep driver is running on this folder" in line
        assert f"pid {holder.pid}" in line and "lock file" in line and "was removed" in line
        assert "trainings planned" not in out.stdout and "trainings:" not in out.stdout
        assert not (sweep_dir / LOCK_NAME).exists()  # the refused driver made none
    finally:
        holder.kill()
        holder.wait(timeout=30)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="Ray's cluster utilities, /proc")
def test_a_lost_ray_head_exits_5_with_what_is_recorded(tmp_path: Path) -> None:
    """A cluster of its own (not the session's Ray); its head is killed once a record
    exists. Ray's client would end the driver with exit 1 after its reconnect timeout (8 s
    here, 60 s by default); the driver's watch ends it first, with exit 5 and one line."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    try:
        space = write_space(
            tmp_path,
            "headless",
            SPACE.replace("epochs: 2", "epochs: 20").replace("[0, 1, 2, 3]", "[0, 1, 2, 3, 4, 5]"),
        )
        results = tmp_path / "r"
        log = tmp_path / "driver.log"
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
        env["RAY_gcs_rpc_server_reconnect_timeout_s"] = "8"
        args = ["--space", str(space), "--results", str(results), "--no-mlflow"]
        with open(log, "w") as fh:
            proc = subprocess.Popen(
                [sys.executable, "sweep.py", *args, "--address", cluster.address],
                cwd=ROOT,
                stdout=fh,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        records = results / "headless" / "records"
        deadline = time.time() + 240
        while not finals(records):
            assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        cluster.head_node.kill_all_processes(check_alive=False, allow_graceful=False)
        _, err = proc.communicate(timeout=120)
    finally:
        try:
            cluster.shutdown()
        except Exception:  # its head is gone already
            pass
    assert proc.returncode == EXIT_RAY_LOST, (log.read_text()[-3000:], err[-3000:])
    line = one_error_line(err)
    n = len(finals(records))
    assert "lost the Ray head" in line and f"{n} of 6 recorded" in line, line
    assert "re-run the same command to resume" in line
    progress = json.loads((results / "headless" / "progress.json").read_text())
    assert progress["phase"] == "ended" and progress["exit_code"] == EXIT_RAY_LOST
    assert not (results / "headless" / LOCK_NAME).exists()
