"""``python -m benchmarks.stacked_defenses``: packs under each defense, stacked and alone.

For each defense (none, G-DP, and the defenses with model hooks: MID, dCor, GPer, CAE,
DCAE) at one strength, and for CELU-VFL (``celu``: no defense, its workset's cached
steps), a pack of ``--k`` trainings (seeds 0..K-1) at VFLAIR's settings
on breast_cancer (MLP-2, batch 1024, Adam, ``--epochs`` 50), trained in this process
(``transport: local``, no attacks) two ways, medians over ``--repeats``:

- ``stacked_s``: ``NNKind.run_many`` with ``vectorize`` on (one stacked training);
- ``alone_s``: the same call with ``vectorize`` off (one training after another).

Per defense: seconds per training both ways, ``speedup`` (alone / stacked),
``stacked_share`` (records that say ``extra.vectorized``), ``mp_equal`` (every stacked
record's MP equals the one trained alone) and ``over_gdp``: its stacked seconds per
training over G-DP's (issue 44 asks <= 1.5 for MID, dCor and CELU). Ratios come from medians
of the same run. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch

from trainables.data import load_dataset
from trainables.jobs import Job
from trainables.kinds.nn import NNKind
from trainables.schedule import ONE_BY_ONE, STACKED
from trainables.spec import TrialSpec
from trainables.transport.placement import LOCAL

DEFENSES: dict[str, float | None] = {
    "none": None, "gdp": 0.1, "mid": 1.0, "dcor": 0.3, "gper": 1.0, "cae": 0.5, "dcae": 0.5,
    "celu": None,
}  # fmt: skip


def _jobs(defense: str, strength: float | None, k: int, epochs: int) -> list[Job]:
    fields: dict[str, Any] = {"dataset": "breast_cancer", "epochs": epochs}
    if defense == "celu":
        fields.update(protocol="celu")
    elif defense != "none":
        fields.update(defense=defense, defense_param=strength)
    return [Job(TrialSpec.build(**fields, seed=s)) for s in range(k)]


def _run(jobs: list[Job], vectorize: bool) -> tuple[float, list[Any]]:
    data = load_dataset("breast_cancer")
    schedule = STACKED if vectorize else ONE_BY_ONE
    start = time.perf_counter()
    got = dict(NNKind().run_many(jobs, data, LOCAL, schedule))
    seconds = time.perf_counter() - start
    records = [got[i][0] for i in range(len(jobs))]  # type: ignore[index]
    return seconds, records


def measure(defense: str, strength: float | None, k: int, epochs: int, repeats: int) -> dict:
    jobs = _jobs(defense, strength, k, epochs)
    stacked, alone, equal, share = [], [], True, 0.0
    for _ in range(repeats):
        s_sec, s_rec = _run(jobs, True)
        a_sec, a_rec = _run(jobs, False)
        stacked.append(s_sec)
        alone.append(a_sec)
        equal = equal and [r.mp for r in s_rec] == [r.mp for r in a_rec]
        flags = [json.loads(r.extra or "{}").get("vectorized") is True for r in s_rec]
        share = sum(flags) / len(flags)
    s_med, a_med = statistics.median(stacked), statistics.median(alone)
    return {
        "strength": strength,
        "stacked_per_training_s": round(s_med / k, 4),
        "alone_per_training_s": round(a_med / k, 4),
        "speedup": round(a_med / s_med, 2),
        "stacked_share": share,
        "mp_equal": equal,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--defenses", default=",".join(DEFENSES))
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core, as one party actor has
    _run(_jobs("none", None, 2, 1), True)  # warm imports and caches
    out: dict[str, Any] = {"k": args.k, "epochs": args.epochs, "repeats": args.repeats}
    names = args.defenses.split(",")
    rows = {n: measure(n, DEFENSES[n], args.k, args.epochs, args.repeats) for n in names}
    if "gdp" in rows:
        gdp = rows["gdp"]["stacked_per_training_s"]
        for row in rows.values():
            row["over_gdp"] = round(row["stacked_per_training_s"] / gdp, 2)
    out["defenses"] = rows
    print(json.dumps(out))


if __name__ == "__main__":
    main()
