"""``python -m benchmarks.encryption``: what Paillier encryption costs tree and LR VFL.

Timings (``timings``): each encrypted model against its plaintext twin (the same integer
protocol without encryption: ``secureboost`` vs ``encrypt=0``, ``secure_rf`` vs ``rf``,
``paillier_lr`` vs its plaintext Taylor run), per key length, on a row subsample of
Credit (``--rows``), medians over ``--repeats``; ``slowdown`` = encrypted / plaintext
wall time of the same run. VFLAIR reports 3-20x for trees (512-bit keys, 5 trees of depth
6, full data) and 1000x+ for HE LR; our plaintext twins are fast integer code, so the
ratio here is larger than VFLAIR's for the same absolute encryption cost.

MP (``mp``, skip with ``--no-mp``): SecureBoost against xgboost's federated VFL on Credit
and Nursery (full data; SecureBoost's plaintext twin, which the lossless test shows gives
the encrypted run's MP exactly), and Paillier LR (encrypted, Taylor loss) against
plaintext LR (exact loss) on ``--lr-rows`` rows of each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.trial import run_trial

TREE = {"n_trees": 3, "max_depth": 4, "n_bins": 16}
PAIRS: dict[str, tuple[tuple[str, dict[str, Any]], tuple[str, dict[str, Any]]]] = {
    "secureboost": (("secureboost", {**TREE, "encrypt": 0}), ("secureboost", TREE)),
    "random_forest": (("rf", TREE), ("secure_rf", TREE)),
    "paillier_lr": (("paillier_lr", {"encrypt": 0, "taylor": 1}), ("paillier_lr", {})),
}
LR_FIELDS = {"lr": 0.5, "epochs": 1, "batch_size": 100}


def _spec(model: str, params: dict[str, Any], dataset: str, rows: int | None, key: int,
          **fields: Any) -> TrialSpec:  # fmt: skip
    extra = LR_FIELDS if model == "paillier_lr" else {}
    return TrialSpec.build(dataset=dataset, model=model, model_params=params, key_length=key,
                           n_labeled=rows, **{**extra, **fields})  # fmt: skip


def _wall(spec: TrialSpec, repeats: int) -> tuple[float, float]:
    walls, mp = [], 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        (rec,) = run_trial(spec)
        walls.append(time.perf_counter() - start)
        mp = float(rec.mp or 0.0)
    return statistics.median(walls), mp


def timings(keys: list[int], rows: int, repeats: int) -> list[dict[str, Any]]:
    out = []
    for name, ((plain_m, plain_p), (enc_m, enc_p)) in PAIRS.items():
        plain_s, plain_mp = _wall(_spec(plain_m, plain_p, "credit", rows, 512), repeats)
        for key in keys:
            enc_s, enc_mp = _wall(_spec(enc_m, enc_p, "credit", rows, key), repeats)
            row = {"model": name, "key_length": key, "rows": rows, "plain_s": round(plain_s, 3),
                   "encrypted_s": round(enc_s, 3), "slowdown": round(enc_s / plain_s, 1),
                   "mp_plain": round(plain_mp, 4), "mp_encrypted": round(enc_mp, 4)}  # fmt: skip
            out.append(row)
            print(json.dumps(row), flush=True, file=sys.stderr)
    return out


def mp_comparison(lr_rows: int, lr_epochs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dataset in ("credit", "nursery"):
        boost = _spec("secureboost", {"encrypt": 0}, dataset, None, 512)
        (sb,) = run_trial(boost)
        (xg,) = run_trial(_spec("xgboost", {}, dataset, None, 512), Placement("ray"))
        fields = {"epochs": lr_epochs, "batch_size": 256}
        (he,) = run_trial(_spec("paillier_lr", {}, dataset, lr_rows, 512, **fields))
        plain = {"encrypt": 0, "taylor": 0}
        (lr,) = run_trial(_spec("paillier_lr", plain, dataset, lr_rows, 512, **fields))
        out[dataset] = {
            "secureboost_mp": round(float(sb.mp), 4),
            "xgboost_vfl_mp": round(float(xg.mp), 4),
            "boost_gap": round(abs(float(sb.mp) - float(xg.mp)), 4),
            "paillier_lr_mp": round(float(he.mp), 4),
            "plain_lr_mp": round(float(lr.mp), 4),
            "lr_gap": round(abs(float(he.mp) - float(lr.mp)), 4),
            "paillier_lr_s": round(he.train_seconds, 2),
            "plain_lr_s": round(lr.train_seconds, 3),
            "lr_rows": lr_rows,
            "lr_epochs": lr_epochs,
        }
        print(json.dumps({dataset: out[dataset]}), flush=True, file=sys.stderr)
    return out


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.encryption")
    p.add_argument("--key-lengths", type=int, nargs="+", default=[512, 1024, 2048])
    p.add_argument("--rows", type=int, default=400, help="credit training rows for timings")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--lr-rows", type=int, default=2000)
    p.add_argument("--lr-epochs", type=int, default=10)
    p.add_argument("--no-mp", action="store_true", help="skip the MP comparison")
    args = p.parse_args()
    start = time.perf_counter()
    result: dict[str, Any] = {"timings": timings(args.key_lengths, args.rows, args.repeats)}
    if not args.no_mp:
        result["mp"] = mp_comparison(args.lr_rows, args.lr_epochs)
    tree = [t["slowdown"] for t in result["timings"] if t["model"] != "paillier_lr"]
    lr = [t["slowdown"] for t in result["timings"] if t["model"] == "paillier_lr"]
    result["note"] = (
        f"tree slowdown {min(tree)}-{max(tree)}x (VFLAIR: 3-20x at 512 bits); "
        f"HE LR slowdown {min(lr)}-{max(lr)}x (VFLAIR: 1000x+)"
    )
    result["total_seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
