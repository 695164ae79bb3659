"""Successive halving inside a stacked pack (``trainables/vfl/halving.py``, ``run.halving``).

What is proved: the rungs and the keep-the-best-1/η rule (cells judged by the mean of
their seeds); a pack cut at its rungs stops exactly Successive Halving's budget, each
cell's seeds together, and the trainings that go on leave records equal to the same
trainings in an uncut stack (the cut does not disturb them); a stack with model hooks is
left whole and its records say why; a real sweep on the ray transport records stopped
trainings and does not run them again on resume.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from trainables.data import load_dataset
from trainables.jobs import Job
from trainables.schedule import Schedule
from trainables.spec import TrialSpec
from trainables.transport.placement import LOCAL
from trainables.vfl.halving import Halving, survivors
from trainables.vfl.vectorized import run_vectorized

LRS = (0.0003, 0.003, 0.03, 0.1)
FIELDS = ("status", "mp", "val_mp", "rounds", "comm_bytes", "n_labeled")


def test_rungs_and_the_keep_rule() -> None:
    assert Halving(1, 3).rungs(30) == [1, 3, 9, 27] and Halving(2, 2).rungs(8) == [2, 4]
    assert Halving(1, 3).rungs(1) == []
    cells = ["a", "a", "b", "b", "c", "c", "d", "d"]
    scores = [0.5, 0.7, 0.9, 0.1, 0.8, 0.9, math.nan, 0.99]
    # means: a 0.6, b 0.5, c 0.85, d -inf (a NaN scores lowest): the best ceil(4/3) = 2
    assert survivors(cells, scores, 3) == [0, 1, 4, 5]
    assert survivors(["x", "y"], [0.5, 0.5], 2) == [0]  # a tie keeps the cell seen first


def _run(halving: Halving | None, defense: str = "none") -> dict[int, list]:
    jobs = [
        Job(TrialSpec.build(dataset="digits", epochs=4, lr=lr, seed=s, val_ratio=0.2,
                            defense=defense), ())
        for lr in LRS
        for s in (0, 1)
    ]  # fmt: skip
    ds = load_dataset("digits")
    return dict(run_vectorized(jobs, ds, LOCAL, Schedule(halving=halving)))


def test_a_cut_stack_stops_the_halving_budget_and_leaves_the_rest_as_they_were() -> None:
    whole, cut = _run(None), _run(Halving(1, 2))
    epochs_run = {}
    for i, records in cut.items():
        (rec,) = records
        if rec.status == "stopped":
            extra = json.loads(rec.extra)
            assert (
                rec.mp is None and rec.val_mp is not None and extra["stopped_by"] == "halving:1x2"
            )
            epochs_run[i] = extra["epochs_run"]
        else:  # went on: the record of the same training in the uncut stack
            assert [getattr(rec, f) for f in FIELDS] == [getattr(whole[i][0], f) for f in FIELDS]
            epochs_run[i] = 4
    # 4 cells x 2 seeds, eta 2: 2 cells stop after epoch 1, 1 after epoch 2, 1 trains on
    assert sorted(epochs_run.values()) == [1, 1, 1, 1, 2, 2, 4, 4]
    assert all(epochs_run[2 * c] == epochs_run[2 * c + 1] for c in range(len(LRS)))  # seeds
    assert sum(epochs_run.values()) == 16  # of 32


def test_a_stack_with_model_hooks_is_left_whole_and_says_why() -> None:
    records = _run(Halving(1, 2), defense="mid")
    assert all(r[0].status == "ok" for r in records.values())
    reasons = {json.loads(r[0].extra)["halving_skipped"] for r in records.values()}
    assert reasons == {"model hooks (a defense, codec or attack with stacked state) are not cut"}


@pytest.mark.slow
def test_a_halving_sweep_records_stopped_trainings_and_resumes(
    tmp_path: Path, ray_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    from sweep_engine.cli import main

    space = tmp_path / "h.yaml"
    space.write_text(
        "name: h\nbase: {dataset: digits, epochs: 3}\n"
        f"grid: {{lr: {list(LRS)}, seed: [0, 1]}}\n"
        "run: {halving: {reduction_factor: 2}}\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
    )
    address = ray.get_runtime_context().gcs_address
    argv = ["--space", str(space), "--results", str(tmp_path / "r"), "--address", address]
    assert main([*argv, "--no-mlflow"]) == 0
    out = capsys.readouterr().out
    rows = pq.read_table(tmp_path / "r" / "h" / "records").to_pylist()
    statuses = sorted(r["status"] for r in rows)
    assert statuses == ["ok"] * 2 + ["stopped"] * 6, statuses  # rungs 1, 2 of 3 epochs
    assert all(r["val_ratio"] == 0.2 for r in rows)  # halving holds out validation rows
    assert "8 trainings in 1 pack" in out and "stopped early (no test MP): 3 cells" in out
    assert main([*argv, "--no-mlflow"]) == 0
    assert "8 already recorded, 0 to run" in capsys.readouterr().out
