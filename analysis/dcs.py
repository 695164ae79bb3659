"""DCS (VFLAIR eq. 1): each attack row's distance to the ideal defense (AP* = 0, MP* = MP
of the undefended twin), as vectorized pandas over the whole sweep.

Pairing (the lead's record semantics): a defended row and its undefended twin share
``setting_hash`` (the spec's hash without its defense fields) and ``attack``. The MP a
row stands for is the clean MP of its training (the ``attack='none'`` row of the same
``trial_id``) where one exists, else the row's own ``mp`` (training-time attacks, whose
file holds only the attack row: the MP of the model trained under attack). MP* is that MP
of the undefended row with the same (setting_hash, attack), falling back to the
undefended training's clean row. VFLAIR clips AP − AP* and MP* − MP at 0.

Chance-aware DCS (``ca_dcs``, docs/architecture.md, "Scores against their baseline"): the same
distance with the attack's *advantage* (``ap_advantage``: 0 = nothing beyond what a
no-information guess scores on the same rows, 1 = perfect) in place of AP. VFLAIR's DCS
reads an attack that guessed the minority class for every row (AP 0.24 on adult) as strong
protection and one that guessed the majority class (AP 0.76) as weak; both have advantage
0. ``ca_dcs_se`` is the test-set sampling error of ``ca_dcs`` (``dcs_se``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

AP_STAR = 0.0
DCS_COLUMNS = ("mp_dcs", "mp_star", "ap_gap", "mp_gap", "dcs", "adv", "ca_dcs", "ca_dcs_se")
# Columns records written before chance baselines lack (read as null): added as NaN.
CHANCE_COLUMNS = ("ap_chance", "ap_advantage", "ap_advantage_se", "ap_collapse", "mp_se")


def dcs_value(ap_gap: np.ndarray, mp_gap: np.ndarray, beta: float | np.ndarray) -> np.ndarray:
    """DCS = 1 / (1 + sqrt((1-β)·ΔAP² + β·ΔMP²)) for already clipped gaps (any shape)."""
    return 1.0 / (1.0 + np.sqrt((1.0 - beta) * ap_gap**2 + beta * mp_gap**2))


def dcs_se(adv_se: np.ndarray, mp_se: np.ndarray, distance: np.ndarray, beta: float) -> np.ndarray:
    """Test-set sampling error of a DCS: the error of the distance d, propagated through
    1 / (1 + d) (derivative -1 / (1 + d)^2).

    Why sqrt((1-β)·se_adv² + β·se_mp²) for the error of d: the delta method gives
    sqrt((1-β)²a²se_a² + β²m²se_m²) / d, which is at most that and undefined at d = 0
    (the ideal point, where a one-SE move still moves d by about this much); the bound
    keeps intervals honest there. MP*'s own error is left out: it is measured on the same
    test rows, so most of it cancels in MP* - MP.
    """
    spread = np.sqrt((1.0 - beta) * adv_se**2 + beta * mp_se**2)
    return spread / (1.0 + distance) ** 2


def clean_mp(df: pd.DataFrame) -> pd.Series:
    """Per row: the clean MP of its training, else its own MP (see the module docstring)."""
    clean = df.loc[df["attack"] == "none", ["trial_id", "mp"]]
    by_trial = clean.groupby("trial_id", observed=True)["mp"].first()
    mapped = df["trial_id"].map(by_trial).astype("float64")
    return mapped.fillna(df["mp"].astype("float64"))


def mp_star(df: pd.DataFrame, mp_dcs: pd.Series) -> pd.Series:
    """Per row: MP of the undefended twin on (setting_hash, attack), else its clean row.

    Keys are integer codes (setting code x attack code), so the lookup is one reindex.
    """
    setting = pd.Categorical(df["setting_hash"].astype("category"))
    attack = pd.Categorical(df["attack"].astype("category"))
    n_attacks = max(len(attack.categories), 1)
    key = setting.codes.astype(np.int64) * n_attacks + attack.codes
    undefended = (df["defense"] == "none").to_numpy() & (setting.codes >= 0)
    table = pd.Series(mp_dcs.to_numpy()[undefended]).groupby(key[undefended]).mean()
    star = table.reindex(key).to_numpy()
    if "none" in attack.categories:
        none_code = attack.categories.get_loc("none")
        fallback = table.reindex(setting.codes.astype(np.int64) * n_attacks + none_code)
        star = np.where(np.isnan(star), fallback.to_numpy(), star)
    return pd.Series(star, index=df.index, dtype="float64")


def add_dcs(df: pd.DataFrame, beta: float = 0.5) -> pd.DataFrame:
    """``df`` plus mp_dcs, mp_star, ap_gap, mp_gap, dcs (NaN where undefined).

    DCS is defined on ``status == 'ok'`` attack rows with an AP and a paired MP*; every
    other row keeps NaN (``none`` rows, failed trainings, rows with no undefended twin).
    """
    out = df.copy(deep=False)  # copy-on-write (pandas 3): adds columns only
    ok = (out["status"] == "ok").to_numpy()
    mp_dcs = clean_mp(out).where(ok)
    star = mp_star(out, mp_dcs).where(ok)
    ap = out["ap"].astype("float64")
    is_attack = (out["attack"] != "none").to_numpy()
    ap_gap = (ap - AP_STAR).clip(lower=0.0).where(is_attack & ok)
    mp_gap = (star - mp_dcs).clip(lower=0.0).where(is_attack)
    out["mp_dcs"] = mp_dcs
    out["mp_star"] = star
    out["ap_gap"] = ap_gap
    out["mp_gap"] = mp_gap
    out["dcs"] = dcs_value(ap_gap.to_numpy(), mp_gap.to_numpy(), beta)
    add_chance_aware(out, is_attack & ok, beta)
    return out


def add_chance_aware(out: pd.DataFrame, scored: np.ndarray, beta: float) -> None:
    """``adv``, ``ca_dcs`` and ``ca_dcs_se`` in place (NaN where a row has no advantage:
    clean rows, failed ones, records written before chance baselines)."""
    for name in CHANCE_COLUMNS:
        if name not in out.columns:
            out[name] = np.nan
    adv = out["ap_advantage"].astype("float64").where(scored)
    mp_gap = out["mp_gap"].to_numpy()
    out["adv"] = adv
    ca = dcs_value(adv.to_numpy(), mp_gap, beta)
    out["ca_dcs"] = ca
    distance = 1.0 / ca - 1.0
    adv_se = out["ap_advantage_se"].astype("float64").fillna(0.0).to_numpy()
    mp_se = out["mp_se"].astype("float64").fillna(0.0).to_numpy()
    out["ca_dcs_se"] = np.where(np.isnan(ca), np.nan, dcs_se(adv_se, mp_se, distance, beta))
