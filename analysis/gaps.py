"""DCS gaps between two settings of one axis, per (attack, defense, strength, seed) point:
the distribution VFLAIR plots (splitVFL − aggVFL, FedBCD − FedSGD), chance-aware.

Every gap is **B − A** of ``--compare AXIS=A:B`` (``analysis/compare.py``): a point of A
pairs with the point of B whose spec differs only in the axis (same seed, defense,
strength, attack and context). Two gaps per pair:

- ``ca_gap``: of the chance-aware DCS (the advantage over a no-information guess in place
  of AP), the one the summary and the figure lead with;
- ``gap``: VFLAIR's DCS on the raw AP, kept beside it (labelled so) for comparison with
  the paper.

An attack at chance undefended in both arms (``contrast.chance_both``) says nothing about
either: its pairs are kept in the CSV with ``at_chance_both`` set, left out of the
summary and the figure, and named there.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.compare import Arms, Compare, parse_compare, row_arms
from analysis.uncertainty import MIN_SEEDS, t_quantile
from trainables.errors import ConfigError

__all__ = ["Compare", "dcs_gaps", "gap_summary", "parse_compare"]

KEYS = ["context", "attack", "attack_type", "defense", "defense_param", "defense_party", "seed"]
CODED = ("attack", "attack_type", "defense", "defense_party")  # grouped as integer codes
TYPES = ("LI", "FR", "TB", "NTB")


def dcs_gaps(
    dcs: pd.DataFrame,
    compare: Compare,
    left_out: pd.DataFrame | None = None,
    arms: Arms | None = None,
) -> pd.DataFrame:
    """One row per pair: the keys, dcs_a, dcs_b, gap, ca_dcs_a, ca_dcs_b, ca_gap and
    ``at_chance_both``. ``left_out``: (context, metric) at chance in both arms, as
    ``contrast.contrasts`` found them (computed here when not given); ``arms``:
    ``row_arms(dcs, compare)`` when the caller has it already."""
    side, context, labels = arms if arms is not None else row_arms(dcs, compare)
    scored = (dcs["dcs"].notna() & (dcs["status"] == "ok")).to_numpy()
    used = [*CODED, "defense_param", "seed", "dcs", "ca_dcs"]  # not a copy of every column
    rows = dcs.loc[scored, [c for c in used if c in dcs.columns]]
    arms_of, contexts = side[scored], context[scored]
    if not (arms_of == 0).any() or not (arms_of == 1).any():
        missing = compare.a if not (arms_of == 0).any() else compare.b
        raise ConfigError(
            f"--compare {compare.text}: no scored attack rows with {compare.axis}={missing!r}"
        )
    cats = {c: pd.Categorical(rows[c].astype("category")) for c in CODED if c in rows.columns}
    frame = pd.DataFrame(
        {
            "context": contexts,
            **{c: cat.codes for c, cat in cats.items()},
            "defense_param": rows["defense_param"].to_numpy(dtype=float),
            "seed": rows["seed"].to_numpy(),
            "arm": arms_of,
            "dcs": rows["dcs"].to_numpy(dtype=float),
            "ca_dcs": rows["ca_dcs"].to_numpy(dtype=float),
        }
    )[arms_of >= 0]
    keys = [k for k in KEYS if k in frame.columns]
    means = frame.groupby([*keys, "arm"], dropna=False, sort=False)[["dcs", "ca_dcs"]].mean()
    means = means.reset_index()
    a = means[means["arm"] == 0].drop(columns="arm")
    b = means[means["arm"] == 1].drop(columns="arm")
    out = a.merge(b, on=keys, suffixes=("_a", "_b"))
    if left_out is None:
        from analysis.contrast import baseline_table, chance_both, seed_units

        left_out = chance_both(baseline_table(seed_units(dcs, compare, (side, context, labels))))
    dropped = set(zip(left_out["context"].astype(str), left_out["metric"].astype(str), strict=True))
    attacks = np.asarray(cats["attack"].categories.astype(str), dtype=object)
    pair = out["context"].to_numpy() * len(attacks) + out["attack"].to_numpy()
    flagged = {
        p
        for p in np.unique(pair)
        if (labels[p // len(attacks)], attacks[p % len(attacks)]) in dropped
    }
    out["context"] = np.asarray(labels, dtype=object)[out["context"].to_numpy()]
    for column, cat in cats.items():  # codes back to their labels
        out[column] = np.asarray(cat.categories.astype(str), dtype=object)[out[column].to_numpy()]
    if "defense_party" not in out.columns:
        out["defense_party"] = ""
    out["gap"] = out["dcs_b"] - out["dcs_a"]
    out["ca_gap"] = out["ca_dcs_b"] - out["ca_dcs_a"]
    out["at_chance_both"] = np.isin(pair, list(flagged))
    return out[[*KEYS, "dcs_a", "ca_dcs_a", "dcs_b", "ca_dcs_b", "gap", "ca_gap", "at_chance_both"]]


def type_order(kinds: set[str]) -> list[str]:
    """VFLAIR's attack types first, in its order, then any others."""
    return [k for k in TYPES if k in kinds] + sorted(kinds - set(TYPES))


def gap_summary(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per attack type (and ``all``), over the pairs not at chance in both arms: n pairs,
    n seeds, the mean chance-aware gap with a 95 % interval over seeds (per seed the mean
    of its pairs, then a t interval: the points of one seed share its trainings, so they
    are not independent), its median and share > 0; VFLAIR's raw-AP gap beside it; the
    attacks left out as at chance in both arms."""
    kept = pairs[~pairs["at_chance_both"]]
    kinds = set(pd.unique(kept["attack_type"]))  # not set(column): a str per row, 1 s at 1M
    parts = [(k, kept[kept["attack_type"] == k]) for k in type_order(kinds)]
    parts.append(("all", kept))
    rows = []
    for kind, part in parts:
        out_of = pairs[pairs["at_chance_both"]]
        if kind != "all":
            out_of = out_of[out_of["attack_type"] == kind]
        left_out = set(pd.unique(out_of["attack"].astype(str)))
        ca = part[part["ca_gap"].notna()]
        per_seed = ca.groupby("seed")["ca_gap"].mean()
        n = len(per_seed)
        half = float(t_quantile(n - 1) * per_seed.std() / np.sqrt(n)) if n >= MIN_SEEDS else np.nan
        mean = float(ca["ca_gap"].mean()) if len(ca) else np.nan
        rows.append(
            {
                "attack_type": kind,
                "n_pairs": len(part),
                "n_seeds": int(part["seed"].nunique()),
                "mean_ca_gap": mean,
                "ca_gap_lo": mean - half,
                "ca_gap_hi": mean + half,
                "median_ca_gap": float(ca["ca_gap"].median()) if len(ca) else np.nan,
                "share_positive_ca": float((ca["ca_gap"] > 0).mean()) if len(ca) else np.nan,
                "mean_gap_vflair": float(part["gap"].mean()) if len(part) else np.nan,
                "share_positive_vflair": float((part["gap"] > 0).mean()) if len(part) else np.nan,
                "left_out_at_chance": ";".join(sorted(left_out)),
            }
        )
    return pd.DataFrame(rows)
