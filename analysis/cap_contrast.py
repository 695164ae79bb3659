"""CAP as a metric of the contrasts: "does B give a better privacy-utility trade-off than A,
and does each defense gain as much CAP under B?"

Why: FedHSSL summarizes a setting by its CAP (``cap.py``), and two CAPs 0.03 apart from
three seeds may be noise. CAP enters ``contrast.contrasts`` as one more metric (``cap``),
paired over seeds like MP and the advantages, so its Δ and ΔΔ get the same interval, p,
Holm family and verdict.

Per (context, arm, defense, seed): CAP = the mean over the defense's label-inference (LI)
attacks of the mean over its strengths of U·E, U the training's clean MP and E = 1 − AP —
``cap.cap_table``'s "all LI" CAP, one seed at a time. The undefended cell's CAP is its U·E
(v = 1), so the interaction reads "the defense's CAP gain under B minus its gain under A".

Test-set error of one row's U·E (delta method): sqrt((E·se_U)² + (U·se_AP)²), se_AP the
advantage's error (AP and its advantage differ by a constant). A seed's CAP error is the
mean of its rows' errors: they are scored on the same test rows, so taken as fully
correlated (the conservative side, as ``ranking.chance_aware`` does).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.cap import LABEL_TYPES
from analysis.compare import Arms
from analysis.load import as_text

METRIC = "cap"
TYPE = "CAP"  # the attack_type column of CAP rows (no attack type: a summary over LI)


def cap_units(dcs: pd.DataFrame, arms: Arms) -> pd.DataFrame:
    """``contrast.seed_units``' columns for CAP: one row per (context, arm, defense, seed),
    ``defense_param`` NaN (CAP spans the defense's strengths). Empty without LI rows."""
    side, context, labels = arms
    columns = ["context", "metric", "attack_type", "defense", "defense_param", "arm", "seed"]
    is_li = (
        (dcs["status"] == "ok").to_numpy()
        & (dcs["attack"] != "none").to_numpy()  # on the categories' codes: no str per row
        & dcs["attack_type"].isin(LABEL_TYPES).to_numpy()
        & dcs["ap"].notna().to_numpy()
        & dcs["mp_dcs"].notna().to_numpy()
        & (side >= 0)
    )
    if not is_li.any():
        return pd.DataFrame(columns=[*columns, "value", "se"])
    used = ["mp_dcs", "ap", "mp_se", "ap_advantage_se", "defense", "attack", "defense_param",
            "seed"]  # fmt: skip
    rows = dcs.loc[is_li, [c for c in used if c in dcs.columns]]  # not a copy of every column
    u = rows["mp_dcs"].to_numpy(dtype=float)
    e = 1.0 - rows["ap"].to_numpy(dtype=float)
    se_u = np.nan_to_num(rows["mp_se"].to_numpy(dtype=float)) if "mp_se" in rows else 0.0
    se_ap = rows["ap_advantage_se"].to_numpy(dtype=float) if "ap_advantage_se" in rows else 0.0
    frame = pd.DataFrame(
        {
            "context": context[is_li],
            "arm": side[is_li],
            "defense": as_text(rows["defense"]),
            "attack": as_text(rows["attack"]),
            "strength": rows["defense_param"].to_numpy(dtype=float),
            "seed": rows["seed"].to_numpy(),
            "ue": u * e,
            "se": np.hypot(e * se_u, u * np.nan_to_num(se_ap)),
        }
    )
    cell = ["context", "arm", "defense", "seed"]
    # U·E per strength (several rows of one attack and strength: their mean), then CAP per
    # attack over strengths, then the mean over the LI attacks (cap_table's "all LI")
    per_strength = frame.groupby([*cell, "attack", "strength"], dropna=False, sort=False)
    per_attack = per_strength[["ue", "se"]].mean().groupby(level=[*cell, "attack"], sort=False)
    out = per_attack.mean().groupby(level=cell, sort=False).mean().reset_index()
    out = out.rename(columns={"ue": "value"})
    out["context"] = pd.Categorical.from_codes(out["context"].to_numpy(), labels)
    out["arm"] = np.where(out["arm"].to_numpy() == 0, "a", "b")
    out["metric"] = METRIC
    out["attack_type"] = TYPE
    out["defense_param"] = np.nan
    return out[[*columns, "value", "se"]]


def cap_attacks(dcs: pd.DataFrame) -> list[str]:
    """The attack labels a CAP row averages (what ``baselines.not_a_baseline`` checks)."""
    li = dcs["attack_type"].isin(LABEL_TYPES) & (dcs["attack"] != "none")
    return sorted(pd.unique(as_text(dcs.loc[li, "attack"])))
