"""The ``ray`` transport: each party in its own actor inside the trial's placement group.

This package is the only place that knows about Ray (``tests/test_kind_conformance.py``).
``actor.py``: ``PartyActor``, a thin shell around a Ray-free ``Party``; ``wire.py``:
``RayTransport`` (the protocol runs inside the active party's actor and reaches the
passive actors with one round trip per round per passive party, in parallel across
parties); ``pool.py``: placement groups, warm reuse, health and early start of the
actors; ``parties.py``: ``RayParties``, one trial's party group.

Names load lazily, as in ``trainables.transport``: ``actor`` and ``pool`` import no torch,
so a trainable can start its actors before it imports torch (``pool.prestart_actors``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainables.transport.ray_actors.actor import PartyActor
    from trainables.transport.ray_actors.parties import RayParties, open_ray_group
    from trainables.transport.ray_actors.pool import (
        PartyResources,
        current_node_id,
        ensure_ray,
        node_ip_address,
        prestart_actors,
        ray_get,
        release_warm_actors,
    )
    from trainables.transport.ray_actors.wire import RayTransport

_WHERE = {
    "PartyActor": "actor",
    "RayTransport": "wire",
    "RayParties": "parties",
    "open_ray_group": "parties",
    **{
        name: "pool"
        for name in (
            "PartyResources",
            "current_node_id",
            "ensure_ray",
            "node_ip_address",
            "prestart_actors",
            "ray_get",
            "release_warm_actors",
        )
    },
}

__all__ = [
    "PartyActor",
    "PartyResources",
    "RayParties",
    "RayTransport",
    "current_node_id",
    "ensure_ray",
    "node_ip_address",
    "open_ray_group",
    "prestart_actors",
    "ray_get",
    "release_warm_actors",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
