"""``python -m benchmarks.lrb_rows``: what LRB's record says at its defaults, against the
same trigger scored on every test row and on a model trained without the attack.

Why: LRB is scored, as VFLAIR does, on 1 % of the test rows (``test_ratio``), of other
classes than the target (``count: other``): 3 or 4 rows on digits, 1 on breast_cancer.
Such a record's AP is mostly which rows were drawn, and its error must say so
(``chance.at_least_wilson``). And the no-information baseline a backdoor needs is the
trigger's effect *without* the poisoning: stamping the trigger (a few columns at their
training maximum) may move a model that never learned it.

Per dataset and seed (default settings, ``train_attack: lrb``): the record's ``ap``, its
baseline (``ap_chance``: the twin's), advantage and error, and how many rows it scored;
the backdoored model with every test row triggered (``test_ratio: 1``); the same
trigger on the same spec trained without LRB; the record scored as VFLAIR counts
(``count: all, over: epochs``).
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

import numpy as np

from trainables.attacks.harness import run_attacks
from trainables.data import load_dataset
from trainables.spec import TrialSpec
from trainables.trial import prepare_parties, run_trial, train_local_parties

EVERY_ROW = {"test_ratio": 1.0}
VFLAIR_COUNT = {"count": "all", "over": "epochs"}  # VFLAIR's count: all rows, epochs' mean


def one(dataset: str, seed: int) -> dict[str, Any]:
    ds = load_dataset(dataset)
    spec = TrialSpec.build(dataset=dataset, seed=seed, train_attack="lrb")
    record = run_trial(spec)[0]
    vflair = TrialSpec.build(dataset=dataset, seed=seed, train_attack="lrb",
                             train_attack_params=VFLAIR_COUNT)  # fmt: skip
    epochs = int(spec.required("epochs"))
    backdoored = train_local_parties(prepare_parties(spec, ds), epochs)[1]
    clean_spec = TrialSpec.build(dataset=dataset, seed=seed)
    clean = train_local_parties(prepare_parties(clean_spec, ds), epochs)[1]
    return {
        "seed": seed,
        "record_ap": record.ap,
        "record_chance": record.ap_chance,  # the same guess on the unattacked twin
        "record_advantage": record.ap_advantage,
        "record_advantage_se": record.ap_advantage_se,
        "rows_scored": json.loads(record.extra)["scored_rows"],  # what its AP is over
        "every_row_ap": run_attacks(backdoored, [("lrb", EVERY_ROW)], seed)[0].ap,
        "without_attack_every_row_ap": run_attacks(clean, [("lrb", EVERY_ROW)], seed)[0].ap,
        "mp": record.mp,
        "vflair_count_ap": run_trial(vflair)[0].ap,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="digits,breast_cancer")
    p.add_argument("--seeds", type=int, default=5)
    args = p.parse_args()
    out: dict[str, Any] = {}
    for dataset in args.datasets.split(","):
        runs = [one(dataset, s) for s in range(args.seeds)]
        means = {
            k: statistics.fmean(float(r[k]) for r in runs if not np.isnan(r[k]))
            for k in ("record_ap", "every_row_ap", "without_attack_every_row_ap", "vflair_count_ap")
        }
        out[dataset] = {"runs": runs, "means": means}
    print(json.dumps(out, default=float))


if __name__ == "__main__":
    main()
