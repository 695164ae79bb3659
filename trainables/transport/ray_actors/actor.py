"""``PartyActor``: one party in its own Ray actor.

The actor is a thin shell around a Ray-free ``Party`` (built from its ``PartyInit``): it
loads one, runs a training's rounds when it hosts the active party, answers the passive calls
``RayTransport`` sends (``wire.py``: one pickle each way), and offers diagnostics (where
it runs, round-trip times, every array it holds: ``tests/test_isolation.py``).

Why torch and the party code are imported inside the methods: a trainable starts its
actors before it imports torch itself (``pool.prestart_actors``), so that the actors'
processes and the trainable's own imports overlap; this module must stay that light.
"""

from __future__ import annotations

import gc
import os
import pickle
import time
import types
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import ray
from ray.util.placement_group import get_current_placement_group

from trainables.transport.ray_actors.pickling import pack

if TYPE_CHECKING:
    from trainables.party import Party, PartyInit
    from trainables.rounds import TrainResult


def _warm_up_torch() -> None:
    """Pay torch's one-time autograd costs at actor start, not in the first round.

    No optimizer here: building one imports ``torch._dynamo`` (~1.1 CPU-s), which an actor
    that hosts only stacked packs never needs; a plain party builds its own when it is
    loaded (``PartyInit.build``), before any training clock starts.
    """
    import torch

    layer = torch.nn.Linear(4, 4)
    layer(torch.zeros(2, 4)).sum().backward()


@ray.remote
class PartyActor:
    """Hosts one party. Holds exactly what its ``PartyInit`` gave it."""

    def __init__(self, threads: int = 1) -> None:
        import torch

        torch.set_num_threads(threads)  # same arithmetic as the local transport
        self.party: Party | None = None
        _warm_up_torch()
        # Why: a full collection walks every object torch and Ray made at import (~200k
        # objects, ~90 ms); frozen, ``unload``'s collection sees only what trials left.
        gc.collect()
        gc.freeze()

    def load(self, init: PartyInit) -> bool:
        # Registers the hooks the protocols own (CELU's workset codec), which a party may be
        # asked to attach; this module imports none of our code at its top (``prestart``).
        import trainables.protocols  # noqa: F401

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
        """``call`` with method, arguments and result pickled by ``pack`` (RayTransport)."""
        method, args = pickle.loads(blob)
        return pack(getattr(self.party, method)(*args))

    def ping(self) -> None:
        return None

    def where(self) -> dict[str, Any]:
        """Process, placement group and party of this actor (tests and diagnostics)."""
        from trainables.party import ActiveParty

        pg = get_current_placement_group()
        return {
            "pid": os.getpid(),
            "placement_group": None if pg is None else pg.id.hex(),
            "party_id": None if self.party is None else self.party.party_id,
            "active": isinstance(self.party, ActiveParty)
            or bool(getattr(self.party, "is_active", False)),  # an active stack
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
        self, rounds: Any, peers: Sequence[Any], epochs: int, target_mp: float | None = None
    ) -> TrainResult:
        """Run ``rounds`` (a ``Rounds``) here, next to the active party, against the
        passive actors."""
        from trainables.transport.ray_actors.wire import RayTransport

        assert self.party is not None, "train runs on the active party's actor"
        result: TrainResult = rounds.run(self.party, RayTransport(peers), epochs, target_mp)
        return result

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array-valued attribute of the hosted party (for threat-model tests)."""
        import torch

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
    import torch

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
