"""The ``ray`` transport: each party in its own actor inside the trial's placement group.

This package is the only place that knows about Ray (``tests/test_kind_conformance.py``).
``actor.py``: ``PartyActor``, a thin shell around a Ray-free ``Party``, and
``RayTransport`` (the protocol runs inside the active party's actor and reaches the
passive actors with one round trip per round per passive party, in parallel across
parties); ``pool.py``: placement groups, warm reuse and health of the actors;
``parties.py``: ``RayParties``, one trial's party group.
"""

from trainables.transport.ray_actors.actor import PartyActor, RayTransport
from trainables.transport.ray_actors.parties import RayParties, open_ray_group
from trainables.transport.ray_actors.pool import (
    PartyResources,
    current_node_id,
    ensure_ray,
    node_ip_address,
    ray_get,
    release_warm_actors,
)

__all__ = [
    "PartyActor",
    "PartyResources",
    "RayParties",
    "RayTransport",
    "current_node_id",
    "ensure_ray",
    "node_ip_address",
    "open_ray_group",
    "ray_get",
    "release_warm_actors",
]
