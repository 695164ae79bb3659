"""``python -m benchmarks.transport``: the same trial under the local and the ray transport.

Trial: digits, MLP-2, 2 parties, FedSGD, 30 epochs, batch 256. Medians over repeats,
all numbers from the same run (the machine is shared and noisy; compare ratios).

- ``setup_s``: placement group ready, party actors started and loaded (fresh actors).
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

from trainables.data import load_dataset
from trainables.spec import TrialSpec
from trainables.transport.ray_actors import (
    PartyResources,
    RayParties,
    ensure_ray,
)
from trainables.trial import prepare_parties, train_local


def _rtt_ms(actor: Any, n: int = 200) -> float:
    ray.get(actor.ping.remote())
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        ray.get(actor.ping.remote())
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1000


def measure(repeats: int, epochs: int) -> dict[str, Any]:
    ensure_ray(num_cpus=max(4, os.cpu_count() or 1))
    spec = TrialSpec.build(dataset="digits", model="mlp2", epochs=epochs, batch_size=256)
    prepared = prepare_parties(spec, load_dataset("digits"))
    runs: dict[str, list[float]] = {k: [] for k in ("local", "ray", "setup", "rtt", "a2a")}
    mps: dict[str, set[float]] = {"local": set(), "ray": set()}
    rounds = 0
    for _ in range(repeats):
        t = time.perf_counter()
        local = train_local(prepared, epochs)
        runs["local"].append(time.perf_counter() - t)
        t = time.perf_counter()
        with RayParties(prepared.inits, PartyResources(cpu=1.0)) as group:
            result = group.train(spec.protocol, {}, epochs)
            runs["ray"].append(time.perf_counter() - t)
            runs["setup"].append(group.setup_seconds)
            runs["rtt"].append(_rtt_ms(group.passives[0]))
            runs["a2a"].append(ray.get(group.active.call_peer_rtt.remote(group.passives[0], 200)))
        rounds = result.rounds
        mps["local"].add(local.mp)
        mps["ray"].add(result.mp)
    med = {k: statistics.median(v) for k, v in runs.items()}
    overhead_ms = (med["ray"] - med["local"] - med["setup"]) / rounds * 1000
    return {
        "trial": "digits mlp2 2 parties fedsgd batch 256",
        "epochs": epochs,
        "repeats": repeats,
        "rounds": rounds,
        "local_wall_s": round(med["local"], 4),
        "ray_wall_s": round(med["ray"], 4),
        "ray_over_local": round(med["ray"] / med["local"], 3),
        "setup_s": round(med["setup"], 4),
        "overhead_per_round_ms": round(overhead_ms, 4),
        "actor_rtt_ms": round(med["rtt"], 4),
        "actor_to_actor_rtt_ms": round(med["a2a"], 4),
        "overhead_over_rtt": round(overhead_ms / med["rtt"], 3),
        "mp_local": sorted(mps["local"]),
        "mp_ray": sorted(mps["ray"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=30)
    args = parser.parse_args()
    print(json.dumps(measure(args.repeats, args.epochs)))


if __name__ == "__main__":
    main()
