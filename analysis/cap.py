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
    """cap.csv rows: scenario, defense, attack ("all LI" for the mean), cap, strengths, note."""
    cols = [*KEYS, "defense_param", "attack", "attack_type", "ap", "mp_dcs"]
    ok = dcs.loc[(dcs["status"] == "ok") & (dcs["attack"] != "none"), cols]  # copy few columns
    label = ok[ok["attack_type"].isin(LABEL_TYPES) & ok["ap"].notna() & ok["mp_dcs"].notna()]
    frame = label[[*KEYS, "defense_param", "attack"]].copy()
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
    return table.sort_values([*KEYS, "attack"]).reset_index(drop=True)
