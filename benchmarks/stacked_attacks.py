"""``python -m benchmarks.stacked_attacks``: CPU seconds per attack evaluation, one training
at a time against a stack's evaluations run together (issue 45), on the same trainings.

Why: attack evaluation dominates real sweeps (``defenses.yaml``: PMC, MC and AMC about
2-4 CPU-s each per digits training against ~1 s of training). A vectorized pack trains K
trainings as one stack; ``harness.run_attacks_many`` then runs each attack's K
evaluations together where the attack has a stacked form (model completion:
``completion_fast.train_fast``). This trains ``--k`` digits trainings (2-party
aggVFL FedSGD, seeds 0..K-1, ``--epochs``), then per attack, interleaved ``--repeats``
times: the K evaluations one at a time (``run_attacks``) and together
(``run_attacks_many``), CPU seconds of this thread per evaluation (median over repeats),
and whether every training's AP is the same both ways.

``--pair pmc,mc``: two attacks that share a stack key (``Attack.stack_key``: PMC and MC, one
model completion at the same settings) run on the same trainings as one stack and as two,
both for one training at a time and for the K together (``pair`` in the output).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from trainables.attacks.harness import run_attacks, run_attacks_many
from trainables.data import load_dataset
from trainables.spec import TrialSpec
from trainables.vfl.training import prepare_parties, train_local_parties


def trainings(k: int, epochs: int, attacks: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    ds = load_dataset("digits")
    out = []
    for seed in range(k):
        spec = TrialSpec.build(dataset="digits", seed=seed, epochs=epochs)
        prepared = prepare_parties(spec, ds, attacks)
        out.append((train_local_parties(prepared, epochs)[1], seed))
    return out


def measure(trained: list[Any], attack: tuple[str, dict[str, Any]], repeats: int) -> dict[str, Any]:
    alone_s, together_s, same = [], [], True
    for _ in range(repeats):
        start = time.thread_time()
        alone = [run_attacks(parties, [attack], seed)[0] for parties, seed in trained]
        alone_s.append((time.thread_time() - start) / len(trained))
        start = time.thread_time()
        together = run_attacks_many([(parties, [attack], seed) for parties, seed in trained])
        together_s.append((time.thread_time() - start) / len(trained))
        same = same and all(a.ap == t[0].ap for a, t in zip(alone, together, strict=True))
    a, t = statistics.median(alone_s), statistics.median(together_s)
    row = {
        "alone_cpu_s": round(a, 3),
        "stacked_cpu_s": round(t, 3),
        "speedup": round(a / t, 2) if t else None,
        "same_ap": same,
        "ap": [round(x.ap, 4) for x in alone],
    }
    print(json.dumps({"attack": attack[0], **row}), file=sys.stderr, flush=True)  # progress
    return row


def measure_pair(trained: list[Any], pair: list[str], repeats: int) -> dict[str, Any]:
    """CPU seconds per evaluation of the ``pair``'s attacks on ``trained``: each attack's
    evaluations as their own stack (``apart``) and both attacks' as one (``joined``), one
    training at a time (``_k1``) and the K trainings together (``_k``); same APs both ways."""
    attacks = [(name, {}) for name in pair]
    items = [(parties, attacks, seed) for parties, seed in trained]
    n = len(trained) * len(attacks)
    runs: dict[str, list[float]] = {}
    same = True

    def timed(key: str, fn: Any) -> list[float]:
        start = time.thread_time()
        out = fn()
        runs.setdefault(key, []).append((time.thread_time() - start) / n)
        return [o.ap for per in out for o in per]

    for _ in range(repeats):
        apart = timed("apart_k1", lambda: [[run_attacks(p, [a], s)[0] for a in attacks]
                                           for p, _, s in items])  # fmt: skip
        joined = timed("joined_k1", lambda: [run_attacks(p, a, s) for p, a, s in items])

        def each_stacked() -> list[list[Any]]:  # each attack's K evaluations as one stack
            per = [run_attacks_many([(p, [a], s) for p, _, s in items]) for a in attacks]
            return [[out[k][0] for out in per] for k in range(len(items))]

        apart_k = timed("apart_k", each_stacked)
        joined_k = timed("joined_k", lambda: run_attacks_many(items))
        same = same and apart == joined == apart_k == joined_k
    row: dict[str, Any] = {k: round(statistics.median(v), 3) for k, v in runs.items()}
    row["speedup_k1"] = round(row["apart_k1"] / row["joined_k1"], 2)
    row["speedup_k"] = round(row["apart_k"] / row["joined_k"], 2)
    row["same_ap"] = same
    print(json.dumps({"pair": pair, **row}), file=sys.stderr, flush=True)  # progress
    return row


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--attacks", default="pmc,mc,bli,dli,grn,tbm,nsb,mf")
    parser.add_argument("--k", type=int, default=9, help="trainings in the stack")
    parser.add_argument("--epochs", type=int, default=30, help="VFLAIR's digits setting")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--pair", default="", help="two attacks of one stack key: pmc,mc")
    args = parser.parse_args(argv)
    if args.pair:
        pair = args.pair.split(",")
        trained = trainings(args.k, args.epochs, [(name, {}) for name in pair])
        row = measure_pair(trained, pair, args.repeats)
        print(json.dumps({"benchmark": "stacked_attacks", "k": args.k, "pair": row}))
        return
    attacks = [(name, {}) for name in args.attacks.split(",") if name]
    trained = trainings(args.k, args.epochs, attacks)
    rows = {name: measure(trained, (name, params), args.repeats) for name, params in attacks}
    print(json.dumps({"benchmark": "stacked_attacks", "k": args.k, "attacks": rows}))


if __name__ == "__main__":
    main()
