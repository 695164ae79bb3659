"""``python -m benchmarks.hssl``: FedSplitNN / FedLocal / FedCSSL / FedGSSL / FedHSSL x
SimSiam / BYOL / MoCo at 200 labels, 20% aligned (FedHSSL Table IV / X setting).

Mean ± std over seeds of the test MP (AUC on adult and credit, accuracy on mnist halves)
after fine-tuning with the lr picked on the validation split. Every finished trial is
appended to ``--progress`` (JSONL) as it ends, so a cut-short run still reports what
finished; the final JSON object (stdout) holds the table and the exact settings.
Parties run in-process (``local`` placement: same party code as the Ray actors);
fine-tuning runs under the spec's protocol (FedSGD by default).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from trainables.spec import TrialSpec
from trainables.ssl.hssl.variants import HSSL_VARIANTS
from trainables.trial import run_trial


def settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "aligned_ratio": 0.2,
        "n_labeled": 200,
        "ft_epochs": args.ft_epochs,
        "model_params": {
            "pretrain_epochs": args.pretrain_epochs,
            "proj": args.proj,
            "hidden": args.hidden,
            "emb": args.emb,
            "pred": args.pred,
            "moco_dim": min(128, args.proj),
        },
    }


def one(dataset: str, variant: str, seed: int, s: dict[str, Any]) -> dict[str, Any]:
    spec = TrialSpec.build(
        dataset=dataset, ssl_variant=variant, aligned_ratio=s["aligned_ratio"],
        n_labeled=s["n_labeled"], epochs=s["ft_epochs"], seed=seed,
        model_params=s["model_params"],
    )  # fmt: skip
    start = time.perf_counter()
    rec = run_trial(spec)[0]
    extra = json.loads(rec.extra)
    return {"dataset": dataset, "variant": variant, "seed": seed, "mp": rec.mp,
            "ft_lr": extra["ft_lr"], "seconds": round(time.perf_counter() - start, 2)}  # fmt: skip


def table(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        out.setdefault(r["dataset"], {}).setdefault(r["variant"], []).append(r["mp"])
    return {
        d: {v: {"mean": round(statistics.mean(m), 4),
                "std": round(statistics.stdev(m), 4) if len(m) > 1 else 0.0, "n": len(m)}
            for v, m in per.items()}
        for d, per in out.items()
    }  # fmt: skip


def from_progress(paths: list[str]) -> dict[str, Any]:
    """The table of every trial appended to the given progress files."""
    rows = [json.loads(line) for path in paths for line in open(path) if line.strip()]
    return {"table": table(rows), "rows": len(rows)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--datasets", default="adult,credit,mnist")
    p.add_argument("--variants", default=",".join(HSSL_VARIANTS))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--seed-start", type=int, default=0, help="first seed (split runs)")
    p.add_argument("--pretrain-epochs", type=int, default=10)
    p.add_argument("--ft-epochs", type=int, default=30)
    p.add_argument("--proj", type=int, default=512)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--emb", type=int, default=64)
    p.add_argument("--pred", type=int, default=128)
    p.add_argument("--progress", default="")
    p.add_argument("--summarize", nargs="*", help="only print the table of progress files")
    args = p.parse_args()
    if args.summarize:
        print(json.dumps(from_progress(args.summarize)))
        return
    s = settings(args)
    rows = []
    start = time.perf_counter()
    for dataset in args.datasets.split(","):
        for seed in range(
            args.seed_start, args.seed_start + args.seeds
        ):  # seed-major: every variant gets seeds early
            for variant in args.variants.split(","):
                row = one(dataset, variant, seed, s)
                rows.append(row)
                if args.progress:
                    with open(args.progress, "a") as f:
                        f.write(json.dumps(row) + "\n")
    seeds = list(range(args.seed_start, args.seed_start + args.seeds))
    print(json.dumps({"benchmark": "hssl", "settings": s, "seeds": seeds,
                      "seconds": round(time.perf_counter() - start, 1), "table": table(rows),
                      "rows": rows}))  # fmt: skip


if __name__ == "__main__":
    main()
