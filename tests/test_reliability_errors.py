"""A ConfigError inside the trainable is deterministic: recorded as an error at once, never
retried (``run.max_failures`` is for faults: a lost actor or node, see
``test_reliability_actor.py``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as pads
import pytest

from sweep_engine.plan import Training, expand
from sweep_engine.space import load_space
from trainables.spec import TrialSpec
from trainables.trial import incompatibility

pytestmark = pytest.mark.ray


def test_a_config_error_in_the_trainable_is_recorded_once_without_retries(
    tmp_path: Path, ray_session: None, capsys: pytest.CaptureFixture[str]
) -> None:
    from sweep_engine.grid import run_grid

    space = tmp_path / "badspec.yaml"
    space.write_text(
        "name: badspec\nbase: {dataset: breast_cancer, epochs: 2}\ngrid: {seed: [0]}\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
        "run: {max_failures: 2, max_concurrent_trials: 1}\n"
    )
    plan = expand(load_space(str(space)))
    (good,) = plan.trainings
    # a spec the planner drops (455 training rows); built by hand it reaches the trainable,
    # as a spec would whose data differ on the node that runs it
    bad_spec = TrialSpec.build(dataset="breast_cancer", n_aligned=100_000, epochs=2)
    assert "n_aligned=100000" in (incompatibility(bad_spec) or "")
    bad = Training(bad_spec, {"n_aligned": 100_000})
    # a defense that cannot act here (the planner drops it too): also deterministic
    idle_spec = TrialSpec.build(
        dataset="breast_cancer", epochs=2, defense="iso", defense_param=1.0,
        defense_params={"target": "representation"},
    )  # fmt: skip
    assert "would never apply" in (incompatibility(idle_spec) or "")
    idle = Training(idle_spec, {"defense": "iso"})

    sweep_dir = tmp_path / "results" / "badspec"
    written, failed = run_grid(plan, sweep_dir, [good, bad, idle], None)

    out = capsys.readouterr().out
    assert (written, failed) == (1, 2)
    assert "[retry]" not in out, out  # before: two retries of a spec that cannot run
    assert out.count("[error]") == 2 and "recorded, not retried" in out
    rows = {r["trial_id"]: r for r in pads.dataset(sweep_dir / "records").to_table().to_pylist()}
    assert rows[good.trial_id]["status"] == "ok"
    assert rows[bad.trial_id]["status"] == "error" and rows[bad.trial_id]["mp"] is None
    assert "ConfigError" in rows[bad.trial_id]["error"]
    assert "n_aligned=100000 is outside [1, 455]" in rows[bad.trial_id]["error"]
    assert rows[idle.trial_id]["status"] == "error"
    assert "defense iso never applied" in rows[idle.trial_id]["error"]
