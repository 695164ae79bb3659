"""``SweepContext``: what every trainable of a sweep gets besides its config.

Light on purpose (no torch, no Tune): Tune unpickles it in a trial's process before the
trainable's first line runs, and a grid pack starts its party actors first
(``entry.start_pack``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sweep_engine.inbox import Inbox
from trainables.schedule import STACKED, Schedule
from trainables.transport.placement import Placement


@dataclass(frozen=True)
class SweepContext:
    """What every trainable of a sweep needs besides its config (sent once per trial)."""

    sweep: str
    placement: Placement
    data_dir: str | None
    schedule: Schedule = STACKED  # stacked or one by one, halving (``run.vectorize/halving``)
    cell: dict[str, Any] = field(default_factory=dict)  # a search cell's fixed fields
    attacks: tuple[tuple[str, dict[str, Any]], ...] = ()  # a search cell's shared attacks
    prestart: int = 0  # a search cell's party actors to start first (``entry.start_one``)
    early_stop: bool = False  # epoch ends reported to Tune (a scheduler or a pruner decides)
    inbox: Inbox = field(default_factory=Inbox)  # where trials post records (``inbox.py``)
