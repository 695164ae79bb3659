"""The ``ray`` transport: each party in its own actor inside the trial's placement group.

This module is the only place that knows about Ray. ``PartyActor`` is a thin shell
around a Ray-free ``Party``; the protocol itself runs inside the active party's actor
and reaches the passive actors through ``RayTransport`` (one actor round trip per round
per passive party, in parallel across parties).
"""

from __future__ import annotations

import gc
import os
import pickle
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray
import torch
from ray.util.placement_group import (
    PlacementGroup,
    get_current_placement_group,
    placement_group,
    remove_placement_group,
)
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from trainables.party import ActiveParty, Party, PartyInit
from trainables.protocols import TrainResult
from trainables.transport.base import Transport
from trainables.transport.group import Call, PartyGroup
from trainables.transport.placement import Placement


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


def _warm_up_torch() -> None:
    """Pay torch's one-time costs (autograd engine, optimizer kernels) at actor start.

    A fresh process spends ~1 s on its first backward pass; without this, that time lands
    in the first training round instead of in the trial's setup.
    """
    layer = torch.nn.Linear(4, 4)
    opt = torch.optim.Adam(layer.parameters())
    layer(torch.zeros(2, 4)).sum().backward()
    opt.step()


@ray.remote
class PartyActor:
    """Hosts one party. Holds exactly what its ``PartyInit`` gave it."""

    def __init__(self, threads: int = 1) -> None:
        torch.set_num_threads(threads)  # same arithmetic as the local transport
        self.party: Party | None = None
        _warm_up_torch()
        # Why: a full collection walks every object torch and Ray made at import (~200k
        # objects, ~90 ms); frozen, ``unload``'s collection sees only what trials left.
        gc.collect()
        gc.freeze()

    def load(self, init: PartyInit) -> bool:
        self.party = init.build()
        return True

    def snapshot(self) -> Party | None:
        return self.party

    def unload(self) -> bool:
        """Forget the party and all it held, so a reused actor starts the next trial empty."""
        self.party = None
        gc.collect()
        return True

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.party, method)(*args)

    def call_packed(self, blob: bytes) -> bytes:
        """``call`` with method, arguments and result pickled by ``_pack`` (RayTransport)."""
        method, args = pickle.loads(blob)
        return _pack(getattr(self.party, method)(*args))

    def ping(self) -> None:
        return None

    def where(self) -> dict[str, Any]:
        """Process, placement group and party of this actor (tests and diagnostics)."""
        pg = get_current_placement_group()
        return {
            "pid": os.getpid(),
            "placement_group": None if pg is None else pg.id.hex(),
            "party_id": None if self.party is None else self.party.party_id,
            "active": isinstance(self.party, ActiveParty),
        }

    def call_peer_rtt(self, peer: Any, n: int) -> float:
        """Median ms of an empty call from this actor to ``peer`` (a round's floor)."""
        ray.get(peer.ping.remote())
        samples = []
        for _ in range(n):
            start = time.perf_counter()
            ray.get(peer.ping.remote())
            samples.append(time.perf_counter() - start)
        return float(np.median(samples) * 1000)

    def train(
        self, protocol: Any, peers: Sequence[Any], epochs: int, target_mp: float | None = None
    ) -> TrainResult:
        """Run ``protocol`` here, next to the active party, against the passive actors."""
        assert self.party is not None, "train runs on the active party's actor"
        return protocol.run(self.party, RayTransport(peers), epochs, target_mp)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array-valued attribute of the hosted party (for threat-model tests)."""
        out: dict[str, np.ndarray] = {}
        for name, value in (vars(self.party) if self.party is not None else {}).items():
            if isinstance(value, torch.Tensor):
                out[name] = value.detach().cpu().numpy()
            elif isinstance(value, np.ndarray):
                out[name] = value
        return out

    def reachable_arrays(self) -> dict[str, np.ndarray]:
        """Every array reachable from this actor's state, by path (for threat-model tests:
        a passive party's actor must hold nothing equal to the labels, however deep)."""
        out: dict[str, np.ndarray] = {}
        _walk_arrays(vars(self), "actor", out, set())
        return out


def _walk_arrays(obj: Any, path: str, out: dict[str, np.ndarray], seen: set[int]) -> None:
    """Depth-first over attributes, containers and closures; arrays and tensors collected."""
    skip = (type, types.ModuleType, str, bytes, int, float, complex)
    if obj is None or isinstance(obj, skip) or id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, (torch.Tensor, np.ndarray)):
        out[path] = obj.detach().cpu().numpy() if isinstance(obj, torch.Tensor) else obj
        return
    if isinstance(obj, dict):
        items: Any = obj.items()
    elif isinstance(obj, (list, tuple, set, frozenset)):
        items = enumerate(obj)
    elif callable(obj) and hasattr(obj, "__code__"):  # a closure: what it captured
        cells = [c for c in obj.__closure__ or () if c != types.CellType()]  # skip empty
        items = [(f"<cell{i}>", c.cell_contents) for i, c in enumerate(cells)]
    else:
        items = list(getattr(obj, "__dict__", {}).items())
        items += [(s, getattr(obj, s)) for s in getattr(obj, "__slots__", ()) if hasattr(obj, s)]
        if hasattr(obj, "__self__"):  # a bound method: its object
            items.append(("__self__", obj.__self__))
    for key, value in items:
        _walk_arrays(value, f"{path}.{key}", out, seen)


def _pack(value: Any) -> bytes:
    """``value`` as one in-band pickle (cloudpickle for what plain pickle refuses).

    Why: a round's messages are small (one batch of embeddings or gradients); as one
    bytes object a call costs ~0.2 ms less CPU than the same Message through Ray's
    serializer, which sets up an out-of-band buffer for every numpy payload.
    """
    try:
        return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):  # a lambda, a local class
        return ray.cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


class RayTransport(Transport):
    """Calls ``PartyActor.call_packed`` on each passive actor (arguments and results as
    one pickle each, ``_pack``); results are gathered with ray.get."""

    def __init__(self, peers: Sequence[Any]) -> None:
        super().__init__()
        self.peers = list(peers)

    @property
    def n_peers(self) -> int:
        return len(self.peers)

    def _submit(self, method: str, args: Sequence[tuple[Any, ...]]) -> list[Any]:
        return [
            p.call_packed.remote(_pack((method, a))) for p, a in zip(self.peers, args, strict=True)
        ]

    def _gather(self, handles: list[Any]) -> list[Any]:
        return [pickle.loads(blob) for blob in ray.get(handles)]


@dataclass
class _ActorSet:
    """Party actors with their placement group; kept warm between trials when reused."""

    actors: list[Any]
    own_pg: PlacementGroup | None  # None: the actors live in a Tune trial's group
    bundles: tuple[int, ...] = ()  # their bundles in the trial's group (``_HELD``)
    trial_pg: str | None = None  # the Tune trial's group id, when inside one


# Warm actor sets by (parties, resources, enclosing placement group). A sweep's trainable
# process runs many trials; reusing their actors saves the ~2 s a fresh actor pays for
# process start, ``import torch`` and torch's first backward pass.
_POOL: dict[tuple[Any, ...], list[_ActorSet]] = {}


# Bundles of a Tune trial's placement group held by open actor sets, by group id: a trial
# may open several groups at once (FedHSSL's parties and its aggregation server, xgboost's
# workers), each on bundles no other set of the trial holds.
_HELD: dict[str, set[int]] = {}


def _trial_bundles(current: PlacementGroup, n: int, resources: PartyResources) -> list[int]:
    """``n`` free party bundles (1..) of the trial's group; a set that reserves no CPU or
    GPU (an aggregation server) shares the trial's own bundle 0. RuntimeError when the
    trial's group is too small: the planner sized it from ``TrialKind.actors``."""
    if resources.cpu == 0 and resources.gpu == 0:
        return [0] * n
    held = _HELD.setdefault(current.id.hex(), set())
    free = [i for i in range(1, current.bundle_count) if i not in held]
    if len(free) < n:  # warm sets of another shape hold them: stop those first
        for key in [k for k in _POOL if k[2] == current.id.hex()]:
            for actor_set in _POOL.pop(key):
                _stop_actors(actor_set)
        free = [i for i in range(1, current.bundle_count) if i not in held]
    if len(free) < n:
        raise RuntimeError(
            f"the trial's placement group has {current.bundle_count - 1} party bundles, "
            f"{len(held)} in use; {n} more actors cannot be placed (a planner bug: "
            "TrialKind.actors must count every actor a trial opens at once)"
        )
    held.update(free[:n])
    return free[:n]


def _start_actors(n: int, resources: PartyResources) -> _ActorSet:
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
        PartyActor.options(
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
    return _ActorSet(actors, own_pg, tuple(bundles), None if current is None else current.id.hex())


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


def _release_bundles(actor_set: _ActorSet) -> None:
    if actor_set.trial_pg is not None:
        _HELD.get(actor_set.trial_pg, set()).difference_update(actor_set.bundles)


def _stop_actors(actor_set: _ActorSet) -> None:
    _release_bundles(actor_set)
    for actor in actor_set.actors:
        ray.kill(actor)
    if actor_set.own_pg is not None:
        remove_placement_group(actor_set.own_pg)


# How long a pooled actor may take to answer a ping before it counts as dead. An idle
# actor answers in about a millisecond; a dead one fails at once (Ray knows it died).
PING_TIMEOUT_S = 10.0


def _dead_actors(actor_set: _ActorSet) -> int:
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
    for sets in _POOL.values():
        for actor_set in sets:
            _stop_actors(actor_set)
            stopped += len(actor_set.actors)
    _POOL.clear()
    return stopped


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
        current = get_current_placement_group()
        self._key = (len(inits), resources, None if current is None else current.id.hex())
        self._reuse = reuse
        pooled = _POOL.get(self._key) if reuse else None
        warm = pooled.pop() if pooled else None
        self.reused, self.evicted = warm is not None, 0
        self._set = warm if warm is not None else _start_actors(len(inits), resources)
        try:
            self._load(inits)
        except ray.exceptions.RayActorError:
            if warm is None:
                raise  # fresh actors that die at once: a fault for the caller's retries
            # Why here: an idle pooled actor can die between trials (OOM killer, node
            # lost, a kill by hand); its set is stopped whole and the trial gets fresh
            # actors instead of a failure and a Tune retry. No ping on the way in: a
            # dead actor fails this first call at once, so a live set costs nothing more.
            self.evicted = _dead_actors(warm)
            _stop_actors(warm)
            self.reused = False
            self._set = _start_actors(len(inits), resources)
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

    def train(self, protocol: Any, epochs: int, target_mp: float | None = None) -> TrainResult:
        """``protocol`` (a Protocol instance) runs inside the active party's actor."""
        return ray.get(self.active.train.remote(protocol, self.passives, epochs, target_mp))

    def snapshot(self) -> list[Party]:
        """Copies of the trained parties, in party order (the trial's attack harness)."""
        return ray.get([a.snapshot.remote() for a in self.actors])

    def call_many(self, calls: Sequence[Call]) -> list[Any]:
        """Methods of hosted parties, in parallel across actors, results in call order
        (e.g. ``defense_applied``: small results read back before ``close`` empties them)."""
        return ray.get([self.actors[k].call.remote(m, *a) for k, m, a in calls])

    def transport(self, peers: Sequence[int]) -> Transport:
        return RayTransport([self.actors[k] for k in peers])

    def load(self, inits: Sequence[Any]) -> None:
        assert len(inits) == len(self.actors), "load keeps the number of parties"
        self._load(inits)

    def close(self) -> None:
        if self._reuse:
            ray.get([a.unload.remote() for a in self.actors])
            _POOL.setdefault(self._key, []).append(self._set)
        else:
            _stop_actors(self._set)

    def __enter__(self) -> RayParties:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_ray_group(inits: Sequence[Any], placement: Placement) -> RayParties:
    """Join or start Ray, then one actor per init in the trial's placement group."""
    ensure_ray(placement.address, num_cpus=None)
    resources = PartyResources(placement.cpu_per_party, placement.gpu_per_party)
    return RayParties(inits, resources, reuse=placement.reuse_actors)


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
