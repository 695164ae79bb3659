"""Party actors' lifetime: placement-group bundles, start, warm reuse, health, stop.

Why a pool: a sweep's trainable process runs many trials; reusing their actors saves the
~3 CPU-s a fresh actor pays for process start, ``import torch`` and the party code (~1.1
more where a torch optimizer first imports ``torch._dynamo``). Inside a Tune trial the
actors take the trial's own bundles (``HELD`` keeps two open sets of one trial apart);
standalone, a set creates its own placement group. A Tune trial may start its first set
before it imports torch itself (``prestart_actors``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.placement_group import (
    PlacementGroup,
    get_current_placement_group,
    placement_group,
    remove_placement_group,
)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from trainables.transport.ray_actors.actor import PartyActor


@dataclass(frozen=True)
class PartyResources:
    """What each party actor reserves: its bundle in the trial's placement group."""

    cpu: float = 1.0
    gpu: float = 0.0

    def bundle(self) -> dict[str, float]:
        return {"CPU": self.cpu, **({"GPU": self.gpu} if self.gpu else {})}


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Join ``address`` (``auto``, ``ray://…``) or start a local Ray once per process."""
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
    if address is None:
        kwargs["num_cpus"] = num_cpus
    ray.init(address=address, **kwargs)


@dataclass
class ActorSet:
    """Party actors with their placement group; kept warm between trials when reused."""

    actors: list[Any]
    own_pg: PlacementGroup | None  # None: the actors live in a Tune trial's group
    bundles: tuple[int, ...] = ()  # their bundles in the trial's group (``HELD``)
    trial_pg: str | None = None  # the Tune trial's group id, when inside one


# Warm actor sets by (parties, resources, enclosing placement group). A sweep's trainable
# process runs many trials; reusing their actors saves the ~3 CPU-s a fresh actor pays
# for process start, ``import torch`` and the party code.
POOL: dict[tuple[Any, ...], list[ActorSet]] = {}


def pool_key(n: int, resources: PartyResources) -> tuple[Any, ...]:
    """Which warm sets a group of ``n`` actors of ``resources`` may take, here (a Tune
    trial's sets stay inside its own placement group)."""
    current = get_current_placement_group()
    return (n, resources, None if current is None else current.id.hex())


def prestart_actors(n: int, resources: PartyResources) -> None:
    """Start ``n`` party actors now and pool them warm, for the first group of that shape.

    Why: a Tune trial's process spends ~3 s importing torch and the training code before
    its first training opens its parties; actors started first import theirs meanwhile
    (``sweep_engine/entry.py``). Their ``__init__`` runs in their own processes, so this
    returns at once. A process Tune reuses for its next trial keeps its warm set: then
    nothing is started."""
    key = pool_key(n, resources)
    if POOL.get(key):
        return  # a warm set of that shape already waits here (Tune reused this process)
    started = start_actors(n, resources)
    POOL.setdefault(key, []).append(started)


# Bundles of a Tune trial's placement group held by open actor sets, by group id: a trial
# may open several groups at once (FedHSSL's parties and its aggregation server, xgboost's
# workers), each on bundles no other set of the trial holds.
HELD: dict[str, set[int]] = {}


def _trial_bundles(current: PlacementGroup, n: int, resources: PartyResources) -> list[int]:
    """``n`` free party bundles (1..) of the trial's group; a set that reserves no CPU or
    GPU (an aggregation server) shares the trial's own bundle 0. RuntimeError when the
    trial's group is too small: the planner sized it from ``TrialKind.actors``."""
    if resources.cpu == 0 and resources.gpu == 0:
        return [0] * n
    held = HELD.setdefault(current.id.hex(), set())
    free = [i for i in range(1, current.bundle_count) if i not in held]
    if len(free) < n:  # warm sets of another shape hold them: stop those first
        for key in [k for k in POOL if k[2] == current.id.hex()]:
            for actor_set in POOL.pop(key):
                stop_actors(actor_set)
        free = [i for i in range(1, current.bundle_count) if i not in held]
    if len(free) < n:
        raise RuntimeError(
            f"the trial's placement group has {current.bundle_count - 1} party bundles, "
            f"{len(held)} in use; {n} more actors cannot be placed (a planner bug: "
            "TrialKind.actors must count every actor a trial opens at once)"
        )
    held.update(free[:n])
    return free[:n]


def start_actors(n: int, resources: PartyResources) -> ActorSet:
    current = get_current_placement_group()
    own_pg: PlacementGroup | None = None
    if current is not None:
        pg, bundles = current, _trial_bundles(current, n, resources)  # a Tune trial
    elif resources.cpu == 0 and resources.gpu == 0:
        pg, bundles = None, [0] * n  # a coordinator that reserves nothing, outside Tune
    else:
        pg = own_pg = placement_group([resources.bundle()] * n)
        _wait_ready(pg, n, resources)
        bundles = list(range(n))
    actors = [
        PartyActor.options(  # type: ignore[attr-defined]  # @ray.remote adds options
            num_cpus=resources.cpu,
            num_gpus=resources.gpu,
            **(
                {}
                if pg is None
                else {
                    "scheduling_strategy": PlacementGroupSchedulingStrategy(
                        pg, placement_group_bundle_index=bundles[i]
                    )
                }
            ),
        ).remote(max(1, int(resources.cpu)))
        for i in range(n)
    ]
    return ActorSet(actors, own_pg, tuple(bundles), None if current is None else current.id.hex())


# How long a trial's own placement group may wait for its CPUs, after idle warm actors
# (which hold CPUs between trials) were stopped to make room: then it fails, naming what
# it asked for, instead of waiting forever.
PG_WAIT_S = 120.0


def _wait_ready(pg: PlacementGroup, n: int, resources: PartyResources) -> None:
    try:
        ray.get(pg.ready(), timeout=2.0)
        return
    except ray.exceptions.GetTimeoutError:
        release_warm_actors()  # idle pooled actors may hold what this group needs
    try:
        ray.get(pg.ready(), timeout=PG_WAIT_S)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(pg)
        raise RuntimeError(
            f"{n} party actors of {resources.bundle()} each could not be placed within "
            f"{PG_WAIT_S:g} s; Ray has {ray.available_resources()} free of "
            f"{ray.cluster_resources()}: use a smaller cpu_per_party or a bigger Ray"
        ) from None


def _release_bundles(actor_set: ActorSet) -> None:
    if actor_set.trial_pg is not None:
        HELD.get(actor_set.trial_pg, set()).difference_update(actor_set.bundles)


def stop_actors(actor_set: ActorSet) -> None:
    _release_bundles(actor_set)
    for actor in actor_set.actors:
        ray.kill(actor)
    if actor_set.own_pg is not None:
        remove_placement_group(actor_set.own_pg)


# How long a pooled actor may take to answer a ping before it counts as dead. An idle
# actor answers in about a millisecond; a dead one fails at once (Ray knows it died).
PING_TIMEOUT_S = 10.0


def dead_actors(actor_set: ActorSet) -> int:
    """How many of the set's actors no longer answer (killed, OOM, node lost, hung)."""
    dead = 0
    for ref in [a.ping.remote() for a in actor_set.actors]:
        try:
            ray.get(ref, timeout=PING_TIMEOUT_S)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            dead += 1
    return dead


def release_warm_actors() -> int:
    """Stop every pooled actor set; returns how many actors were stopped."""
    stopped = 0
    for sets in POOL.values():
        for actor_set in sets:
            stop_actors(actor_set)
            stopped += len(actor_set.actors)
    POOL.clear()
    return stopped


def ray_get(handles: Any) -> Any:
    """``ray.get`` for code elsewhere that holds object refs (xgboost's federated workers)."""
    return ray.get(handles)


def node_ip_address() -> str:
    """This process's routable node IP, as Ray reports it (what other nodes can reach);
    xgboost's federated server is dialled at it."""
    return str(ray.util.get_node_ip_address())


def current_node_id() -> str | None:
    """The Ray node this process runs on (None outside Ray): evidence of where parties ran."""
    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
