"""What a comparison's seeds could have found: the smallest detectable difference, and how
many seeds a stated difference would need.

Why: "cannot tell" after three seeds reads like "no difference"; it often means "three
seeds could not have told a difference of this size". Each contrast row gets, from its own
paired spread, the difference it had an 80 % chance to detect (two-sided α 0.05,
uncorrected, the interval's own shape):

    mde(n) = sqrt(((t_{0.975,n-1} + t_{0.80,n-1}) · s / √n)² + ((z_{0.975} + z_{0.80}) · se)²)

with s the spread of the per-seed differences and se the test-set error of one difference
(it does not shrink with seeds: every seed is scored on the same test rows). The seeds a
difference ``d`` needs is the smallest n with mde(n) ≤ d, from n's observed s; none when
the test-set part alone exceeds d (more seeds cannot help: more test rows can).
"""

from __future__ import annotations

import numpy as np

from analysis.uncertainty import MIN_SEEDS

POWER = 0.80
MAX_SEEDS = 1000


def _t(q: float, df: np.ndarray) -> np.ndarray:
    from scipy.special import stdtrit

    return np.asarray(stdtrit(np.maximum(df, 1.0), q))


def detectable(std: np.ndarray, n: np.ndarray, se: np.ndarray) -> np.ndarray:
    """The smallest |Δ| detectable with 80 % power at ``n`` seeds (NaN below 3 seeds)."""
    from scipy.special import ndtri

    std, n = np.nan_to_num(np.asarray(std, dtype=float)), np.asarray(n, dtype=float)
    se = np.nan_to_num(np.asarray(se, dtype=float))
    seeds = (_t(0.975, n - 1) + _t(POWER, n - 1)) * std / np.sqrt(np.maximum(n, 1.0))
    tests = (ndtri(0.975) + ndtri(POWER)) * se
    return np.where(n >= MIN_SEEDS, np.hypot(seeds, tests), np.nan)


def seeds_needed(std: float, n: float, se: float, difference: float) -> int | None:
    """Seeds for an 80 % chance to detect ``difference`` (the spread ``std`` seen over
    ``n`` seeds taken as the truth); None when no number of seeds is enough or ``n`` < 3."""
    if not n >= MIN_SEEDS or not np.isfinite(std) or difference <= 0:
        return None
    grid = np.arange(MIN_SEEDS, MAX_SEEDS + 1, dtype=float)
    ok = detectable(np.full_like(grid, std), grid, np.full_like(grid, se)) <= difference
    return int(grid[np.argmax(ok)]) if ok.any() else None
