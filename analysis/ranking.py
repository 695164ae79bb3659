"""T-DCS per attack type, C-DCS with user weights, ranks, bootstrap intervals over seeds,
and the β sensitivity of the ranking (Kendall τ against β = 0.5).

VFLAIR (eq. 2, 3 and the "C-DCS calculation detail"): T-DCS_j is the mean DCS over the
attacks of type j, each attack counting once (here: an attack's DCS is first averaged over
seeds); C-DCS = Σ_j w_j T-DCS_j over LI, FR, TB, NTB. A type that no row of a scenario
has is dropped and the other weights renormalized (a sweep with only label attacks still
ranks); a defense that lacks a type its scenario has gets no C-DCS, as in VFLAIR's tables.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.dcs import dcs_value
from analysis.uncertainty import MIN_SEEDS, cell_stats, rank_groups
from trainables.errors import ConfigError

ATTACK_TYPES = ("LI", "FR", "TB", "NTB")
DEFAULT_WEIGHTS = dict.fromkeys(ATTACK_TYPES, 0.25)
BETAS = tuple(round(0.1 * i, 1) for i in range(11))
BOOT_CHUNK = 1 << 18  # bootstrap draws per block (2 MiB of doubles)
EXACT_PAIRS_MAX = 4000  # kendall_tau counts pairs in numpy up to this size, else scipy's
KEYS = ["scenario", "defense", "defense_param"]


def parse_weights(text: str | None) -> dict[str, float]:
    """``LI=0.25,FR=0.25,TB=0.25,NTB=0.25`` → dict; ConfigError naming the bad part."""
    if not text:
        return dict(DEFAULT_WEIGHTS)
    weights: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip().upper()
        if not sep or name not in ATTACK_TYPES:
            raise ConfigError(
                f"--weights: {part!r}: expected TYPE=NUMBER with TYPE one of "
                f"{', '.join(ATTACK_TYPES)}"
            )
        try:
            weights[name] = float(value)
        except ValueError:
            raise ConfigError(f"--weights: {part!r}: {value!r} is not a number") from None
        if not weights[name] >= 0:
            raise ConfigError(f"--weights: {part!r}: weights must be >= 0")
    if abs(sum(weights.values()) - 1.0) > 1e-6:
        raise ConfigError(f"--weights: {text!r}: weights sum to {sum(weights.values()):g}, not 1")
    return {t: weights.get(t, 0.0) for t in ATTACK_TYPES}


BETA_COLUMNS = [f"b{b}" for b in BETAS]


def seed_means(dcs: pd.DataFrame) -> pd.DataFrame:
    """Mean DCS (at the chosen β and at every β of BETAS) per (scenario, defense, strength,
    seed, attack type, attack): the one pass over all rows; everything after is small.

    The 11 β columns come from the stored clipped gaps as one (N, 11) array.
    """
    ca = [c for c in ("ca_dcs", "ca_dcs_se") if c in dcs.columns]
    rows = dcs.loc[
        dcs["dcs"].notna(),
        [*KEYS, "seed", "attack_type", "attack", "dcs", *ca, "ap_gap", "mp_gap"],
    ]
    grid = dcs_value(
        rows["ap_gap"].to_numpy()[:, None], rows["mp_gap"].to_numpy()[:, None], np.array(BETAS)
    )
    frame = rows[[*KEYS, "seed", "attack_type", "attack", "dcs", *ca]].copy()
    frame[BETA_COLUMNS] = grid
    keys = [*KEYS, "seed", "attack_type", "attack"]
    grouped = frame.groupby(keys, observed=True, dropna=False, sort=False)
    return grouped[["dcs", *ca, *BETA_COLUMNS]].mean().reset_index()


def attack_means(levels: pd.DataFrame, value_cols: list[str]) -> pd.DataFrame:
    """Seed means → mean over seeds per attack (each seed counts once)."""
    keys = [*KEYS, "attack_type", "attack"]
    grouped = levels.groupby(keys, observed=True, dropna=False, sort=False)
    return grouped[value_cols].mean().reset_index()


def tdcs_cdcs(means: pd.DataFrame, value: str, weights: dict[str, float], index: list[str]):
    """(T-DCS table: one column per type, C-DCS series) from per-attack means of ``value``."""
    grouped = means.groupby([*index, "attack_type"], observed=True, dropna=False)[value]
    tdcs = grouped.mean().unstack("attack_type")
    tdcs.columns = tdcs.columns.astype(str)
    tdcs = tdcs.reindex(columns=[t for t in ATTACK_TYPES if t in tdcs.columns])
    present = tdcs.notna().groupby(level="scenario", observed=True).transform("any")
    w = present * pd.Series(weights).reindex(tdcs.columns).to_numpy()
    w = w.div(w.sum(axis=1).replace(0.0, np.nan), axis=0)
    missing = (w > 0) & tdcs.isna()
    cdcs = (tdcs.fillna(0.0) * w).sum(axis=1).where(~missing.any(axis=1) & w.notna().all(axis=1))
    return tdcs, cdcs


def rank_within(cdcs: pd.Series) -> pd.Series:
    """Rank 1 = highest C-DCS, within each scenario; NaN C-DCS gets no rank."""
    return cdcs.groupby(level="scenario", observed=True).rank(ascending=False, method="min")


def bootstrap_ci(per_seed: pd.Series, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """95% percentile interval of the mean over seeds, per group (all groups at once);
    NaN for a group of fewer than three seeds (a bootstrap of one or two points is those
    points: a zero-width or two-point "interval" that overstates what is known).

    Rows are sorted by group; each bootstrap draws, for every group, n_g indices inside that
    group's block, so one (B, N) array covers every group; B shrinks for huge N (memory).
    """
    values = per_seed.dropna()
    keys = values.index.to_frame(index=False).drop(columns="seed")
    codes = keys.groupby(list(keys.columns), dropna=False, observed=True, sort=False).ngroup()
    codes = codes.to_numpy()
    uniques = keys.assign(_code=codes).drop_duplicates("_code").sort_values("_code")
    order = np.argsort(codes, kind="stable")
    codes, v = codes[order], values.to_numpy()[order]
    counts = np.bincount(codes)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    b = max(200, min(n_boot, int(2e7 // max(len(v), 1))))
    rng = np.random.default_rng(seed)
    sums = np.zeros((b, len(counts)))  # (B, groups)
    step = max(1, BOOT_CHUNK // max(len(v), 1))
    for lo_row in range(0, b if len(v) else 0, step):  # draws in stream order, in row blocks
        rows = min(step, b - lo_row)  # that fit in cache: same numbers as one (B, N) draw
        idx = starts[codes] + (rng.random((rows, len(v))) * counts[codes]).astype(np.int64)
        sums[lo_row : lo_row + rows] = np.add.reduceat(v[idx], starts, axis=1)
    means = sums / counts
    lo, hi = np.percentile(means, [2.5, 97.5], axis=0) if len(v) else ([], [])
    lo, hi = np.where(counts >= MIN_SEEDS, lo, np.nan), np.where(counts >= MIN_SEEDS, hi, np.nan)
    out = uniques.drop(columns="_code").reset_index(drop=True)
    return out.assign(cdcs_ci_low=lo, cdcs_ci_high=hi, n_seeds=counts)


def ranking_table(
    dcs: pd.DataFrame, weights: dict[str, float], levels: pd.DataFrame | None = None
) -> pd.DataFrame:
    """ranking.csv: scenario, defense, strength, T-DCS per type, C-DCS, rank, 95% CI, seeds."""
    levels = seed_means(dcs) if levels is None else levels
    tdcs, cdcs = tdcs_cdcs(attack_means(levels, ["dcs"]), "dcs", weights, KEYS)
    table = tdcs.add_prefix("tdcs_")
    table["cdcs"] = cdcs
    table["rank"] = rank_within(cdcs)
    _, per_seed = tdcs_cdcs(levels, "dcs", weights, [*KEYS, "seed"])
    table = table.reset_index().merge(bootstrap_ci(per_seed), on=KEYS, how="left")
    if "ca_dcs" in levels.columns and levels["ca_dcs"].notna().any():
        table = table.merge(chance_aware(levels, weights), on=KEYS, how="left")
    table = table.rename(columns={"defense_param": "strength"})
    return table.sort_values(["scenario", "rank", "defense", "strength"], na_position="last")


def chance_aware(levels: pd.DataFrame, weights: dict[str, float]) -> pd.DataFrame:
    """Per cell: ``ca_tdcs_<type>``, ``ca_cdcs`` with its interval (``ca_cdcs_lo/hi``, NaN
    below three seeds), ``ca_group`` (1 = cannot be told apart from the best) and
    ``ca_tied`` (exactly the best value).

    The test-set error of a C-DCS is the same weighted mean of its attacks' errors as the
    C-DCS is of their scores: the attacks of one training are scored on the same rows, so
    their errors are taken as fully correlated (conservative).
    """
    tdcs, cdcs = tdcs_cdcs(attack_means(levels, ["ca_dcs"]), "ca_dcs", weights, KEYS)
    out = tdcs.add_prefix("ca_tdcs_")
    out["ca_cdcs"] = cdcs
    out = out.reset_index()
    _, value = tdcs_cdcs(levels, "ca_dcs", weights, [*KEYS, "seed"])
    _, error = tdcs_cdcs(levels, "ca_dcs_se", weights, [*KEYS, "seed"])
    per_seed = pd.DataFrame({"ca_cdcs": value, "se": error.reindex(value.index)}).reset_index()
    stats = cell_stats(per_seed, KEYS, "ca_cdcs", "se")
    stats = stats[[*KEYS, "lo", "hi"]].rename(columns={"lo": "ca_cdcs_lo", "hi": "ca_cdcs_hi"})
    groups = rank_groups(per_seed, "scenario", ["defense", "defense_param"], "ca_cdcs", "se")
    groups = groups.rename(columns={"group": "ca_group", "tied_with_best": "ca_tied"})
    return out.merge(stats, on=KEYS, how="left").merge(groups, on=KEYS, how="left")


def beta_sensitivity(
    dcs: pd.DataFrame, weights: dict[str, float], levels: pd.DataFrame | None = None
) -> pd.DataFrame:
    """C-DCS rank of every (defense, strength) for β = 0.0 … 1.0 and Kendall τ vs β = 0.5."""
    levels = seed_means(dcs) if levels is None else levels
    means = attack_means(levels, BETA_COLUMNS)
    parts = []
    for beta, col in zip(BETAS, BETA_COLUMNS, strict=True):
        _, cdcs = tdcs_cdcs(means, col, weights, KEYS)
        part = pd.DataFrame({"cdcs": cdcs, "rank": rank_within(cdcs)}).reset_index()
        part.insert(0, "beta", beta)
        parts.append(part)
    table = pd.concat(parts, ignore_index=True).rename(columns={"defense_param": "strength"})
    table["kendall_tau_vs_0.5"] = kendall_vs_reference(table)
    return table


def kendall_vs_reference(table: pd.DataFrame, reference: float = 0.5) -> pd.Series:
    """Per row: Kendall τ between its (scenario, β) ranking and the β = ``reference`` one."""
    key = table["defense"].astype(str) + "@" + table["strength"].astype(str)
    ref = table[table["beta"] == reference].assign(key=key).set_index(["scenario", "key"])["cdcs"]
    taus: dict[tuple[object, float], float] = {}
    for (scenario, beta), part in table.assign(key=key).groupby(
        ["scenario", "beta"], observed=True
    ):
        other = part.set_index("key")["cdcs"]
        both = pd.concat([other, ref.xs(scenario, level="scenario")], axis=1).dropna()
        tau = kendall_tau(both.iloc[:, 0].to_numpy(), both.iloc[:, 1].to_numpy())
        taus[(scenario, beta)] = float(tau)
    index = pd.MultiIndex.from_frame(table[["scenario", "beta"]])
    return pd.Series([taus.get(k, np.nan) for k in index], index=table.index)


def kendall_tau(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's τ-b of two equal-length samples, bit for bit ``scipy.stats.kendalltau``.

    Why not scipy: importing ``scipy.stats`` costs about 0.5 s of every ``python -m
    analysis`` for a statistic on a few hundred points. Same steps as scipy 1.17 (dense
    ranks, tie counts as integers, one float formula); the discordant pairs are counted
    by an (n, n) comparison in row blocks. Larger samples go to scipy (imported then).
    """
    x, y = np.asarray(x).ravel(), np.asarray(y).ravel()  # (n,), (n,)
    size = x.size
    if size < 2:
        return float("nan")
    if size > EXACT_PAIRS_MAX:
        from scipy.stats import kendalltau

        return float(kendalltau(x, y).statistic)
    perm = np.argsort(y)  # sort on y and convert y to dense ranks (as scipy)
    x, y = x[perm], y[perm]
    y = np.r_[True, y[1:] != y[:-1]].cumsum(dtype=np.intp)
    perm = np.argsort(x, kind="mergesort")  # stable sort on x, dense ranks
    x, y = x[perm], y[perm]
    x = np.r_[True, x[1:] != x[:-1]].cumsum(dtype=np.intp)
    dis = _discordant(y)
    obs = np.r_[True, (x[1:] != x[:-1]) | (y[1:] != y[:-1]), True]
    cnt = np.diff(np.nonzero(obs)[0]).astype("int64", copy=False)
    ntie = int((cnt * (cnt - 1) // 2).sum())
    xtie, ytie = _tied_pairs(x), _tied_pairs(y)
    tot = (size * (size - 1)) // 2
    if xtie == tot or ytie == tot:
        return float("nan")
    con_minus_dis = tot - xtie - ytie + ntie - 2 * dis
    tau = con_minus_dis / np.sqrt(tot - xtie) / np.sqrt(tot - ytie)
    return float(np.minimum(1.0, max(-1.0, tau)))


def _tied_pairs(ranks: np.ndarray) -> int:
    cnt = np.bincount(ranks).astype("int64", copy=False)
    cnt = cnt[cnt > 1]
    return int((cnt * (cnt - 1) // 2).sum())


def _discordant(y: np.ndarray) -> int:
    """Pairs i < j with y[i] > y[j] (x is sorted, ties in x have y ascending)."""
    total = 0
    for start in range(0, len(y), 512):  # (512, n) blocks bound the memory
        rows = y[start : start + 512, None]  # (b, 1)
        later = np.arange(len(y))[None, :] > np.arange(start, start + len(rows))[:, None]
        total += int(((rows > y[None, :]) & later).sum())
    return total
