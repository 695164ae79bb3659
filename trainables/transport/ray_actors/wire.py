"""``RayTransport``: the protocol's calls from the active party's actor to the passive ones.

One in-band pickle each way (``pack``); results are gathered with ``ray.get``. Apart from
``actor.py`` because it subclasses ``Transport`` (torch, through the message types), and
the actor module must import without torch (``pool.prestart_actors``).
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import ray

from trainables.transport.base import Transport
from trainables.transport.ray_actors.pickling import pack


class RayTransport(Transport):
    """Calls ``PartyActor.call_packed`` on each passive actor (arguments and results as
    one pickle each, ``pack``); results are gathered with ray.get."""

    def _submit(self, method: str, args: Sequence[tuple[Any, ...]]) -> list[object]:
        return [
            p.call_packed.remote(pack((method, a))) for p, a in zip(self.peers, args, strict=True)
        ]

    def _gather(self, handles: list[Any]) -> list[Any]:
        return [pickle.loads(blob) for blob in ray.get(handles)]
