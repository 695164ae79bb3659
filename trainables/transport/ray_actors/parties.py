"""``RayParties``: the party group of one trial on the ``ray`` transport.

What ``open_parties`` returns for a remote placement: actors from the pool (``pool.py``),
each loaded with its party, training run inside the active party's actor.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup

from trainables.party import Party, PartyInit
from trainables.rounds import TrainResult
from trainables.transport.base import Transport, method_name
from trainables.transport.group import Call, PartyGroup
from trainables.transport.placement import Placement
from trainables.transport.ray_actors.pool import (
    POOL,
    PartyResources,
    dead_actors,
    ensure_ray,
    pool_key,
    start_actors,
    stop_actors,
)
from trainables.transport.ray_actors.wire import RayTransport


class RayParties(PartyGroup):
    """The actors of one trial: placement group, one actor per party, then training.

    Inside a Tune trial the trial's own placement group is used (bundle 0 is the trial,
    bundles 1..K the parties); standalone, a group with one bundle per party is created.
    With ``reuse=True`` the actors are emptied on ``close`` (``unload`` drops the party and
    everything it held) and kept for the next trial of the same shape in this process; a
    kept set with a dead actor is evicted when taken (``evicted`` counts its dead actors).
    """

    def __init__(
        self, inits: Sequence[PartyInit], resources: PartyResources, reuse: bool = False
    ) -> None:
        start = time.perf_counter()
        self._key = pool_key(len(inits), resources)
        self._reuse = reuse
        pooled = POOL.get(self._key) if reuse else None
        warm = pooled.pop() if pooled else None
        self.reused, self.evicted = warm is not None, 0
        self._set = warm if warm is not None else start_actors(len(inits), resources)
        try:
            self._load(inits)
        except ray.exceptions.RayActorError:
            if warm is None:
                raise  # fresh actors that die at once: a fault for the caller's retries
            # Why here: an idle pooled actor can die between trials (OOM killer, node
            # lost, a kill by hand); its set is stopped whole and the trial gets fresh
            # actors instead of a failure and a Tune retry. No ping on the way in: a
            # dead actor fails this first call at once, so a live set costs nothing more.
            self.evicted = dead_actors(warm)
            stop_actors(warm)
            self.reused = False
            self._set = start_actors(len(inits), resources)
            self._load(inits)
        self.setup_seconds = time.perf_counter() - start

    def _load(self, inits: Sequence[PartyInit]) -> None:
        ray.get([a.load.remote(init) for a, init in zip(self.actors, inits, strict=True)])

    @property
    def actors(self) -> list[Any]:
        return self._set.actors

    @property
    def _own_pg(self) -> PlacementGroup | None:
        return self._set.own_pg

    @property
    def active(self) -> Any:
        return self.actors[-1]

    @property
    def passives(self) -> list[Any]:
        return self.actors[:-1]

    @property
    def n(self) -> int:
        return len(self.actors)

    def train(self, rounds: Any, epochs: int, target_mp: float | None = None) -> TrainResult:
        """``rounds`` (a ``Rounds``) run inside the active party's actor."""
        result: TrainResult = ray.get(
            self.active.train.remote(rounds, self.passives, epochs, target_mp)
        )
        return result

    def snapshot(self) -> list[Party]:
        """Copies of the trained parties, in party order (the trial's attack harness)."""
        return ray.get([a.snapshot.remote() for a in self.actors])

    def call_many(self, calls: Sequence[Call]) -> list[Any]:
        """Methods of hosted parties, in parallel across actors, results in call order
        (e.g. ``defense_applied``: small results read back before ``close`` empties them)."""
        return ray.get([self.actors[k].call.remote(method_name(m), *a) for k, m, a in calls])

    def transport(self, peers: Sequence[int]) -> Transport:
        return RayTransport([self.actors[k] for k in peers])

    def load(self, inits: Sequence[Any]) -> None:
        assert len(inits) == len(self.actors), "load keeps the number of parties"
        self._load(inits)

    def close(self) -> None:
        if self._reuse:
            ray.get([a.unload.remote() for a in self.actors])
            POOL.setdefault(self._key, []).append(self._set)
        else:
            stop_actors(self._set)

    def __enter__(self) -> RayParties:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_ray_group(inits: Sequence[Any], placement: Placement) -> RayParties:
    """Join or start Ray, then one actor per init in the trial's placement group."""
    ensure_ray(placement.address, num_cpus=None)
    resources = PartyResources(placement.cpu_per_party, placement.gpu_per_party)
    return RayParties(inits, resources, reuse=placement.reuse_actors)
