"""Transports move messages between the active party and the passive parties.

``local`` calls parties in this process; ``ray`` calls each party in its own Ray actor.
The protocol code is the same for both: it ``submit``s a method call to every passive
party, may compute meanwhile, and ``gather``s the results. Rounds and bytes are counted
here, at the boundary, from the messages that actually cross it.

Why the names load lazily: a sweep's trainable process imports ``placement`` and the
actor pool first, to start its party actors before it pays for ``import torch`` itself
(``sweep_engine/trainable.py``); ``base`` and ``local`` bring torch with them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainables.transport.base import Pending, Transport
    from trainables.transport.local import LocalTransport

_WHERE = {"Pending": "base", "Transport": "base", "LocalTransport": "local"}

__all__ = ["LocalTransport", "Pending", "Transport"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
