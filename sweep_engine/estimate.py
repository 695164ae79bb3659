"""How long a plan will take here: the cost model of ``packs.py``, or a short calibration.

Why: a researcher deciding between one seed and three, or between digits and mnist,
needs the hours before launching, not after. ``python sweep.py --dry-run`` prints the
cost model's estimate; ``--dry-run --estimate`` first times one epoch of each distinct
training shape in this process (a few seconds) and scales it by the epochs, so the
arithmetic is measured on this machine. Attack evaluations use the per-attack table of
``packs.ATTACK_S`` (from ``benchmarks.attack_speed``), scaled by rows. Trainings run
``slots`` at a time, in packs, after a start-up of ``STARTUP_S``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sweep_engine.packs import cost, slots
from trainables.errors import ConfigError
from trainables.trial import actor_count, run_trial

if TYPE_CHECKING:
    from sweep_engine.plan import Plan, Training
    from trainables.spec import TrialSpec

STARTUP_S = 15.0  # Ray start, Tune set-up, cold actors (benchmarks.sweep_scale: 14 s)
CALIBRATION_BUDGET_S = 30.0  # shapes beyond this keep the cost model


@dataclass(frozen=True)
class Estimate:
    seconds: float
    slots: int
    calibrated_shapes: int
    shapes: int

    def text(self) -> str:
        how = (
            f"calibrated on {self.calibrated_shapes} of {self.shapes} training shapes"
            if self.calibrated_shapes
            else "cost model; --estimate times one and two epochs per shape here"
        )
        return f"~{_human(self.seconds)} on {self.slots} concurrent trial(s) ({how})"


def _human(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def shape_of(spec: TrialSpec) -> str:
    """What one epoch's cost depends on (seeds and defense strengths do not change it)."""
    fields = ("dataset", "dataset_params", "model", "hidden", "n_parties", "partition")
    more = ("protocol", "protocol_params", "batch_size", "ssl_variant", "aligned_ratio")
    dumped = spec.model_dump(mode="json")
    return json.dumps({k: dumped.get(k) for k in fields + more}, sort_keys=True)


def _timed(spec: TrialSpec, epochs: int, data_dir: str | None) -> float:
    one = spec.model_copy(update={"epochs": epochs, "defense": "none", "train_attack": "none"})
    start = time.perf_counter()
    run_trial(one, data_dir=data_dir)
    return time.perf_counter() - start


def calibrate(
    trainings: list[Training], budget_s: float, data_dir: str | None = None
) -> dict[str, tuple[float, float]]:
    """(fixed seconds, seconds per epoch) of each shape, from one- and two-epoch runs in
    this process (local transport), until ``budget_s`` is spent."""
    measured: dict[str, tuple[float, float]] = {}
    start = time.perf_counter()
    for training in trainings:
        spec = training.spec
        key = shape_of(spec)
        if key in measured or not spec.epochs or time.perf_counter() - start > budget_s:
            continue
        try:
            _timed(spec, 1, data_dir)  # warm: imports, the dataset's cache, torch's first calls
            one, two = _timed(spec, 1, data_dir), _timed(spec, 2, data_dir)
        except (ConfigError, RuntimeError):
            continue  # no data file here, or a shape that needs its defense: the cost model
        per_epoch = max(0.0, two - one)
        measured[key] = (max(0.0, one - per_epoch), per_epoch)
    return measured


def estimate(
    plan: Plan, cpus: int | None = None, measure: bool = False, data_dir: str | None = None
) -> Estimate:
    """Wall seconds of ``plan`` on a local Ray of ``cpus`` (default: this machine's);
    ``measure``: calibrate first."""
    trainings = list(plan.trainings)
    remote = plan.space.run.transport == "ray"
    measured = calibrate(trainings, CALIBRATION_BUDGET_S, data_dir) if measure else {}
    total = sum(_seconds(t, measured, remote, data_dir) for t in trainings)
    if plan.space.search is not None:
        total *= plan.space.search.n_trials
    n = max(actor_count(t.spec) for t in trainings)
    fit = slots(plan, n, cpus or os.cpu_count() or 1)
    shapes = len({shape_of(t.spec) for t in trainings})
    return Estimate(STARTUP_S + total / fit, fit, len(measured), shapes)


def _seconds(
    training: Training,
    measured: dict[str, tuple[float, float]],
    remote: bool,
    data_dir: str | None,
) -> float:
    """One training: the cost model, its in-process part measured where calibrated."""
    model = cost(training, remote, data_dir)
    shape = measured.get(shape_of(training.spec))
    if shape is None or not training.spec.epochs:
        return model.total
    fixed, per_epoch = shape
    return model.total - model.local + fixed + per_epoch * int(training.spec.epochs)
