"""Honest uncertainty: intervals over seeds only where there are enough, with the test
set's own sampling error folded in, and rank *groups* instead of strict ranks.

Why the test-set error is added and not averaged away: every seed of a cell is scored on
the same test rows (the dataset's fixed split), so the seeds' spread says nothing about
how a different draw of test rows would score; one breast_cancer test row is 0.009 of
accuracy. The two sources are independent, so their half-widths add in quadrature:

    half = sqrt( (t_{0.975, n-1} · s / sqrt(n))^2 + (z_{0.975} · se_test)^2 ),   n >= 3

with s the standard deviation over the n seeds and se_test the mean of the seeds'
sampling errors (the same rows score every seed: their errors are taken as fully
correlated, which is the conservative choice). Below three seeds there is no interval:
a t interval from two points is wide and shaped by one difference, a bootstrap of two
points is the pair itself.

Rank groups: within a scenario, the cells that cannot be told apart from the best by a
paired comparison over seeds (the per-seed differences' t interval, widened by both
cells' test-set errors, contains 0) share group 1; the best of the rest opens group 2;
and so on. Cells with fewer than three seeds in common with their group's leader get no
group (NaN): nothing can be said.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

MIN_SEEDS = 3
Z = 1.959963984540054  # standard normal 0.975 quantile
TIE = 1e-12  # means closer than this are ties


def t_quantile(df: np.ndarray | float) -> np.ndarray:
    """Student t 0.975 quantile (scipy.special only: scipy.stats costs 0.5 s to import).

    Evaluated once per distinct degree of freedom: ``stdtrit`` inverts the t distribution
    iteratively (about 1 µs a value), and the rank groups and contrasts of a million
    records ask for millions of values that take a few dozen distinct ones (seed counts
    minus one). Element-wise, so each value is the one a direct call gives, bit for bit."""
    from scipy.special import stdtrit

    df = np.asarray(df, dtype=float)
    if df.size < 64:  # np.unique's sort costs more than it saves
        return np.asarray(stdtrit(df, 0.975))
    distinct, inverse = np.unique(df, return_inverse=True)  # NaNs collapse into one
    return np.asarray(stdtrit(distinct, 0.975))[inverse].reshape(df.shape)


def half_width(std: np.ndarray, n: np.ndarray, se_test: np.ndarray | float) -> np.ndarray:
    """The interval's half-width (see the module docstring); NaN where n < 3."""
    std, n = np.asarray(std, dtype=float), np.asarray(n, dtype=float)
    se_test = np.nan_to_num(np.asarray(se_test, dtype=float))
    enough = n >= MIN_SEEDS
    safe_n = np.where(enough, n, MIN_SEEDS)
    seeds = t_quantile(safe_n - 1) * np.nan_to_num(std) / np.sqrt(safe_n)
    return np.where(enough, np.sqrt(seeds**2 + (Z * se_test) ** 2), np.nan)


def cell_stats(
    per_seed: pd.DataFrame, keys: list[str], value: str, se: str | None = None
) -> pd.DataFrame:
    """Per cell (``keys``): mean, n, std over seeds, se_test, half, lo, hi of ``value``.

    ``per_seed`` has one row per (cell, seed); ``se`` names its sampling-error column.
    """
    frame = per_seed[per_seed[value].notna()]
    cols = {"mean": (value, "mean"), "n": (value, "count"), "std": (value, "std")}
    if se is not None:
        cols["se_test"] = (se, "mean")
    out = frame.groupby(keys, observed=True, dropna=False, sort=False).agg(**cols).reset_index()
    if se is None:
        out["se_test"] = 0.0
    out["half"] = half_width(out["std"].to_numpy(), out["n"].to_numpy(), out["se_test"])
    out["lo"] = out["mean"] - out["half"]
    out["hi"] = out["mean"] + out["half"]
    return out


def rank_groups(
    per_seed: pd.DataFrame, scenario: str, cell: list[str], value: str, se: str | None = None
) -> pd.DataFrame:
    """Rank group (1 = cannot be told apart from the best) of every cell, per scenario,
    higher ``value`` better; returns ``[scenario, *cell, "group", "tied_with_best"]``.

    ``tied_with_best``: the cell's mean equals the scenario's best mean and at least one
    other cell's (an exact tie; named whatever the number of seeds).
    """
    parts = []
    for _, rows in per_seed.groupby(scenario, observed=True, sort=False):
        parts.append(_groups_of(rows, scenario, cell, value, se))
    if not parts:
        return pd.DataFrame(columns=[scenario, *cell, "group", "tied_with_best"])
    return pd.concat(parts, ignore_index=True)


def _groups_of(
    rows: pd.DataFrame, scenario: str, cell: list[str], value: str, se: str | None
) -> pd.DataFrame:
    keys = [scenario, *cell]
    rows = rows[rows[value].notna()]
    codes = rows.groupby(keys, observed=True, dropna=False, sort=False).ngroup().to_numpy()
    seeds, seed_codes = np.unique(rows["seed"].to_numpy(), return_inverse=True)
    matrix = np.full((codes.max() + 1 if len(codes) else 0, len(seeds)), np.nan)  # (cells, seeds)
    matrix[codes, seed_codes] = rows[value].to_numpy(dtype=float)
    errors = np.zeros(len(matrix))
    if se is not None:
        sums = np.bincount(codes, rows[se].fillna(0.0).to_numpy(dtype=float), len(matrix))
        errors = sums / np.maximum(np.bincount(codes, minlength=len(matrix)), 1)
    firsts = rows[keys].assign(_code=codes).drop_duplicates("_code").sort_values("_code")
    means = np.nanmean(matrix, axis=1) if len(matrix) else np.zeros(0)
    order = np.argsort(-means, kind="stable")  # cells, best first
    group = np.full(len(means), np.nan)
    counts = (~np.isnan(matrix)).sum(axis=1)
    best = means[order[0]] if len(order) else np.nan
    tied = np.abs(means - best) <= TIE  # exact ties with the best: named even without groups
    tied &= tied.sum() > 1  # the best alone ties with nothing
    number = 0
    while len(order):
        lead, rest = order[0], order[1:]
        if counts[lead] < MIN_SEEDS:  # a leader nothing can be compared with: no group
            order = rest
            continue
        number += 1
        group[lead] = number
        pair = _indistinguishable(matrix[lead], matrix[rest], errors[lead], errors[rest])
        same, comparable = pair
        join = comparable & (same | (np.abs(means[rest] - means[lead]) <= TIE))
        group[rest[join]] = number
        order = rest[comparable & ~join]  # too few common seeds: no group
    out = firsts.drop(columns="_code").reset_index(drop=True)
    out["group"] = group
    out["tied_with_best"] = tied
    return out


def _indistinguishable(
    lead: np.ndarray, others: np.ndarray, se_lead: float, se_others: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``others`` (m, seeds) against ``lead`` (seeds,): whether the paired
    per-seed difference's interval contains 0, and whether there were MIN_SEEDS common
    seeds to say so. All cells at once: a scenario of 200 cells is 200 numpy steps."""
    diff = lead[None, :] - others  # (m, seeds), NaN where either lacks the seed
    have = ~np.isnan(diff)
    n = have.sum(axis=1)  # (m,)
    filled = np.where(have, diff, 0.0)
    mean = filled.sum(axis=1) / np.maximum(n, 1)
    squares = (np.where(have, diff - mean[:, None], 0.0) ** 2).sum(axis=1)
    std = np.sqrt(squares / np.maximum(n - 1, 1))
    half = half_width(std, n, np.hypot(se_lead, se_others))  # NaN below MIN_SEEDS
    comparable = n >= MIN_SEEDS
    return comparable & (np.abs(mean) <= half), comparable


def at_chance(mean: pd.Series, half: pd.Series, n: pd.Series, se: pd.Series) -> pd.Series:
    """Whether an advantage cannot be told apart from 0 (no information): its interval
    reaches 0 (n >= 3), or, with fewer seeds, it is within z test-set errors of 0."""
    enough = n >= MIN_SEEDS
    reaches = enough & (mean - half <= 0)
    near = ~enough & (mean <= Z * se.fillna(0.0))
    return reaches | near
