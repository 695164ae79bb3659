"""``python -m benchmarks.bli_batch``: BLI's CPU seconds and AP by batch size, and which
match ran, against the autograd plain match the large batches took before (issue 45).

Why: beyond what a Jacobian may hold in memory (``bli.MAX_JACOBIAN``: MNIST's MLP-2 bottom
at batch >= 512) BLI's match is the plain one, VFLAIR's own. It ran as autograd's double
backward (~50 CPU-s an evaluation at batch 2048, over a third of the VFLAIR MNIST table's
CPU); ``bli_inversion.PlainMLP`` computes the same steps in closed form. Each row is one
training (2-party aggVFL FedSGD at the dataset's settings, 1 epoch: BLI reads the first
round only) and, on its trained parties, the default evaluation and, where its match is
plain, the autograd loop on the same view (``--no-before`` skips it): CPU seconds of the
evaluating thread, AP of each, and whether the two inferred the same labels.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from trainables.attacks import bli
from trainables.attacks.harness import run_attacks
from trainables.data import load_dataset
from trainables.spec import TrialSpec
from trainables.vfl.training import prepare_parties, train_local_parties


def evaluate(parties: Sequence[Any], seed: int, autograd: bool) -> dict[str, Any]:
    """One BLI evaluation: CPU seconds, AP, the match that ran; ``autograd``: the plain
    match by autograd's double backward (``bli.autograd_match``, the path before
    ``PlainMLP``), in the same inversion."""
    real = bli.stackable_module
    if autograd:
        bli.stackable_module = lambda module: False  # type: ignore[assignment]
    try:
        start = time.thread_time()
        (out,) = run_attacks(parties, [("bli", {})], seed)
        cpu = time.thread_time() - start
    finally:
        bli.stackable_module = real  # type: ignore[assignment]
    return {"cpu_seconds": round(cpu, 2), "ap": out.ap, "match": out.extra.get("bli_match")}


def measure(dataset: str, batch: int, seed: int, before: bool) -> dict[str, Any]:
    spec = TrialSpec.build(dataset=dataset, seed=seed, epochs=1, batch_size=batch)
    prepared = prepare_parties(spec, load_dataset(dataset), [("bli", {})])
    parties = train_local_parties(prepared, 1)[1]
    row: dict[str, Any] = {"batch": batch, "seed": seed, "now": evaluate(parties, seed, False)}
    if before and row["now"]["match"] == "plain":
        row["before"] = evaluate(parties, seed, True)
        row["speedup"] = round(row["before"]["cpu_seconds"] / row["now"]["cpu_seconds"], 2)
        row["same_ap"] = row["before"]["ap"] == row["now"]["ap"]
    print(json.dumps(row), file=sys.stderr, flush=True)  # progress
    return row


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--batches", default="128,1024,2048", help="comma-separated")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--no-before", action="store_true", help="skip the autograd loop")
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",") if b]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    rows = [measure(args.dataset, b, s, not args.no_before) for b in batches for s in seeds]
    by_batch: dict[str, Any] = {}
    for b in batches:
        mine = [r for r in rows if r["batch"] == b]
        by_batch[str(b)] = {
            "match": mine[0]["now"]["match"],
            "cpu_seconds_median": statistics.median(r["now"]["cpu_seconds"] for r in mine),
            "ap": [r["now"]["ap"] for r in mine],
        }
        if all("before" in r for r in mine):
            by_batch[str(b)]["before_cpu_seconds_median"] = statistics.median(
                r["before"]["cpu_seconds"] for r in mine
            )
            by_batch[str(b)]["before_ap"] = [r["before"]["ap"] for r in mine]
            by_batch[str(b)]["speedup_median"] = statistics.median(r["speedup"] for r in mine)
    print(json.dumps({"benchmark": "bli_batch", "dataset": args.dataset, "by_batch": by_batch}))


if __name__ == "__main__":
    main()
