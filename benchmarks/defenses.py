"""``python -m benchmarks.defenses``: AP and MP of DLI on digits under each defense's grid.

2-party aggVFL FedSGD, VFLAIR's digits settings, seeds 0..n-1. Per defense and strength:
mean AP and MP over seeds; per defense: Spearman's rho of mean AP against strength over
the grid (the issue's target: rho <= -0.8 for G-DP, L-DP and GS) and the MP drop at the
weakest strength against the undefended MP (target <= 0.02). Also the seconds per
training, defended over undefended (median), as the defenses' cost.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from trainables.defenses import DEFENSES
from trainables.spec import TrialSpec
from trainables.trial import run_trial


def dli(
    defense: str, strength: float | None, seed: int, epochs: int | None
) -> tuple[float, float, float]:
    """(AP of DLI, clean MP, seconds) of one training."""
    spec = TrialSpec.build(
        dataset="digits", seed=seed, defense=defense, defense_param=strength, epochs=epochs
    )
    start = time.perf_counter()
    clean, attacked = run_trial(spec, attacks=[("dli", {})])
    return float(attacked.ap), float(clean.mp), time.perf_counter() - start  # type: ignore[arg-type]


def measure(names: list[str], seeds: int, epochs: int | None = None) -> dict[str, Any]:
    base = [dli("none", None, s, epochs) for s in range(seeds)]
    base_mp = statistics.mean(b[1] for b in base)
    base_sec = statistics.median(b[2] for b in base)
    out: dict[str, Any] = {
        "undefended": {"ap": statistics.mean(b[0] for b in base), "mp": base_mp},
        "defenses": {},
    }
    for name in names:
        grid = sorted(DEFENSES.get(name).info.grid)
        rows = {s: [dli(name, s, seed, epochs) for seed in range(seeds)] for s in grid}
        ap = [statistics.mean(r[0] for r in rows[s]) for s in grid]
        mp = [statistics.mean(r[1] for r in rows[s]) for s in grid]
        rho = spearmanr(grid, ap).statistic
        pooled = spearmanr(
            [s for s in grid for _ in rows[s]], [r[0] for s in grid for r in rows[s]]
        )
        out["defenses"][name] = {
            "strengths": grid,
            "ap": [round(a, 4) for a in ap],
            "mp": [round(m, 4) for m in mp],
            "spearman_rho_mean_ap": None if np.isnan(rho) else round(float(rho), 3),
            "spearman_rho_pooled": round(float(pooled.statistic), 3),
            "mp_drop_weakest": round(base_mp - mp[0], 4),
            "seconds_over_undefended": round(
                statistics.median(r[2] for s in grid for r in rows[s]) / base_sec, 2
            ),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--defenses", default="gdp,ldp,gs", help="comma-separated names")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=None, help="default: VFLAIR's (30)")
    args = parser.parse_args()
    names = [n for n in args.defenses.split(",") if n]
    print(
        json.dumps(
            {
                "benchmark": "defenses",
                "attack": "dli",
                "dataset": "digits",
                "seeds": args.seeds,
                **measure(names, args.seeds, args.epochs),
            }
        )
    )


if __name__ == "__main__":
    main()
