"""A space's run-level sections: what a trial reserves (``resources``) and how the sweep
runs (``run``: concurrency, retries, transport, packs, early stopping).

Apart from ``space.py`` so that the space's schema stays readable in one sitting; every
name here is re-exported by ``sweep_engine.space``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trainables.spec import Bool, Float, Int, Quoted, quoted_error

MAX_CELLS = 100_000  # default of run.max_cells


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Resources(_Strict):
    """What one trial reserves: a bundle for the trial itself and one per party."""

    cpu_per_party: Float = Field(default=1.0, gt=0)
    # a party uses one device; fractions share
    gpu_per_party: Float = Field(default=0.0, ge=0, le=1)
    cpu_per_trial: Float = Field(default=0.1, ge=0)  # the trainable mostly waits on its parties


class SchedulerBlock(_Strict):
    """``run.scheduler``: a Tune scheduler stopping trainings early on their validation MP
    at epoch ends (``sweep_engine/early_stop.py``)."""

    name: Literal["asha", "hyperband", "median"]
    metric: Literal["val_mp"] = "val_mp"  # never the test MP: that is what gets reported
    mode: Literal["max"] = "max"
    grace_epochs: Int = Field(default=1, ge=1)  # no training stops before this many epochs
    reduction_factor: Int = Field(default=3, ge=2)  # asha / hyperband: 1/this goes on at each rung
    # asha / hyperband: the last rung (None: epochs)
    max_epochs: Int | None = Field(default=None, ge=1)


class HalvingBlock(_Strict):
    """``run.halving``: successive halving inside a grid's stacked packs
    (``trainables/vfl/halving.py``): at ``grace_epochs``, x ``reduction_factor``, ... the
    cells outside the best 1/``reduction_factor`` by validation MP stop."""

    grace_epochs: Int = Field(default=1, ge=1)
    reduction_factor: Int = Field(default=3, ge=2)


class RunSettings(_Strict):
    max_concurrent_trials: Int | None = Field(default=None, ge=1)
    # stop trainings early on their validation MP (one Tune trial per training: a search)
    scheduler: SchedulerBlock | None = None
    # successive halving inside a grid's packs (each shape's trainings in one pack)
    halving: HalvingBlock | None = None
    max_failures: Int = Field(default=1, ge=0)
    transport: Literal["ray", "local"] = "ray"
    reuse_actors: Bool = True
    # trainings per Tune trial (``sweep_engine/packs.py``): an int, or auto (about
    # pack_seconds each by the cost model); searches keep one training per trial
    pack: Any = "auto"
    pack_seconds: Float = Field(default=5.0, gt=0)
    # a pack's same-shape NN trainings as one stacked training (``vfl/vectorized.py``);
    # records say which ran (``extra.vectorized``)
    vectorize: Bool = True

    @field_validator("pack", mode="before")
    @classmethod
    def _pack(cls, value: Any) -> int | str:
        allowed = "a whole number >= 1, or auto"
        if isinstance(value, Quoted):  # pack: "4"
            raise quoted_error(value, allowed, ("int",))
        if value == "auto" or (type(value) is int and value >= 1):
            return value
        raise ValueError(f"allowed: {allowed}")

    # grid cells a space may expand into; a bigger grid is refused before it is expanded
    max_cells: Int = Field(default=MAX_CELLS, ge=1)
