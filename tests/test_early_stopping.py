"""Early stopping (``sweep_engine/early_stop.py``): Tune's ASHA on a real search, and an
Optuna pruner as a Tune scheduler.

The sweep test runs a real Ray Tune search with party actors: ASHA stops some trainings
at an epoch end on their validation MP; each stopped training is a record
(``status: stopped``, its epochs and last ``val_mp``, no test MP), is never the search's
best, and a resumed sweep does not run it again; its party actors go back to the warm
pool (the next trials of the study open theirs there).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import optuna
import pyarrow.parquet as pq
import pytest
from ray.tune.schedulers import TrialScheduler

from sweep_engine.early_stop import OptunaPruning, PrunedSearch

EPOCHS = 9
SPACE = f"""
name: es
base: {{dataset: digits, epochs: {EPOCHS}, seed: 0}}
search:
  params: {{lr: {{low: 0.0001, high: 0.3, log: true}}}}
  objectives: [{{metric: mp, mode: max}}]
  n_trials: 6
  sampler: random
run:
  max_concurrent_trials: 1
  scheduler: {{name: asha, grace_epochs: 1, reduction_factor: 3}}
resources: {{cpu_per_party: 0.5, cpu_per_trial: 0}}
"""


@pytest.mark.slow
def test_asha_stops_trainings_on_validation_mp_and_records_them(
    tmp_path: Path, ray_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    import ray

    from sweep_engine.cli import main

    space = tmp_path / "es.yaml"
    space.write_text(SPACE)
    address = ray.get_runtime_context().gcs_address
    argv = ["--space", str(space), "--results", str(tmp_path / "r"), "--address", address]
    assert main([*argv, "--no-mlflow"]) == 0
    out = capsys.readouterr().out
    rows = pq.read_table(tmp_path / "r" / "es" / "records").to_pylist()
    stopped = [r for r in rows if r["status"] == "stopped"]
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(rows) == 6 and stopped and ok, [r["status"] for r in rows]
    for r in stopped:
        extra = json.loads(r["extra"])
        assert r["mp"] is None and r["val_mp"] is not None and r["val_ratio"] == 0.2
        assert 1 <= extra["epochs_run"] < EPOCHS and extra["stopped_by"] == "scheduler:asha"
        assert re.search(rf"\[stopped\] .* after .* at val_mp={r['val_mp']:.4f}", out)
    assert all(r["mp"] is not None and r["val_mp"] is not None for r in ok)
    (summary_path,) = (tmp_path / "r" / "es" / "search").glob("*.json")
    summary = json.loads(summary_path.read_text())
    assert summary["n_stopped"] == len(stopped) and summary["selected_on"] == ["val_mp"]
    best = max(ok, key=lambda r: r["val_mp"])  # chosen on validation rows, among finished
    assert summary["best"]["trial_id"] == best["trial_id"]
    assert summary["best"]["test_mp"] == pytest.approx(best["mp"])
    assert main([*argv, "--no-mlflow"]) == 0  # resumed: nothing runs again
    assert "6 trials recorded, 0 to run" in capsys.readouterr().out


def test_an_epoch_report_carries_every_metric_a_search_selects_on() -> None:
    """Tune refuses a result without its searcher's and scheduler's metrics: an epoch end
    of a search on every objective (one attack's AP among them) carries them all."""
    from sweep_engine.early_stop import METRIC, TIME_ATTR, epoch_result
    from sweep_engine.runner import epoch_fields
    from sweep_engine.search import selected
    from sweep_engine.space import METRICS
    from trainables.spec import TrialSpec

    spec = TrialSpec.build(dataset="digits", val_ratio=0.2)
    report = {**epoch_fields(["dli"]), **epoch_result(spec, "s", 1, 0.5, 5)}
    wanted = {selected(m) for m in (*METRICS, "ap:dli")} | {METRIC, TIME_ATTR}
    assert wanted <= set(report), wanted - set(report)


def test_an_optuna_pruner_stops_a_trial_as_a_tune_scheduler() -> None:
    """Real Optuna study and pruner; the Tune trial stand-in carries only its id."""
    searcher = PrunedSearch(
        space={"lr": optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True)},
        metric="val_mp",
        mode="max",
        sampler=optuna.samplers.RandomSampler(seed=0),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0),
    )
    pruning = OptunaPruning(searcher)
    curves = {"a": [0.5, 0.7, 0.8], "b": [0.6, 0.75, 0.85], "c": [0.1, 0.2, 0.3], "d": [0.7, 0.8]}
    decisions = {}
    for tid, curve in curves.items():
        searcher.suggest(tid)
        for epoch, value in enumerate(curve, start=1):
            result = {"final": False, "val_mp": value, "epoch": epoch}
            decision = pruning.on_trial_result(None, SimpleNamespace(trial_id=tid), result)
            if decision == TrialScheduler.STOP:
                searcher.on_trial_complete(tid, result)
                break
        else:
            searcher.on_trial_complete(tid, {"final": True, "val_mp": curve[-1], "epoch": 3})
        decisions[tid] = decision
    # two startup trials run whole; c falls below the median at its first epoch; d above
    assert [decisions[t] for t in "abcd"] == ["CONTINUE", "CONTINUE", "STOP", "CONTINUE"]
    states = {t.number: t.state for t in searcher._ot_study.trials}
    assert states[2] == optuna.trial.TrialState.PRUNED
    assert [states[i] for i in (0, 1, 3)] == [optuna.trial.TrialState.COMPLETE] * 3
    assert searcher._ot_study.trials[2].intermediate_values == {1: 0.1}
