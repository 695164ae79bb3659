"""CAP, calibrated averaged performance (Fan et al.): one privacy-utility number per defense.

CAP = (1/v) Σ_λ U(model under strength λ) · E(λ), over the defense's v strengths, with
U = main-task MP (the training's clean MP) and E = 1 − AP for label attacks (LI type: AP
is the label-recovery accuracy). Computed per (scenario, defense, attack) — each strength's
U·E first averaged over seeds — plus the mean over the defense's LI attacks. Where the
records do not allow it (a defense with no LI attack rows), the CSV keeps a row with an
empty CAP and a note saying why.
"""

from __future__ import annotations

import pandas as pd

LABEL_TYPES = ("LI",)
KEYS = ["scenario", "defense"]


def cap_table(dcs: pd.DataFrame) -> pd.DataFrame:
    """cap.csv rows: scenario, defense, attack ("all LI" for the mean), cap, strengths, its
    95 % interval over seeds (``cap_lo``, ``cap_hi``, ``n_seeds``; ``cap_intervals``), note."""
    cols = [*KEYS, "defense_param", "attack", "attack_type", "ap", "mp_dcs", "seed"]
    cols = [c for c in cols if c in dcs.columns]
    ok = dcs.loc[(dcs["status"] == "ok") & (dcs["attack"] != "none"), cols]  # copy few columns
    label = ok[ok["attack_type"].isin(LABEL_TYPES) & ok["ap"].notna() & ok["mp_dcs"].notna()]
    frame = label[[c for c in (*KEYS, "defense_param", "attack", "seed") if c in cols]].copy()
    frame["ue"] = label["mp_dcs"].to_numpy() * (1.0 - label["ap"].to_numpy())
    per_strength = frame.groupby([*KEYS, "attack", "defense_param"], observed=True, dropna=False)[
        "ue"
    ].mean()
    per_attack = per_strength.groupby(level=[*KEYS, "attack"], observed=True, dropna=False)
    table = pd.DataFrame({"cap": per_attack.mean(), "n_strengths": per_attack.size()})
    table = table.reset_index()
    overall = table.groupby(KEYS, observed=True, dropna=False).agg(
        cap=("cap", "mean"), n_strengths=("n_strengths", "max")
    )
    overall = overall.reset_index().assign(attack="all LI")
    table = pd.concat([table, overall], ignore_index=True)
    table["note"] = ""
    defended = ok[KEYS].drop_duplicates()
    merged = defended.merge(table[KEYS].drop_duplicates(), how="left", indicator=True)
    missing = merged[merged["_merge"] == "left_only"][KEYS]
    if len(missing):
        missing = missing.assign(
            attack="all LI",
            cap=float("nan"),
            n_strengths=0,
            note="undefined: no label-inference (LI) attack rows; CAP needs E = 1 - label AP",
        )
        table = pd.concat([table, missing], ignore_index=True)
    table.loc[table["defense"].astype(str) == "none", "note"] = "undefended baseline (v = 1)"
    table = cap_intervals(table, frame)
    return table.sort_values([*KEYS, "attack"]).reset_index(drop=True)


def cap_intervals(table: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """``table`` with ``n_seeds``, ``cap_lo`` and ``cap_hi``: CAP's 95 % interval over
    seeds. Per seed, CAP over the defense's strengths (its U·E at each strength, that
    seed); the interval is t over those per-seed CAPs (``uncertainty.half_width``, none
    below 3 seeds), centred on ``cap``. Why: FedHSSL summarizes a defense by its CAP, and
    two CAPs 0.03 apart from 3 seeds may be noise; the interval says whether they are."""
    from analysis.uncertainty import half_width

    if "seed" not in frame.columns or not len(frame):
        return table.assign(n_seeds=0, cap_lo=float("nan"), cap_hi=float("nan"))
    keys = [*KEYS, "attack", "seed"]
    per_seed = frame.groupby(keys, observed=True, dropna=False)["ue"].mean().reset_index()
    every = per_seed.groupby([*KEYS, "seed"], observed=True, dropna=False)["ue"].mean()
    every = every.reset_index().assign(attack="all LI")
    seeds = pd.concat([per_seed, every], ignore_index=True)
    stats = seeds.groupby([*KEYS, "attack"], observed=True, dropna=False)["ue"].agg(
        n_seeds="count", std="std"
    )
    stats = stats.reset_index()
    stats["half"] = half_width(stats["std"].to_numpy(), stats["n_seeds"].to_numpy(), 0.0)
    out = table.merge(stats[[*KEYS, "attack", "n_seeds", "half"]], how="left")
    out["n_seeds"] = out["n_seeds"].fillna(0).astype(int)
    out["cap_lo"] = out["cap"] - out["half"]
    out["cap_hi"] = out["cap"] + out["half"]
    return out.drop(columns=["half"])
