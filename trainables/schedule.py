"""How a pack's trainings advance, apart from where their parties run (``Placement``).

Why a second object: ``Placement`` answers "in this process or one Ray actor per party,
with what resources"; every kind reads it. ``Schedule`` answers "stacked or one by one,
cut by successive halving, watched epoch by epoch"; only the kinds whose trainings run
the round loop read it (``kinds/nn.py`` through ``vfl/vectorized.py``), and the base kind
runs a pack one training after another whatever it says, telling ``stack_done`` after
each. Light (no torch): a sweep's ``SweepContext`` carries it into every trial.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from trainables.rounds import EpochListener
from trainables.vfl.halving import Halving


@dataclass(frozen=True)
class Schedule:
    """``vectorize``: a pack's trainings that stack run as one stacked training (``run.vectorize``,
    ``vfl/vectorized.py``); ``halving``: successive halving of a pack's stacks
    (``run.halving``, ``vfl/halving.py``), or None; ``listener``: told of each epoch end of
    the one training it runs (a Tune scheduler's or an Optuna pruner's relay,
    ``sweep_engine/early_stop.py``), or None; ``stack_done``: called once a stack's
    outcomes have all been taken, before the next stack trains (every kind: the base kind's
    stacks are its single trainings), so a pack reports what it holds then instead of
    after the next stack (``sweep_engine/pack_trial.py``), or None."""

    vectorize: bool = True
    halving: Halving | None = None
    listener: EpochListener | None = dataclasses.field(default=None, compare=False)
    stack_done: Callable[[], None] | None = dataclasses.field(default=None, compare=False)

    def done_stack(self) -> None:
        """Tell ``stack_done``, if any, that a stack's outcomes were all taken."""
        if self.stack_done is not None:
            self.stack_done()


STACKED = Schedule()  # the default: stack what stacks, no halving, no listener
ONE_BY_ONE = Schedule(vectorize=False)
