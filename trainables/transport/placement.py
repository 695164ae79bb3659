"""Where a trial's parties run: one frozen object instead of five keywords on every runner.

Why: every trial kind opens its parties the same way (in this process, or one Ray actor
per party inside the trial's placement group); the choice travels as one value from the
sweep runner or the CLI down to ``open_parties``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from trainables.errors import ConfigError

TRANSPORTS = ("local", "ray")


@dataclass(frozen=True)
class Placement:
    """``local``: parties are objects in this process; ``ray``: each party in its own actor
    reserving ``cpu_per_party`` / ``gpu_per_party``, on the cluster at ``address``; with
    ``reuse_actors`` the actors are kept warm for the next trial of the same shape. How
    the trainings placed here advance (stacked, halved, watched) is ``trainables.schedule``'s
    ``Schedule``, not a placement's."""

    transport: str = "local"
    cpu_per_party: float = 1.0
    gpu_per_party: float = 0.0
    address: str | None = None
    reuse_actors: bool = False

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
