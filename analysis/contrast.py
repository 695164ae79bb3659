"""Contrasts between two settings of one axis: "does B leak more than A, and does the
defense act equally under both?" (docs/architecture.md, "Comparisons and selection").

``--compare protocol=fedsgd:fedbcd`` reads "from A = fedsgd to B = fedbcd"; every Δ is
B − A. Per *context* (every spec field but the axis, the defense and the seed held
fixed: dataset, partition, lr, …) and per defense cell:

- **contrast**: Δ MP and Δ advantage of each attack, paired over seeds (a training of A
  and one of B whose specs differ only in the axis and its own parameters, e.g.
  ``protocol_params.q``);
- **interaction**: for each defense, its effect under B minus its effect under A (a
  difference in differences, per seed: (B_d − B_none) − (A_d − A_none)); on the
  advantage it answers "does the defense protect equally under both", on MP "does it cost
  equally".

Interval (n ≥ 3 paired seeds), the engine's one shape (``uncertainty.half_width``):
Δ̄ ± sqrt((t_{0.975,n−1}·s/√n)² + (z_{0.975}·se)²), s the spread of the per-seed
differences and se the test-set sampling error of one difference (the arms' errors added
in quadrature, averaged over seeds: every seed is scored on the same test rows, so those
errors do not shrink with n; A and B share those rows, so the quadrature sum is the
conservative side). The p value is the α at which that interval's (1 − α) version just
reaches 0 (``interval_pvalue``): p < 0.05 exactly when the 95 % interval excludes 0.
**Holm**'s step-down correction runs over every contrast and interaction one
``--compare`` table prints (family-wise error 5 %), and the verdicts read the corrected
p values, so a wide grid does not manufacture findings. The printed intervals are the
uncorrected 95 % ones (a verdict can say "cannot tell" while its interval misses 0).

An attack at chance undefended in *both* arms (the chance rule of ``answer.chance_table``)
says nothing about either arm: it is named, not contrasted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analysis.baselines import not_a_baseline
from analysis.cap_contrast import METRIC as CAP
from analysis.cap_contrast import cap_attacks, cap_units
from analysis.compare import Arms, Compare, row_arms
from analysis.power import detectable
from analysis.uncertainty import MIN_SEEDS, at_chance, cell_stats, half_width
from trainables.errors import ConfigError

ALPHA = 0.05
CELL = ["context", "metric", "attack_type", "defense", "defense_param"]


@dataclass
class Contrasts:
    """Everything one ``--compare`` prints and writes (``contrast_<axis>.csv``)."""

    compare: Compare
    table: pd.DataFrame  # one row per contrast or interaction (``kind``)
    baselines: pd.DataFrame  # per context, arm and metric: the undefended mean ± half
    left_out: pd.DataFrame  # (context, attack) at chance undefended in both arms
    contexts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    text: list[Any] | None = None  # contrast_text.tables, built once for screen and page
    effect: float = 0.05  # the difference whose needed seeds the header states


def contrasts(
    dcs: pd.DataFrame,
    compare: Compare,
    arms: Arms | None = None,
    family: str = "comparison",
    effect: float = 0.05,
) -> Contrasts:
    """The contrasts of ``compare`` over the prepared records (``report.prepare``);
    ``arms``: ``row_arms(dcs, compare)`` when the caller has it already. ``family``: what
    Holm corrects over, ``comparison`` (every row of this one) or ``attack`` (each metric's
    rows apart); ``analysis`` (every comparison together) is ``joint_holm``'s, afterwards."""
    arms = arms if arms is not None else row_arms(dcs, compare)
    units = seed_units(dcs, compare, arms)
    caps = cap_units(dcs, arms)
    if len(caps):  # CAP as one more metric (cap_contrast.py)
        units = stack_labelled([units, caps])
    paired = pair_arms(units)
    if paired.empty:
        raise ConfigError(
            f"--compare {compare.text}: no training of {compare.a!r} has a twin of "
            f"{compare.b!r} that differs only in {compare.axis} (same seed, defense and "
            "every other setting)"
        )
    baselines = baseline_table(units)
    left_out = chance_both(baselines)
    drop = left_out.assign(_drop=True)[["context", "metric", "_drop"]]
    paired = paired.merge(drop, on=["context", "metric"], how="left")
    paired = paired[paired["_drop"].isna()].drop(columns="_drop")
    table = pd.concat(
        [summarize(paired, "contrast"), summarize(interactions(paired), "interaction")],
        ignore_index=True,
    )
    table = holm(ordered(plain(table), units), by=["metric"] if family == "attack" else [])
    table["family_by"] = family
    table["verdict"] = verdicts(table, compare)
    table["not_a_baseline"] = not_a_baseline(table, compare, cap_attacks(dcs))
    table.insert(0, "axis", compare.axis)
    table.insert(1, "a", compare.a)
    table.insert(2, "b", compare.b)
    contexts = [str(c) for c in pd.unique(units["context"])]
    baselines, left_out = plain(baselines), plain(left_out)
    notes = []
    for why in pd.unique(table.loc[table["not_a_baseline"] != "", "not_a_baseline"]):
        notes.append(f"† not a baseline: {why}")
    few = table[table["n"] < MIN_SEEDS]
    if len(few):
        notes.append(
            f"{len(few)} contrasts have fewer than {MIN_SEEDS} paired seeds: "
            "no interval, no verdict"
        )
    return Contrasts(compare, table, baselines, left_out, contexts, notes, effect=effect)


def stack_labelled(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """``pd.concat`` of frames with the same columns, each label column a categorical of
    the union of the frames' labels (first seen first).

    Why: concatenating categoricals whose categories differ gives a column of one string
    per row; on a million records' units that was 0.3 s per comparison, and every later
    merge and group-by then hashed strings instead of codes."""
    frames = [f.copy(deep=False) for f in frames]
    for column in ("context", "metric", "attack_type", "defense"):
        labels = pd.unique(np.concatenate([_labels(f[column]) for f in frames]))
        for f in frames:
            f[column] = pd.Categorical(f[column], categories=labels)
    return pd.concat(frames, ignore_index=True)


def _labels(column: pd.Series) -> np.ndarray:
    """The labels a column uses: a categorical's categories, else its distinct values."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return np.asarray(column.cat.categories, dtype=object)
    return np.asarray(pd.unique(column), dtype=object)


def plain(frame: pd.DataFrame) -> pd.DataFrame:
    """The label columns as plain strings (the small output tables, for CSV and text)."""
    out = frame.copy()
    for column in ("context", "metric", "attack_type", "defense"):
        if column in out.columns:
            out[column] = out[column].astype(str)
    return out


def ordered(table: pd.DataFrame, units: pd.DataFrame) -> pd.DataFrame:
    """Contrasts before interactions; contexts as the records list them; MP before the
    attacks (by name); the undefended cell first, then each defense by strength."""
    context_rank = {c: i for i, c in enumerate(pd.unique(units["context"]))}
    keys = pd.DataFrame(
        {
            "k": (table["kind"] != "contrast").astype(int),
            "c": table["context"].map(context_rank),
            "m": table["metric"].map(lambda m: {"mp": "", CAP: "~"}.get(str(m), str(m))),
            "d": table["defense"].map(lambda d: "" if d == "none" else str(d)),
            "s": table["defense_param"],
        }
    )
    order = keys.sort_values(["k", "c", "m", "d", "s"], kind="stable").index
    return table.loc[order].reset_index(drop=True)


def seed_units(dcs: pd.DataFrame, compare: Compare, arms: Arms | None = None) -> pd.DataFrame:
    """One row per (context, arm, metric, defense cell, seed): the value and its test-set
    error. ``metric`` is ``mp`` (the clean rows) or an attack's label (its advantage).
    Grouped on integer codes, labelled after: a million rows take a fraction of a second."""
    side, context, labels = arms if arms is not None else row_arms(dcs, compare)
    is_ok = (dcs["status"] == "ok").to_numpy()
    # the columns used, not the whole frame: a copy of every column of a million rows
    # was a second of copying and page faults
    used = ["attack", "attack_type", "defense", "defense_param", "seed", "adv", "mp", "mp_se",
            "ap_advantage_se"]  # fmt: skip
    ok, arms_ok, contexts = dcs.loc[is_ok, used], side[is_ok], context[is_ok]
    attack = pd.Categorical(ok["attack"].astype("category"))
    defense = pd.Categorical(ok["defense"].astype("category"))
    clean = (attack == "none") if "none" in attack.categories else np.zeros(len(ok), bool)
    clean = np.asarray(clean)
    adv = ok["adv"].to_numpy(dtype=float)
    value = np.where(clean, ok["mp"].to_numpy(dtype=float), adv)
    se = np.where(
        clean, ok["mp_se"].to_numpy(dtype=float), ok["ap_advantage_se"].to_numpy(dtype=float)
    )
    keep = (arms_ok >= 0) & (clean | ~np.isnan(adv)) & ~np.isnan(value)
    frame = pd.DataFrame(
        {
            "context": contexts,
            "metric": np.where(clean, -1, attack.codes),
            "defense": defense.codes,
            "defense_param": ok["defense_param"].to_numpy(dtype=float),
            "arm": arms_ok,
            "seed": ok["seed"].to_numpy(),
            "value": value,
            "se": np.nan_to_num(se),
        }
    )[keep]
    keys = ["context", "metric", "defense", "defense_param", "arm", "seed"]
    out = frame.groupby(keys, dropna=False, sort=False)[["value", "se"]].mean().reset_index()
    # codes back to labels as categoricals (no string per row): later merges and
    # group-bys run on their codes
    types = ok.groupby("attack", observed=True)["attack_type"].first().astype(str)
    metrics = [*attack.categories.astype(str), "mp"]
    kinds = [*(types.get(m, "") for m in metrics[:-1]), "MP"]
    kind_names = sorted(set(kinds))
    kind_of = np.asarray([kind_names.index(k) for k in kinds])
    code = np.where(out["metric"].to_numpy() < 0, len(metrics) - 1, out["metric"].to_numpy())
    out["metric"] = pd.Categorical.from_codes(code, metrics)
    out["attack_type"] = pd.Categorical.from_codes(kind_of[code], kind_names)
    out["context"] = pd.Categorical.from_codes(out["context"].to_numpy(), labels)
    out["defense"] = pd.Categorical.from_codes(out["defense"].to_numpy(), defense.categories)
    out["arm"] = np.where(out["arm"].to_numpy() == 0, "a", "b")
    return out[[*CELL, "arm", "seed", "value", "se"]]


def pair_arms(units: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, seed) present in both arms: a, b, delta = b − a, se of delta."""
    keys = [*CELL, "seed"]
    a = units[units["arm"] == "a"].drop(columns="arm")
    b = units[units["arm"] == "b"].drop(columns="arm")
    both = a.merge(b, on=keys, suffixes=("_a", "_b"))
    both["delta"] = both["value_b"] - both["value_a"]
    both["se"] = np.hypot(both["se_a"], both["se_b"])
    return both


def interactions(paired: pd.DataFrame) -> pd.DataFrame:
    """Per defended cell and seed: (B_d − A_d) − (B_none − A_none), with the effects."""
    keys = ["context", "metric", "seed"]
    none = paired[paired["defense"] == "none"]
    defended = paired[paired["defense"] != "none"]
    both = defended.merge(none[[*keys, "value_a", "value_b", "delta", "se"]], on=keys,
                          suffixes=("", "_none"))  # fmt: skip
    out = both[[*CELL, "seed"]].copy()
    out["value_a"] = both["value_a"] - both["value_a_none"]  # the defense's effect under A
    out["value_b"] = both["value_b"] - both["value_b_none"]  # ... under B
    out["delta"] = both["delta"] - both["delta_none"]
    out["se"] = np.hypot(both["se"], both["se_none"])
    return out


def summarize(per_seed: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Per cell: n, mean A, mean B, Δ, its interval and uncorrected p (module docstring)."""
    columns = [*CELL, "n", "mean_a", "mean_b", "delta", "lo", "hi", "half", "p", "std", "se"]
    columns.append("mde")  # the smallest Δ these seeds could detect (``power.py``)
    if per_seed.empty:
        return pd.DataFrame(columns=["kind", *columns])
    grouped = per_seed.groupby(CELL, dropna=False, sort=False, observed=True)
    out = grouped.agg(
        n=("delta", "count"),
        mean_a=("value_a", "mean"),
        mean_b=("value_b", "mean"),
        delta=("delta", "mean"),
        std=("delta", "std"),
        se=("se", "mean"),
    ).reset_index()
    n = out["n"].to_numpy(dtype=float)
    enough = n >= MIN_SEEDS
    spread = np.nan_to_num(out["std"].to_numpy()) / np.sqrt(n)  # the seeds' standard error
    half = np.where(enough, half_width(out["std"].to_numpy(), n, out["se"].to_numpy()), np.nan)
    out["lo"], out["hi"], out["half"] = out["delta"] - half, out["delta"] + half, half
    p = interval_pvalue(out["delta"].to_numpy(), spread, out["se"].to_numpy(), n - 1)
    out["p"] = np.where(enough, p, np.nan)
    out["mde"] = detectable(out["std"].to_numpy(), n, out["se"].to_numpy())
    out.insert(0, "kind", kind)
    return out[["kind", *columns]]


def interval_pvalue(
    mean: np.ndarray, spread: np.ndarray, se: np.ndarray, df: np.ndarray
) -> np.ndarray:
    """The p value that matches the interval: the α at which the (1 − α) interval
    sqrt((t_{1−α/2,df}·spread)² + (z_{1−α/2}·se)²) just reaches 0 (``half_width``'s shape),
    so "the 95 % interval excludes 0" and "p < 0.05" are the same statement. Found by
    bisection on α (the half-width shrinks as α grows), all rows at once."""
    from scipy.special import ndtri, stdtrit

    mean, spread, se = np.abs(mean), np.nan_to_num(spread), np.nan_to_num(se)
    df = np.maximum(np.asarray(df, dtype=float), 1.0)
    lo, hi = np.zeros_like(mean), np.ones_like(mean)  # p lies in [lo, hi]
    for _ in range(60):
        alpha = np.clip((lo + hi) / 2, 1e-300, 1.0)
        q = 1.0 - alpha / 2
        with np.errstate(invalid="ignore", over="ignore"):  # inf · 0 where a part is 0
            seeds = np.where(spread > 0, stdtrit(df, q) * spread, 0.0)
            tests = np.where(se > 0, ndtri(q) * se, 0.0)
        half = np.hypot(seeds, tests)
        reaches = half >= mean  # 0 inside the interval at this α: p is larger
        lo, hi = np.where(reaches, alpha, lo), np.where(reaches, hi, alpha)
    out = (lo + hi) / 2
    return np.where((spread == 0) & (se == 0), np.where(mean > 0, 0.0, 1.0), out)


def holm(table: pd.DataFrame, by: list[str] | None = None) -> pd.DataFrame:
    """``p_holm``: Holm's step-down adjusted p over every row with a p value, within each
    group of ``by`` (none: the whole table); ``family``: the size of a row's group."""
    p = table["p"].to_numpy(dtype=float)
    adjusted = np.full(len(p), np.nan)
    sizes = np.zeros(len(p), dtype=int)
    groups = (
        [np.arange(len(p))]
        if not by
        else [
            np.asarray(ix) for ix in table.groupby(by, sort=False, observed=True).indices.values()
        ]
    )
    for rows in groups:
        have = rows[~np.isnan(p[rows])]
        order = have[np.argsort(p[have], kind="stable")]
        m = len(order)
        running = 0.0
        for i, row in enumerate(order):
            running = max(running, min(1.0, (m - i) * p[row]))
            adjusted[row] = running
        sizes[rows] = m
    return table.assign(p_holm=adjusted, family=sizes)


FAMILIES = ("comparison", "attack", "analysis")


def joint_holm(found: list[Contrasts]) -> None:
    """``--family analysis``: Holm over every row of every comparison at once (a grid of
    comparisons then manufactures no finding either); tables and verdicts in place."""
    if not found:
        return
    tables = [c.table.assign(_which=i) for i, c in enumerate(found)]
    joint = holm(pd.concat(tables, ignore_index=True).drop(columns=["p_holm", "family"]))
    for i, c in enumerate(found):
        part = joint[joint["_which"] == i].drop(columns="_which").reset_index(drop=True)
        part["family_by"] = "analysis"
        part["verdict"] = verdicts(part, c.compare)
        c.table, c.text = part, None


def verdicts(table: pd.DataFrame, compare: Compare) -> list[str]:
    """``verdict`` of each row of a contrasts table."""
    t = table
    rows = zip(t["n"], t["p_holm"], t["delta"], t["kind"], t["metric"], strict=True)
    return [verdict(n, p, delta, kind, metric, compare) for n, p, delta, kind, metric in rows]


def verdict(n: float, p: float, delta: float, kind: str, metric: str, compare: Compare) -> str:
    """A plain sentence from the corrected p value and the sign of Δ."""
    n = int(n)
    if n < MIN_SEEDS:
        return f"n={n}: no verdict"
    if not p < ALPHA:
        return "cannot tell"
    up = delta > 0
    b = compare.b
    if kind == "contrast":
        if metric == "mp":
            return f"{b} higher MP" if up else f"{b} lower MP"
        if metric == CAP:
            return f"{b} higher CAP" if up else f"{b} lower CAP"
        return f"{b} leaks more" if up else f"{b} leaks less"
    if metric == "mp":
        return f"costs less under {b}" if up else f"costs more under {b}"
    if metric == CAP:
        return f"gains more CAP under {b}" if up else f"gains less CAP under {b}"
    return f"protects less under {b}" if up else f"protects more under {b}"


def baseline_table(units: pd.DataFrame) -> pd.DataFrame:
    """Per (context, metric, arm): the undefended mean, its interval half, n, se."""
    none = units[units["defense"] == "none"]
    keys = ["context", "metric", "attack_type", "arm"]
    out = cell_stats(none, keys, "value", "se")
    return out[[*keys, "mean", "half", "n", "se_test"]]


def chance_both(baselines: pd.DataFrame) -> pd.DataFrame:
    """(context, attack) whose undefended advantage is at chance in both arms."""
    adv = baselines[~baselines["metric"].astype(str).isin(["mp", CAP])]  # advantages only
    chance = adv.assign(
        chance=at_chance(adv["mean"], adv["half"], adv["n"], adv["se_test"]).to_numpy()
    )
    both = chance.groupby(["context", "metric"], sort=False, observed=True)["chance"]
    both = both.agg(["all", "size"])
    both = both[(both["all"]) & (both["size"] == 2)].reset_index()
    return both[["context", "metric"]]
