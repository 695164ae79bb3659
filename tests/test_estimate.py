"""The one wall-time estimate: measured parts, what is already recorded, missing data.

Real trainings in this process (breast_cancer, a few epochs), a real cost cache file in
``tmp_path``, real records written by the sink.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweep_engine.cli import main as sweep_main
from sweep_engine.costs import Costs, attack_key, learn, load, train_key
from sweep_engine.estimate import estimate
from sweep_engine.plan import expand
from sweep_engine.sink import RecordSink
from sweep_engine.space import load_space
from trainables.trial import run_trial

SPACE = """\
name: est
base: {dataset: breast_cancer, n_parties: 2, epochs: 4}
grid:
  seed: [0, 1, 2]
attacks: [ns]
"""


def _plan(tmp_path: Path, text: str = SPACE, **kw: object):
    path = tmp_path / "est.yaml"
    path.write_text(text)
    return expand(load_space(str(path)), **kw)


def test_probe_measures_each_part_once_and_caches_it(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    costs = Costs(path=tmp_path / "costs.json")
    first = estimate(plan, cpus=2, probe=True, budget_s=60, costs=costs)
    assert first.todo == 3 and first.measured == 3 and first.unknown == 0
    spec = plan.trainings[0].spec
    assert costs.training(train_key(spec)) is not None  # one class: all seeds share it
    assert costs.evaluation(attack_key("ns", spec)) is not None
    assert first.seconds > 0 and "3 of 3 from parts measured here" in first.text()
    again = estimate(plan, cpus=2, probe=True, budget_s=60, costs=load(tmp_path / "costs.json"))
    assert again.seconds == pytest.approx(first.seconds)  # read back, not measured again
    assert again.probed_s < first.probed_s


def test_without_measurements_the_cost_model_answers(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    guess = estimate(plan, cpus=2, probe=False, costs=Costs(path=tmp_path / "c.json"))
    assert guess.measured == 0 and guess.seconds > 0
    assert "the rest by the cost model" in guess.text()


def test_recorded_trainings_are_not_counted(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    costs = Costs(path=tmp_path / "costs.json")
    full = estimate(plan, cpus=2, probe=True, budget_s=60, costs=costs)
    sweep_dir = tmp_path / "results" / "est"
    first = plan.trainings[0]
    RecordSink(sweep_dir).write(
        first.trial_id, run_trial(first.spec, attacks=first.attacks, trial_id=first.trial_id)
    )
    left = estimate(plan, cpus=2, probe=True, budget_s=60, costs=costs, sweep_dir=sweep_dir)
    assert (left.recorded, left.todo) == (1, 2)
    assert left.seconds < full.seconds
    assert "1 already recorded" in left.text()


def test_learn_takes_the_sweep_numbers_over_the_probe(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    costs = Costs(path=tmp_path / "costs.json")
    spec = plan.trainings[0].spec
    costs.add_training(train_key(spec), 100.0, 100.0, "probe")  # a wildly wrong probe
    sweep_dir = tmp_path / "results" / "est"
    for t in plan.trainings:
        records = run_trial(t.spec, attacks=t.attacks, trial_id=t.trial_id)
        RecordSink(sweep_dir).write(t.trial_id, records)
    assert learn(sweep_dir, costs) == 3
    fixed, per_epoch = costs.training(train_key(spec))  # type: ignore[misc]
    assert fixed == 0.0 and per_epoch < 10.0
    assert costs.source[f"train:{train_key(spec)}"] == "sweep"
    costs.add_training(train_key(spec), 100.0, 100.0, "probe")  # a later probe: ignored
    assert costs.training(train_key(spec))[1] < 10.0  # type: ignore[index]
    assert load(tmp_path / "costs.json").training(train_key(spec)) is not None  # saved


def test_missing_data_is_unknown_not_free(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    text = SPACE.replace("breast_cancer", "adult")
    plan = _plan(tmp_path, text, data_dir=tmp_path, missing_ok=True)
    guess = estimate(plan, cpus=2, probe=True, budget_s=60, data_dir=str(tmp_path))
    assert guess.unknown == 3 and guess.text().startswith("unknown: no data for adult")
    (tmp_path / "est.yaml").write_text(text)
    argv = ["--space", str(tmp_path / "est.yaml"), "--dry-run", "--json"]
    assert sweep_main([*argv, "--data-dir", str(tmp_path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["estimate_s"] is None and summary["estimate_unknown"] == 3


def test_a_plan_this_machine_would_refuse_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "big.yaml").write_text(SPACE + "resources: {cpu_per_party: 64}\n")
    assert sweep_main(["--space", str(tmp_path / "big.yaml"), "--dry-run", "--json"]) == 0
    captured = capsys.readouterr()
    assert "warning: a real run here would stop" in captured.err
    assert "cpu_per_party=64" in captured.err
    assert json.loads(captured.out)["trainings"] == 3
