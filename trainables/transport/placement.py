"""Where a trial's parties run: one frozen object instead of five keywords on every runner.

Why: every trial kind opens its parties the same way (in this process, or one Ray actor
per party inside the trial's placement group); the choice travels as one value from the
sweep runner or the CLI down to ``open_parties``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from trainables.errors import ConfigError

TRANSPORTS = ("local", "ray")


@dataclass(frozen=True)
class Placement:
    """``local``: parties are objects in this process; ``ray``: each party in its own actor
    reserving ``cpu_per_party`` / ``gpu_per_party``, on the cluster at ``address``; with
    ``reuse_actors`` the actors are kept warm for the next trial of the same shape;
    ``vectorize``: a pack's trainings that stack run as one batched training."""

    transport: str = "local"
    cpu_per_party: float = 1.0
    gpu_per_party: float = 0.0
    address: str | None = None
    reuse_actors: bool = False
    # stack a pack's same-shape NN trainings into one batched training (``vfl/vectorized.py``)
    vectorize: bool = True
    # told of each epoch end of the one training placed here (``rounds.EpochListener``:
    # a Tune scheduler's or an Optuna pruner's relay, ``sweep_engine/early_stop.py``)
    listener: Any = dataclasses.field(default=None, compare=False)
    # successive halving of a pack's stacks (``vfl/halving.py``'s ``Halving``), or None
    halving: Any = None

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise ConfigError(
                f"transport={self.transport!r} is not one of: {', '.join(TRANSPORTS)}"
            )
        if self.cpu_per_party < 0 or self.gpu_per_party < 0:
            raise ConfigError(
                f"cpu_per_party={self.cpu_per_party}, gpu_per_party={self.gpu_per_party}: "
                "both must be >= 0"
            )

    @property
    def remote(self) -> bool:
        return self.transport == "ray"

    def coordinator(self) -> Placement:
        """The same placement for actors that reserve no CPU or GPU of their own (an
        aggregation server that only averages): under Tune they share the trial's bundle,
        so a trial needs no party bundle for them (``TrialKind.actors`` does not count them)."""
        return dataclasses.replace(self, cpu_per_party=0.0, gpu_per_party=0.0)


LOCAL = Placement()
