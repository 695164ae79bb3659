"""``python -m benchmarks.transport``: the same trial under the local and the ray transport.

Trial: digits, MLP-2, 2 parties, FedSGD, 30 epochs, batch 256. Medians over repeats,
all numbers from the same run (the machine is shared and noisy; compare ratios).

- ``setup_s``: party actors ready and loaded, reusing a warm actor set (what trials of a
  sweep pay); ``setup_cold_s``: the same with fresh actors (process start, torch import).
- ``overhead_per_round_ms`` = (ray wall - local wall - setup) / rounds.
- ``actor_rtt_ms``: an empty call driver -> passive actor -> driver, median of 200;
  ``actor_to_actor_rtt_ms``: the same from inside the active party's actor, which is the
  path a round takes (the protocol runs next to the active party).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray
import torch

from trainables.data import load_dataset
from trainables.spec import TrialSpec
from trainables.transport.ray_actors import (
    PartyResources,
    RayParties,
    ensure_ray,
    release_warm_actors,
)
from trainables.trial import PreparedTrial, prepare_parties, train_local
from trainables.vfl.stacked_party import StackedParty, StackedPartyInit
from trainables.vfl.stacked_rounds import StackedRounds


def _rtt_ms(actor: Any, n: int = 200) -> float:
    ray.get(actor.ping.remote())
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        ray.get(actor.ping.remote())
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1000


def _ray_trial(prepared: PreparedTrial, epochs: int, reuse: bool) -> dict[str, float]:
    start = time.perf_counter()
    stacks = [StackedPartyInit((init,)) for init in prepared.inits]  # each a stack of one
    with RayParties(stacks, PartyResources(cpu=1.0), reuse=reuse) as group:
        group.call_all(StackedParty.stack, [0])
        (result,) = group.train(StackedRounds(prepared.protocol, targets=[None], slots=[0]), epochs)
        wall = time.perf_counter() - start
        return {
            "wall": wall,
            "setup": group.setup_seconds,
            "reused": float(group.reused),
            "rounds": result.rounds,
            "mp": result.mp,
            "submit_ms": result.submit_seconds / result.rounds * 1000,
            "wait_ms": result.wait_seconds / result.rounds * 1000,
            "rtt": _rtt_ms(group.passives[0]),
            "a2a": ray.get(group.active.call_peer_rtt.remote(group.passives[0], 200)),
        }


def measure(repeats: int, epochs: int) -> dict[str, Any]:
    torch.set_num_threads(1)  # the same arithmetic budget as one party actor (1 CPU)
    ensure_ray(num_cpus=max(4, os.cpu_count() or 1))
    spec = TrialSpec.build(dataset="digits", model="mlp2", epochs=epochs, batch_size=256)
    prepared = prepare_parties(spec, load_dataset("digits"))
    train_local(prepared, 1)  # warm this process's torch (actors warm up when they start)
    local, local_mp = [], set()
    for _ in range(repeats):
        start = time.perf_counter()
        result = train_local(prepared, epochs)
        local.append(time.perf_counter() - start)
        local_mp.add(result.mp)
    cold = [_ray_trial(prepared, epochs, reuse=False) for _ in range(repeats)]
    _ray_trial(prepared, epochs, reuse=True)  # starts the actor set the next trials reuse
    warm = [_ray_trial(prepared, epochs, reuse=True) for _ in range(repeats)]
    release_warm_actors()
    assert all(w["reused"] for w in warm)

    def med(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    rounds = int(warm[0]["rounds"])
    local_s = statistics.median(local)
    overhead_ms = (med(warm, "wall") - local_s - med(warm, "setup")) / rounds * 1000
    overhead_cold_ms = (med(cold, "wall") - local_s - med(cold, "setup")) / rounds * 1000
    return {
        "trial": "digits mlp2 2 parties fedsgd batch 256",
        "epochs": epochs,
        "repeats": repeats,
        "rounds": rounds,
        "local_wall_s": round(local_s, 4),
        "ray_wall_s": round(med(warm, "wall"), 4),
        "ray_over_local": round(med(warm, "wall") / local_s, 3),
        "setup_s": round(med(warm, "setup"), 4),
        "setup_cold_s": round(med(cold, "setup"), 4),
        "ray_wall_cold_s": round(med(cold, "wall"), 4),
        "overhead_per_round_ms": round(overhead_ms, 4),
        "overhead_per_round_cold_ms": round(overhead_cold_ms, 4),
        "actor_rtt_ms": round(med(warm, "rtt"), 4),
        "actor_to_actor_rtt_ms": round(med(warm, "a2a"), 4),
        "overhead_over_rtt": round(overhead_ms / med(warm, "rtt"), 3),
        "active_submit_ms_per_round": round(med(warm, "submit_ms"), 4),
        "active_wait_ms_per_round": round(med(warm, "wait_ms"), 4),
        "local_ms_per_round": round(local_s / rounds * 1000, 4),
        "mp_local": sorted(local_mp),
        "mp_ray": sorted({r["mp"] for r in cold + warm}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    print(json.dumps(measure(args.repeats, args.epochs)))


if __name__ == "__main__":
    main()
