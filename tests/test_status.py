"""``vflsweep status RESULTS/SWEEP``: a finished sweep, one with records missing (a stopped
run), one a driver runs (its lock held, ``progress.json`` current), and folders that hold
no sweep (exit 2). Read from the folder only; the sweep itself ran on real Ray."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from sweep_engine.heartbeat import Tracker
from sweep_engine.lock import LOCK_NAME, SweepLock
from sweep_engine.status import main, status, status_lines

NAME = "stat"


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory, ray_session: None) -> Path:
    """A finished 3-training sweep's folder (never changed: tests change copies)."""
    import ray

    from sweep_engine.cli import main as sweep_main

    tmp = tmp_path_factory.mktemp("status")
    space = tmp / f"{NAME}.yaml"
    space.write_text(
        f"name: {NAME}\nbase: {{dataset: breast_cancer, epochs: 3}}\ngrid: {{seed: [0, 1, 2]}}\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
    )
    address = ray.get_runtime_context().gcs_address
    argv = ["--space", str(space), "--results", str(tmp / "results"), "--address", address]
    assert sweep_main([*argv, "--no-mlflow"]) == 0
    return tmp / "results" / NAME


def copy_of(sweep_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(sweep_dir, tmp_path / "results" / NAME))


@pytest.mark.ray
def test_a_finished_sweep_has_everything_done_and_nothing_left(
    finished: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = status(finished)
    assert (s["planned"], s["done"], s["failed"], s["left"]) == (3, 3, 0, 0)
    assert s["running"] is False and s["state"] == "finished" and s["eta_s"] == 0.0
    lines = status_lines(finished)
    assert lines[0] == f"sweep {NAME} ({finished}): finished"
    assert lines[1] == "  trainings: 3 planned, 3 done, 0 failed, 0 left"
    assert main([str(finished), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(s, default=str))


@pytest.mark.ray
def test_missing_records_are_left_and_an_error_record_counts_as_failed(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sweep_engine.runner import error_record
    from sweep_engine.sink import RecordSink
    from trainables.spec import TrialSpec

    sweep_dir = copy_of(finished, tmp_path)
    (first, second, _) = sorted((sweep_dir / "records").glob("*.parquet"))
    first.unlink()
    second.unlink()  # a run stopped before these two were recorded
    s = status(sweep_dir)
    assert (s["planned"], s["done"], s["failed"], s["left"]) == (3, 1, 0, 2)
    assert s["running"] is False and s["state"] == "stopped"
    assert main([str(sweep_dir)]) == 0
    out = capsys.readouterr().out
    assert "3 planned, 1 done, 0 failed, 2 left" in out
    assert "2 trainings left: re-run the sweep to resume" in out

    spec = TrialSpec.build(dataset="breast_cancer", epochs=3, seed=9)
    bad = error_record(spec, first.stem, NAME, "ConfigError: a bad spec")
    RecordSink(sweep_dir).write(first.stem, [bad])
    s = status(sweep_dir)
    assert (s["done"], s["failed"], s["left"]) == (1, 1, 1)
    assert "1 training left" in "\n".join(status_lines(sweep_dir))


@pytest.mark.ray
def test_a_running_sweep_shows_its_driver_what_runs_and_an_eta(
    finished: Path, tmp_path: Path
) -> None:
    """The driver's lock held (here by this process) and its progress.json: running."""
    sweep_dir = copy_of(finished, tmp_path)
    for path in sorted((sweep_dir / "records").glob("*.parquet"))[:2]:
        path.unlink()
    with SweepLock(sweep_dir):
        tracker = Tracker(2, recorded_before=1, sweep_dir=sweep_dir)
        tracker.labels["a"] = "seed=1"
        tracker.trial_started("t1", "pack", "pack a+1", ("a", "b"))
        tracker.save(force=True)
        s = status(sweep_dir)
        assert s["running"] is True and s["state"] == "running"
        assert s["holder"]["pid"] > 0 and s["left"] == 2
        (run,) = s["now"]
        assert (run["kind"], run["trainings"], run["now"]) == ("pack", 2, "seed=1")
        lines = status_lines(sweep_dir)
        assert lines[0].startswith(f"sweep {NAME} ({sweep_dir}): running (pid ")
        assert any(
            re.fullmatch(r"  running: pack of 2 trainings for \ds: now seed=1", x) for x in lines
        )
        assert "  ETA: no estimate yet" in lines  # nothing finished in this run yet
    assert status(sweep_dir)["running"] is False  # released
    (sweep_dir / LOCK_NAME).write_text('{"pid": 999999999, "host": "elsewhere"}')
    assert status(sweep_dir)["running"] is False  # a dead driver's file: no lock held


def test_a_folder_without_a_sweep_exits_2_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path / "nope")]) == 2
    assert "nope: no such folder" in capsys.readouterr().err
    (tmp_path / "results" / "mine" / "records").mkdir(parents=True)
    assert main([str(tmp_path / "results")]) == 2  # the results folder, not a sweep's
    err = capsys.readouterr().err
    assert "is not a sweep folder" in err and "sweeps in it: mine" in err
    (tmp_path / "file").write_text("x")
    assert main([str(tmp_path / "file"), "--json"]) == 2
    assert "not a folder" in capsys.readouterr().err


def test_a_fault_s_ended_progress_is_not_overwritten_by_a_late_heartbeat(
    tmp_path: Path,
) -> None:
    """``mark_ended`` (a fault: a lost Ray head, a full disk) is the run's last word in
    ``progress.json``: a heartbeat or a finished training's save that comes after it, before
    the process exits, does not write "running" over it; a new run of the folder does."""
    from sweep_engine.fault_exits import mark_ended
    from sweep_engine.status import read_progress

    sweep = tmp_path / "s"
    sweep.mkdir()
    tracker = Tracker(4, sweep_dir=sweep)
    tracker.set_phase("running")
    tracker.save(force=True)
    assert read_progress(sweep)["phase"] == "running"
    mark_ended(sweep, "error: lost the Ray head", 5)
    tracker.save(force=True)  # the race: the main thread still saving
    ended = read_progress(sweep)
    assert ended["phase"] == "ended" and ended["exit_code"] == 5
    again = Tracker(4, sweep_dir=sweep)  # the next run in this process
    again.set_phase("running")
    again.save(force=True)
    assert read_progress(sweep)["phase"] == "running"
