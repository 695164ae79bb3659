"""What a sweep's Tune trial imports first: its context, and the start of its party actors.

Why a module of its own, importing no torch and none of our training code: Tune imports
the module of a trainable function before it calls it, and our training code brings
torch (~3 CPU-s with Tune's own imports). A grid pack's trial starts its party actors
first (``start_pack``), so their processes import torch while the trial's process does,
instead of about 3 s after it. On 2 cores start-up is bound by the CPU all processes
spend, so the gain is smaller than that overlap (with the other start-up changes of
issue 28, the smoke sweep's first record came 0.7-1.2 s sooner: docs/benchmarks.md).
``SweepContext`` (``context.py``) is as light, because Tune unpickles it before the
trainable's first line runs.
"""

from __future__ import annotations

from typing import Any

from sweep_engine.context import SweepContext


def prestart(config: dict[str, Any], ctx: SweepContext) -> None:
    """Start the party actors the trial's first training will open (a grid pack's
    ``cell.prestart``, a search cell's ``ctx.prestart``: set by the planner from
    ``TrialKind.prestart``), kept warm in the pool for it."""
    cell = config.get("cell")
    n = int(cell.get("prestart", 0)) if isinstance(cell, dict) else ctx.prestart
    placement = ctx.placement
    if n <= 0 or not placement.remote or not placement.reuse_actors:
        return  # local parties, or actors that are not pooled: nothing would take them
    from trainables.transport.ray_actors.pool import PartyResources, prestart_actors

    prestart_actors(n, PartyResources(placement.cpu_per_party, placement.gpu_per_party))


def start_pack(config: dict[str, Any], ctx: SweepContext, packs: dict[str, Any]) -> None:
    """The Tune trainable of a grid: party actors started, then ``pack_trial.train_pack``."""
    prestart(config, ctx)
    from sweep_engine.pack_trial import train_pack  # torch and the training code from here

    train_pack(config, ctx, packs)


def start_one(config: dict[str, Any], ctx: SweepContext) -> None:
    """The Tune trainable of a search: party actors started, then ``runner.train_one``."""
    prestart(config, ctx)
    from sweep_engine.runner import train_one  # torch and the training code from here

    train_one(config, ctx)
