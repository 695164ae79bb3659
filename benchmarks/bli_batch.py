"""``python -m benchmarks.bli_batch``: BLI's CPU seconds and AP by batch size, and which
match ran, against the autograd plain match the large batches took before (issue 45).

Why: beyond what a Jacobian may hold in memory (``bli.MAX_JACOBIAN``: MNIST's MLP-2 bottom
at batch >= 512) BLI's match is the plain one, VFLAIR's own. It ran as autograd's double
backward (~50 CPU-s an evaluation at batch 2048, over a third of the VFLAIR MNIST table's
CPU); ``bli_fast.PlainMLP`` computes the same steps in closed form. Each row is one
training (2-party aggVFL FedSGD at the dataset's settings, 1 epoch: BLI reads the first
round only) and, on its trained parties, the default evaluation and, where its match is
plain, the autograd loop on the same view (``--no-before`` skips it): CPU seconds of the
evaluating thread, AP of each, and whether the two inferred the same labels.

``--steps N`` (default 1000; 0 skips it) also times N steps of the inversion's Adam loop on
that evaluation's own match: ``bli_fast.adam`` (its ``Workspace`` buffers) against
``plain_adam`` below, the same loop as plain numpy expressions (a fresh array per
operation, as before the workspace), alternating, 3 times each, CPU milliseconds per step
(median), and whether both end on the same dummies bit for bit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from trainables.attacks import bli
from trainables.attacks.bli_fast import BETAS, EPS, Match, adam
from trainables.attacks.harness import run_attacks
from trainables.data import load_dataset
from trainables.spec import TrialSpec
from trainables.vfl.training import prepare_parties, train_local_parties


def evaluate(parties: Sequence[Any], seed: int, autograd: bool) -> dict[str, Any]:
    """One BLI evaluation: CPU seconds, AP, the match that ran; ``autograd``: the plain
    match by autograd's double backward, the path before ``PlainMLP``."""
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


def plain_adam(h0: np.ndarray, match: Match, params: dict[str, Any], seed: int) -> np.ndarray:
    """``bli_fast.adam``'s loop as plain numpy expressions (no early stop): its final
    dummies [Z, V] (2, B, C). The reference the workspace is timed and tested against."""
    n, c = h0.shape
    gen = torch.Generator().manual_seed(seed)
    z = (float(params["init_scale"]) * torch.randn(n, c, generator=gen)).numpy()
    v = (float(params["init_scale"]) * torch.randn(n, c, generator=gen)).numpy()
    both, shift = np.stack([z, v]), np.stack([h0, np.zeros_like(h0)])
    m1, m2 = np.zeros_like(both), np.zeros_like(both)
    lr, (b1, b2) = float(params["lr"]), BETAS
    sign = np.array([1.0, -1.0], dtype=np.float32).reshape(2, 1, 1)
    for t in range(1, int(params["steps"]) + 1):
        a = both + shift
        e = np.exp(a - a.max(axis=2, keepdims=True))
        pq = e / e.sum(axis=2, keepdims=True)
        d, _ = match((pq[0] - pq[1]) / n)
        dd = sign * (d / n)
        grad = pq * (dd - (dd * pq).sum(axis=2, keepdims=True))
        m1 += (1.0 - b1) * (grad - m1)
        m2 *= b2
        m2 += (1.0 - b2) * grad * grad
        denom = np.sqrt(m2) / np.sqrt(1.0 - b2**t) + EPS
        both -= (lr / (1.0 - b1**t)) * m1 / denom
    return both


def step_cost(parties: Sequence[Any], seed: int, steps: int) -> dict[str, Any]:
    """CPU ms per Adam step of the workspace loop and of ``plain_adam`` on this
    evaluation's own match (captured from one short BLI run), medians of 3 alternations."""
    from threadpoolctl import threadpool_limits

    seen: dict[str, Any] = {}
    real = bli.invert_fast

    def capture(h0: np.ndarray, match: Match, params: dict[str, Any], s: int) -> np.ndarray:
        seen.update(h0=h0, match=match, params={**params, "steps": steps, "patience": steps + 1})
        return real(h0, match, {**params, "steps": 1}, s)

    bli.invert_fast = capture  # type: ignore[assignment]
    try:
        run_attacks(parties, [("bli", {})], seed)
    finally:
        bli.invert_fast = real  # type: ignore[assignment]
    times: dict[str, list[float]] = {"workspace": [], "plain": []}
    ends: dict[str, np.ndarray] = {}
    with threadpool_limits(1):
        for _ in range(3):
            for name in times:
                start = time.thread_time()
                if name == "workspace":
                    ends[name] = adam(seen["h0"], seen["match"], seen["params"], seed)[1]
                else:
                    ends[name] = plain_adam(seen["h0"], seen["match"], seen["params"], seed)
                times[name].append((time.thread_time() - start) * 1000 / steps)
    ms = {k: round(statistics.median(v), 3) for k, v in times.items()}
    return {"ms_per_step": ms, "speedup": round(ms["plain"] / ms["workspace"], 2),
            "same_dummies": bool(np.array_equal(ends["workspace"], ends["plain"]))}  # fmt: skip


def measure(dataset: str, batch: int, seed: int, before: bool, steps: int) -> dict[str, Any]:
    spec = TrialSpec.build(dataset=dataset, seed=seed, epochs=1, batch_size=batch)
    prepared = prepare_parties(spec, load_dataset(dataset), [("bli", {})])
    parties = train_local_parties(prepared, 1)[1]
    row: dict[str, Any] = {"batch": batch, "seed": seed, "now": evaluate(parties, seed, False)}
    if before and row["now"]["match"] == "plain":
        row["before"] = evaluate(parties, seed, True)
        row["speedup"] = round(row["before"]["cpu_seconds"] / row["now"]["cpu_seconds"], 2)
        row["same_ap"] = row["before"]["ap"] == row["now"]["ap"]
    if steps:
        row["steps"] = step_cost(parties, seed, steps)
    print(json.dumps(row), file=sys.stderr, flush=True)  # progress
    return row


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--batches", default="128,1024,2048", help="comma-separated")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--no-before", action="store_true", help="skip the autograd loop")
    parser.add_argument("--steps", type=int, default=1000, help="Adam steps timed; 0: none")
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",") if b]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    rows = [
        measure(args.dataset, b, s, not args.no_before, args.steps) for b in batches for s in seeds
    ]
    by_batch: dict[str, Any] = {}
    for b in batches:
        mine = [r for r in rows if r["batch"] == b]
        by_batch[str(b)] = {
            "match": mine[0]["now"]["match"],
            "cpu_seconds_median": statistics.median(r["now"]["cpu_seconds"] for r in mine),
            "ap": [r["now"]["ap"] for r in mine],
        }
        if all("steps" in r for r in mine):
            by_batch[str(b)]["adam_ms_per_step_median"] = {
                k: statistics.median(r["steps"]["ms_per_step"][k] for r in mine)
                for k in ("workspace", "plain")
            }
            by_batch[str(b)]["adam_speedup_median"] = statistics.median(
                r["steps"]["speedup"] for r in mine
            )
            by_batch[str(b)]["adam_same_dummies"] = all(r["steps"]["same_dummies"] for r in mine)
        if all("before" in r for r in mine):
            by_batch[str(b)]["before_cpu_seconds_median"] = statistics.median(
                r["before"]["cpu_seconds"] for r in mine
            )
            by_batch[str(b)]["before_ap"] = [r["before"]["ap"] for r in mine]
            by_batch[str(b)]["speedup_median"] = statistics.median(r["speedup"] for r in mine)
    print(json.dumps({"benchmark": "bli_batch", "dataset": args.dataset, "by_batch": by_batch}))


if __name__ == "__main__":
    main()
