"""The answer on one screen: per scenario, each defense cell's MP and its cost, each
attack's advantage over chance, the chance-aware C-DCS and its rank group, and which
attacks were at chance even undefended (a comparison that says nothing about defenses).

``python -m analysis`` prints it, ``report/index.md`` / ``index.html`` hold it with every
figure, and the sweep's end-of-run summary quotes its groups (``best_lines``): one set of
numbers.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.uncertainty import MIN_SEEDS, Z, cell_stats, rank_groups

CELL = ["scenario", "defense", "defense_param"]
COLLAPSE = 0.99  # share of rows given one prediction above which an attack "collapsed"
MAX_ATTACK_COLUMNS = 3  # more attacks in a scenario: one column per attack type instead
MAX_ROWS = 20  # rows per scenario on screen (index.md has them all)
CHANCE_COLUMNS = ("scenario", "attack", "adv", "adv_half", "n_seeds", "ap", "ap_chance")
# what attack_table and cell_table read of a scored row, besides its cell and attack
SCORED = ("adv", "ap_advantage_se", "ap", "ap_chance", "ap_collapse", "ca_dcs", "ca_dcs_se",
          "dcs", "mp_star", "mp_dcs", "mp_se")  # fmt: skip


@dataclass
class Answer:
    """The tables behind the printed answer (also written as CSV)."""

    by_attack: pd.DataFrame  # one row per (scenario, attack, defense cell)
    cells: pd.DataFrame  # one row per (scenario, defense cell): MP, cost, ca-C-DCS, group
    at_chance: pd.DataFrame  # (scenario, attack) whose undefended advantage is not above 0
    notes: list[str] = field(default_factory=list)


def build_answer(dcs: pd.DataFrame, ranking: pd.DataFrame) -> Answer:
    """From the prepared records (``report.prepare``) and ``ranking_table``'s output."""
    used = [*dict.fromkeys([*CELL, "attack", "attack_type", "seed", *SCORED])]
    scored = dcs.loc[dcs["dcs"].notna(), used]  # not a copy of every column of every row
    notes = []
    missing = int((dcs["dcs"].notna() & dcs["adv"].isna()).sum())
    if missing:
        notes.append(
            f"{missing} scored attack rows have no chance baseline (recorded before "
            "ap_chance existed): they count in VFLAIR's DCS only; re-run them for the rest"
        )
    by_attack = attack_table(scored)
    cells = cell_table(scored, ranking)
    return Answer(by_attack, cells, chance_table(by_attack), notes)


def _per_seed(rows: pd.DataFrame, keys: list[str], columns: list[str]) -> pd.DataFrame:
    grouped = rows.groupby([*keys, "seed"], observed=True, dropna=False, sort=False)
    return grouped[columns].mean().reset_index()


def attack_table(scored: pd.DataFrame) -> pd.DataFrame:
    """Per (scenario, attack, cell): advantage with interval, AP and chance, collapses,
    ca-DCS with its rank group among the cells of the same scenario and attack."""
    keys = ["scenario", "attack", "attack_type", "defense", "defense_param"]
    rows = scored.assign(collapsed=(scored["ap_collapse"].astype(float) >= COLLAPSE).astype(float))
    seeds = _per_seed(
        rows,
        keys,
        ["adv", "ap_advantage_se", "ap", "ap_chance", "collapsed", "ca_dcs", "ca_dcs_se", "dcs"],
    )
    grouped = seeds.groupby(keys, observed=True, dropna=False, sort=False)
    out = grouped[["ap", "ap_chance", "ca_dcs", "dcs"]].mean()
    out["n_seeds"] = grouped["dcs"].count()
    out["collapsed_seeds"] = grouped["collapsed"].sum()
    out = out.reset_index()
    adv = cell_stats(seeds, keys, "adv", "ap_advantage_se")
    adv = adv[[*keys, "mean", "half", "se_test"]].rename(
        columns={"mean": "adv", "half": "adv_half", "se_test": "adv_se"}
    )
    out = out.merge(adv, on=keys, how="left")
    seeds["scenario_attack"] = _joined(seeds["scenario"], seeds["attack"])
    groups = rank_groups(
        seeds, "scenario_attack", ["defense", "defense_param"], "ca_dcs", "ca_dcs_se"
    )
    pair = groups["scenario_attack"].astype(str)
    groups["scenario"] = pair.str.partition("\0")[0] if len(groups) else pair
    groups["attack"] = pair.str.partition("\0")[2] if len(groups) else pair
    groups = groups.drop(columns="scenario_attack")
    out["scenario"], out["attack"] = out["scenario"].astype(str), out["attack"].astype(str)
    out = out.merge(groups, on=["scenario", "attack", "defense", "defense_param"], how="left")
    out = out.rename(columns={"group": "ca_group", "tied_with_best": "ca_tied"})
    out["ca_tied"] = out["ca_tied"].astype("boolean").fillna(False).astype(bool)
    return out.sort_values(["scenario", "attack", "ca_group", "ca_dcs"], ascending=[1, 1, 1, 0])


def _joined(left: pd.Series, right: pd.Series) -> pd.Categorical:
    """``left.astype(str) + "\0" + right.astype(str)`` as a categorical (NaN where either is
    missing), each distinct pair joined once: a million per-seed rows hold a few dozen
    (scenario, attack) pairs, and a string per row took over a second."""
    a, b = pd.Categorical(left), pd.Categorical(right)
    n = max(len(b.categories), 1)
    pairs = np.where((a.codes < 0) | (b.codes < 0), -1, a.codes.astype(np.int64) * n + b.codes)
    used, inverse = np.unique(pairs, return_inverse=True)  # -1 (a missing side) sorts first
    present = used[used >= 0]
    names = [f"{a.categories[p // n]}\0{b.categories[p % n]}" for p in present]
    codes = inverse - (len(used) - len(present))  # rows with a missing side stay at -1
    return pd.Categorical.from_codes(codes, categories=names)


def cell_table(scored: pd.DataFrame, ranking: pd.DataFrame) -> pd.DataFrame:
    """Per (scenario, cell): MP with interval, its cost against no defense, ca-C-DCS with
    interval and group, VFLAIR's C-DCS and rank."""
    rows = scored.assign(cost=scored["mp_star"] - scored["mp_dcs"])
    seeds = _per_seed(rows, CELL, ["mp_dcs", "mp_se", "cost"])
    mp = cell_stats(seeds, CELL, "mp_dcs", "mp_se")
    out = mp[[*CELL, "mean", "n", "half"]].rename(
        columns={"mean": "mp", "n": "n_seeds", "half": "mp_half"}
    )
    cost = seeds.groupby(CELL, observed=True, dropna=False, sort=False)["cost"].mean()
    out = out.merge(cost.reset_index(), on=CELL, how="left")
    out["scenario"] = out["scenario"].astype(str)
    keep = ["scenario", "defense", "strength", "cdcs", "rank"]
    keep += [c for c in ranking.columns if c.startswith("ca_")]
    ranked = ranking[[c for c in keep if c in ranking.columns]].rename(
        columns={"strength": "defense_param"}
    )
    ranked = ranked.assign(scenario=ranked["scenario"].astype(str))
    out = out.merge(ranked, on=CELL, how="left")
    for column in ("ca_cdcs", "ca_cdcs_lo", "ca_cdcs_hi", "ca_group"):  # old records: none
        if column not in out.columns:
            out[column] = np.nan
    if "ca_tied" not in out.columns:
        out["ca_tied"] = False
    return out.sort_values(["scenario", "ca_group", "ca_cdcs"], ascending=[1, 1, 0])


def chance_table(by_attack: pd.DataFrame) -> pd.DataFrame:
    """(scenario, attack) whose undefended advantage cannot be told apart from 0: its
    interval (n >= 3) reaches 0, or (fewer seeds) it is within z test-set errors of 0."""
    none = by_attack[by_attack["defense"].astype(str) == "none"]
    if none.empty:
        return pd.DataFrame(columns=[*CHANCE_COLUMNS])
    enough = none["n_seeds"] >= MIN_SEEDS
    reaches = enough & (none["adv"] - none["adv_half"] <= 0)
    near = ~enough & (none["adv"] <= Z * none["adv_se"].fillna(0.0))
    at = none[reaches | near]
    return at[[*CHANCE_COLUMNS]]


def pm_text(mean: float, half: float, n: int, digits: int = 3) -> str:
    if not np.isfinite(mean):
        return "-"
    text = f"{mean:.{digits}f}"
    return text + (f"±{half:.{digits}f}" if np.isfinite(half) else f" (n={n})")


def strength_text(value: float | None) -> str:
    return "-" if value is None or pd.isna(value) else f"{float(value):g}"


@dataclass
class ScenarioTable:
    """One scenario's answer as cells of text: what the screen and index.md both show."""

    title: str
    chance: list[str]  # one line per attack at chance even undefended
    head: list[str]
    rows: list[list[str]]
    legend: list[str]


def scenario_table(answer: Answer, scenario: str) -> ScenarioTable:
    """The defense cells of one scenario, best group first."""
    cells = answer.cells[answer.cells["scenario"] == scenario]
    attacks = answer.by_attack[answer.by_attack["scenario"] == scenario]
    names = sorted(attacks["attack"].unique())
    by_type = len(names) > MAX_ATTACK_COLUMNS
    columns = sorted(attacks["attack_type"].astype(str).unique()) if by_type else names
    seeds = int(cells["n_seeds"].max()) if len(cells) else 0
    chance = [
        f"at chance even undefended: {row.attack} (advantage "
        f"{pm_text(row.adv, row.adv_half, row.n_seeds)}, AP {row.ap:.3f} vs chance "
        f"{row.ap_chance:.3f}): its column says nothing about the defenses"
        for row in answer.at_chance[answer.at_chance["scenario"] == scenario].itertuples()
    ]
    head = ["defense", "strength", "MP", "cost"]
    head += [f"{c} adv" for c in columns] + ["ca-C-DCS", "group", "VFLAIR C-DCS (rank)"]
    texts = attack_texts(attacks, "attack_type" if by_type else "attack", by_type)
    any_collapse = any(t.endswith("c") for t in texts.values())
    rows = []
    for cell in cells.itertuples():
        where = (str(cell.defense), strength_text(cell.defense_param))
        row = [
            *where,
            pm_text(cell.mp, cell.mp_half, cell.n_seeds),
            f"{cell.cost:+.3f}" if str(cell.defense) != "none" else "",
        ]
        row += [texts.get((*where, column), "-") for column in columns]
        ca = getattr(cell, "ca_cdcs", np.nan)
        lo, hi = getattr(cell, "ca_cdcs_lo", np.nan), getattr(cell, "ca_cdcs_hi", np.nan)
        row.append(pm_text(ca, (hi - lo) / 2, cell.n_seeds) if np.isfinite(ca) else "-")
        group = getattr(cell, "ca_group", np.nan)
        tied = bool(getattr(cell, "ca_tied", False)) and str(cell.defense) != "none"
        row.append(("-" if not np.isfinite(group) else f"{int(group)}") + ("=" if tied else ""))
        rank = "" if not np.isfinite(cell.rank) else f" ({int(cell.rank)})"
        row.append("-" if not np.isfinite(cell.cdcs) else f"{cell.cdcs:.3f}{rank}")
        rows.append(row)
    title = f"{scenario}  (up to {seeds} seed{'s' * (seeds != 1)} per cell)"
    return ScenarioTable(title, chance, head, rows, legend(by_type, any_collapse, seeds))


def attack_texts(attacks: pd.DataFrame, key: str, by_type: bool) -> dict[tuple, str]:
    """(defense, strength text, attack or type) -> the advantage as printed, ``c`` appended
    where the attack collapsed in some seed; one pass over the scenario's attack rows."""
    out: dict[tuple, str] = {}
    frame = attacks.assign(_s=[strength_text(v) for v in attacks["defense_param"]])
    groups = frame.groupby(["defense", "_s", key], observed=True, sort=False).indices
    # plain arrays, indexed by each group's row positions: a pandas sub-frame per group
    # cost about 0.1 s per scenario table, twice per report (screen and index page)
    adv = frame["adv"].to_numpy(dtype=float)
    half = frame["adv_half"].to_numpy(dtype=float)
    n_seeds = frame["n_seeds"].to_numpy()
    collapsed = frame["collapsed_seeds"].to_numpy(dtype=float)
    for (defense, strength, column), rows in groups.items():
        mark = "c" if np.nansum(collapsed[rows]) > 0 else ""
        if by_type:
            text = f"{_nanmean(adv[rows]):.3f}"
        else:
            first = rows[0]
            text = pm_text(adv[first], half[first], int(n_seeds[first]))
        out[(str(defense), strength, str(column))] = text + mark
    return out


def _nanmean(values: np.ndarray) -> float:
    """``pd.Series.mean`` of ``values`` step for step (NaNs as 0 in the sum, left out of
    the count; NaN when none is left), so the printed digits are the ones it gave."""
    missing = np.isnan(values)
    count = len(values) - int(missing.sum())
    return float(np.where(missing, 0.0, values).sum() / count) if count else float("nan")


def scenario_lines(table: ScenarioTable, max_rows: int | None = MAX_ROWS) -> list[str]:
    """The printed table of one scenario (plain text, fixed-width columns)."""
    shown = table.rows if max_rows is None else table.rows[:max_rows]
    widths = [max(len(r[i]) for r in [table.head, *shown]) for i in range(len(table.head))]
    lines = [f"== {table.title} =="] + [f"  {line}" for line in table.chance]
    for r in [table.head, *shown]:
        cells = "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True))
        lines.append(("  " + cells).rstrip())
    if len(table.rows) > len(shown):
        lines.append(f"  ... {len(table.rows) - len(shown)} more rows in report/index.md")
    return lines


def legend_of(tables: list[ScenarioTable]) -> list[str]:
    """The tables' legend lines, each once (printed after the last table)."""
    return list(dict.fromkeys(line for t in tables for line in t.legend))


def legend(by_type: bool, any_collapse: bool, seeds: int) -> list[str]:
    out = [
        "MP: main-task accuracy; cost: MP lost against no defense (same seeds). adv: attack "
        "advantage over a no-information guess on the same rows (0 = none, 1 = perfect)"
        + (", mean over the type's attacks" if by_type else "")
        + ". ±: 95% CI over seeds with the test-set error (n >= 3 only). ca-C-DCS: VFLAIR's "
        "C-DCS on the advantage. group 1: cannot be told apart from the best (paired over "
        "seeds); '=': exactly tied with the best."
    ]
    if any_collapse:
        out.append(
            f"c: the attack predicted one class for >= {COLLAPSE:.0%} of rows in some seed "
            "(it learned nothing there; its advantage is 0, whichever class it picked)"
        )
    if seeds < MIN_SEEDS:
        out.append(f"fewer than {MIN_SEEDS} seeds: no intervals and no groups")
    return out


def answer_lines(answer: Answer, max_rows: int | None = MAX_ROWS) -> list[str]:
    """Every scenario's table, then the legend once, then the notes."""
    out: list[str] = []
    tables = [scenario_table(answer, str(s)) for s in answer.cells["scenario"].unique()]
    for table in tables:
        out += scenario_lines(table, max_rows)
    out += [part for line in legend_of(tables) for part in textwrap.wrap(line, 96)]
    return out + [f"note: {n}" for n in answer.notes]


def best_lines(answer: Answer, chance: bool = True, scenario: str | None = None) -> list[str]:
    """One line per scenario (only ``scenario``'s when given): the cells of group 1 (ties
    named), for the sweep summary; then the attacks at chance even undefended, unless
    ``chance`` is False (the summary says so already, in its line for that attack)."""
    out = []
    cells_of = answer.cells
    if scenario is not None:
        cells_of = cells_of[cells_of["scenario"].astype(str) == scenario]
    for name, cells in cells_of.groupby("scenario", sort=False, observed=True):
        defended = cells[cells["ca_cdcs"].notna()]
        if defended.empty:
            continue
        top = defended[defended["ca_group"] == 1]
        tied = defended[defended["ca_tied"].fillna(False).astype(bool)]
        names = lambda f: ", ".join(  # noqa: E731
            f"{d}@{strength_text(p)}" if str(d) != "none" else "none"
            for d, p in zip(f["defense"], f["defense_param"], strict=True)
        )
        best = defended["ca_cdcs"].max()
        if len(top):
            line = f"{name}: best chance-aware C-DCS {best:.4f}; "
            line += f"group 1 ({len(top)}): {names(top)}"
        else:
            line = f"{name}: best chance-aware C-DCS {best:.4f} (< 3 seeds: no groups)"
        if len(tied) > 1:
            line += f"; tied at exactly {best:.4f}: {names(tied)}"
        else:
            line += f"; highest: {names(defended.loc[[defended['ca_cdcs'].idxmax()]])}"
        out.append(line)
    for row in answer.at_chance.itertuples() if chance else ():
        if scenario is None or str(row.scenario) == scenario:
            out.append(f"{row.scenario}: {row.attack} was at chance even undefended")
    return out
