"""Worst-case leakage: every defense cell against its attackers' default settings and
against the settings they tuned on their own rows (``<attack>@adapted`` records,
``trainables/attacks/tuning.py``), and what changes in the ranking.

Two views of one set of records: the *default* view leaves the adapted records out (what
every other table reads, so an attack is never counted twice), the *worst-case* view puts
each training's adapted record in place of its default one (attacks that were not tuned
keep their default). Per attack and cell: the advantage at default and adapted with their
intervals, the chance-aware DCS on each and its rank group (1 = cannot be told apart from
the best cell). Per cell: the chance-aware C-DCS of both views, their groups, and per
scenario the Kendall τ between the two rankings. A cell "changes" when its rank group does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.answer import attack_table
from analysis.contrast_text import strength
from analysis.ranking import kendall_tau, ranking_table, seed_means
from trainables.results.labels import base_label, is_adapted

CELL = ["scenario", "defense", "defense_param"]


@dataclass
class WorstCase:
    """``attacks``: per (scenario, attack, cell) default vs adapted; ``cells``: per
    (scenario, cell) C-DCS default vs worst case; ``tau``: per scenario."""

    attacks: pd.DataFrame
    cells: pd.DataFrame
    tau: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, object]:
        """What summary.json says: τ per scenario and the cells whose group changed."""
        changed = self.cells[self.cells["group_changed"]]
        moved = self.attacks[self.attacks["group_changed"]]
        return {
            "kendall_tau": {r.scenario: _round(r.tau) for r in self.tau.itertuples()},
            "cells_changed": changed[["scenario", "defense", "defense_param"]].to_dict("records"),
            "attack_cells_changed": len(moved),
            "attack_cells": len(self.attacks),
        }


def _round(x: float) -> float | None:
    return None if pd.isna(x) else round(float(x), 4)


def adapted_mask(dcs: pd.DataFrame) -> np.ndarray:
    """Rows that are an adapted attack's record (label ``<attack>@adapted``)."""
    names = dcs["attack"].astype("category")  # one test per distinct label
    flags = np.array([is_adapted(str(c)) for c in names.cat.categories], dtype=bool)
    return flags[names.cat.codes.to_numpy()] if len(flags) else np.zeros(len(dcs), dtype=bool)


def default_view(dcs: pd.DataFrame) -> pd.DataFrame:
    """The records without the adapted ones (what the fixed-setting tables read)."""
    mask = adapted_mask(dcs)
    return dcs if not mask.any() else dcs[~mask]


def worst_view(dcs: pd.DataFrame) -> pd.DataFrame:
    """Each training's adapted record in place of its default one, labelled as the default
    (``pmc@adapted`` -> ``pmc``); attacks not tuned in a training keep their default."""
    mask = adapted_mask(dcs)
    adapted = dcs[mask].copy()
    adapted["attack"] = [base_label(a) for a in adapted["attack"].astype(str)]
    replaced = pd.MultiIndex.from_frame(adapted[["trial_id", "attack"]].astype(str))
    rest = dcs[~mask]
    keys = pd.MultiIndex.from_frame(rest[["trial_id", "attack"]].astype(str))
    rest = rest[~keys.isin(replaced)]
    out = pd.concat([rest.assign(attack=rest["attack"].astype(str)), adapted], ignore_index=True)
    return out


def worst_case(dcs: pd.DataFrame, weights: dict[str, float]) -> WorstCase | None:
    """The comparison, or None when no record is an adapted attack's."""
    mask = adapted_mask(dcs)
    if not mask.any():
        return None
    tuned = sorted({base_label(a) for a in dcs.loc[mask, "attack"].astype(str)})
    default, worst = default_view(dcs), worst_view(dcs)
    attacks = _attack_rows(default, worst, tuned)
    cells = _cell_rows(default, worst, weights)
    tau = cells.groupby("scenario", observed=True, sort=True).apply(_tau, include_groups=False)
    tau = tau.reset_index(name="tau") if len(cells) else pd.DataFrame(columns=["scenario", "tau"])
    counts = cells.groupby("scenario", observed=True, sort=True).size().rename("n_cells")
    tau = tau.merge(counts.reset_index(), on="scenario", how="left")
    notes = []
    worse = attacks[attacks["adv_adapted"] < attacks["adv_default"]]
    if len(worse):
        notes.append(
            f"{len(worse)} of {len(attacks)} attack cells score lower adapted than at default "
            "on the test rows: the attacker chose on its own held-out rows, which can mislead"
        )
    return WorstCase(attacks, cells, tau, notes)


def _scored(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["dcs"].notna()]


def _attack_rows(default: pd.DataFrame, worst: pd.DataFrame, tuned: list[str]) -> pd.DataFrame:
    keys = ["scenario", "attack", "attack_type", "defense", "defense_param"]
    cols = ["adv", "adv_half", "ca_dcs", "ca_group", "n_seeds"]
    a = attack_table(_scored(default[default["attack"].astype(str).isin(tuned)]))
    b = attack_table(_scored(worst[worst["attack"].astype(str).isin(tuned)]))
    a, b = (t.assign(attack=t["attack"].astype(str))[[*keys, *cols]] for t in (a, b))
    out = a.merge(b, on=keys, how="inner", suffixes=("_default", "_adapted"))
    out["gain"] = out["adv_adapted"] - out["adv_default"]
    out["group_changed"] = out["ca_group_default"] != out["ca_group_adapted"]
    return out.sort_values(["scenario", "attack", "ca_group_adapted", "ca_dcs_adapted"],
                           ascending=[1, 1, 1, 0]).reset_index(drop=True)  # fmt: skip


def _cell_rows(
    default: pd.DataFrame, worst: pd.DataFrame, weights: dict[str, float]
) -> pd.DataFrame:
    keep = ["scenario", "defense", "strength", "ca_cdcs", "ca_group"]
    tables = []
    for frame in (default, worst):
        table = ranking_table(frame, weights, seed_means(frame))
        for column in ("ca_cdcs", "ca_group"):  # records without baselines: none
            if column not in table.columns:
                table[column] = np.nan
        tables.append(table[keep].rename(columns={"strength": "defense_param"}))
    out = tables[0].merge(tables[1], on=CELL, how="outer", suffixes=("_default", "_worst"))
    out["scenario"] = out["scenario"].astype(str)
    out["ca_rank_default"] = out.groupby("scenario")["ca_cdcs_default"].rank(
        ascending=False, method="min"
    )
    out["ca_rank_worst"] = out.groupby("scenario")["ca_cdcs_worst"].rank(
        ascending=False, method="min"
    )
    out["group_changed"] = out["ca_group_default"] != out["ca_group_worst"]
    return out.sort_values(["scenario", "ca_rank_worst"]).reset_index(drop=True)


def _tau(cells: pd.DataFrame) -> float:
    both = cells[["ca_cdcs_default", "ca_cdcs_worst"]].dropna()
    if len(both) < 2:
        return float("nan")
    return kendall_tau(both["ca_cdcs_default"].to_numpy(), both["ca_cdcs_worst"].to_numpy())


def _pm(mean: float, half: float) -> str:
    if pd.isna(mean):
        return "-"
    return f"{mean:.3f}" + ("" if pd.isna(half) else f"±{half:.3f}")


def _group(value: float | None) -> str:
    return "-" if value is None or pd.isna(value) else str(int(value))


def worst_lines(worst: WorstCase, rows: int = 20) -> list[str]:
    """The screen's worst-case section: per scenario τ, the tuned attacks' advantage at
    default and adapted per cell with both rank groups, and the cells that moved."""
    lines = [
        "worst case: each tuned attack at its default setting and at the setting its attacker "
        "chose on its own held-out rows (C-DCS on the adapted attacks; 1 = best group)"
    ]
    for row in worst.tau.itertuples():
        tau = "-" if pd.isna(row.tau) else f"{row.tau:+.2f}"
        lines.append(f"{row.scenario}: Kendall tau, default vs worst-case ranking {tau} "
                     f"over {int(row.n_cells)} cells")  # fmt: skip
        mine = worst.attacks[worst.attacks["scenario"] == row.scenario]
        head = ["attack", "defense", "strength", "adv default", "adv adapted", "gain", "group"]
        body = []
        for r in mine.head(rows).itertuples():
            body.append([
                str(r.attack), str(r.defense), strength(r.defense_param),
                _pm(r.adv_default, r.adv_half_default), _pm(r.adv_adapted, r.adv_half_adapted),
                "-" if pd.isna(r.gain) else f"{r.gain:+.3f}",
                f"{_group(r.ca_group_default)}->{_group(r.ca_group_adapted)}"
                + (" *" if r.group_changed else ""),
            ])  # fmt: skip
        lines += _table(head, body)
        if len(mine) > rows:
            lines.append(f"  ... {len(mine) - rows} more in worst_case_attacks.csv")
        cells = worst.cells[worst.cells["scenario"] == row.scenario]
        cells = cells[cells["group_changed"]]
        moved = [
            f"{c.defense}{'' if pd.isna(c.defense_param) else ' ' + strength(c.defense_param)}"
            f" ({_group(c.ca_group_default)}->{_group(c.ca_group_worst)})"
            for c in cells.itertuples()
        ]
        lines.append("  C-DCS rank group changed: " + (", ".join(moved) if moved else "none"))
    lines += worst.notes
    return lines


def _table(head: list[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in (head, *body)]  # fmt: skip
