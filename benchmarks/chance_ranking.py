"""``python -m benchmarks.chance_ranking [--results DIR]``: how much VFLAIR's ranking and
the chance-aware one disagree on a real sweep, and whether a collapsed attack still
reads as protection. Prints one JSON object.

Runs ``search_spaces/trust.yaml`` (G-DP, MID, GS + none against PMC and NS on adult and
breast_cancer, aggVFL and splitVFL, 3 seeds; about 20 min on 2 cores) into ``--results``
(resuming: trainings already recorded there are not run again), then builds the report
in-process and measures, per scenario:

- ``cells``, ``rank_differs``: cells whose position in VFLAIR's C-DCS order differs from
  their position in the chance-aware order; ``kendall_tau`` between the two orders;
- ``top_differs``: VFLAIR's first cell is not in the chance-aware group 1;
- ``collapsed_above``: (attack, collapsed cell, non-collapsed cell) where the cell whose
  attack predicted one class for >= 99 % of rows in every seed is in a strictly better
  ca-DCS group than a cell whose attack did not collapse and whose advantage is not above
  the collapsed cell's by more than its interval (i.e. collapse alone ranking higher);
- the attacks at chance even undefended, and the printed answer (``lines``);
- ``per_seed``: for ``--detail`` (a scenario, default adult / aggVFL), every attack row
  as (defense, strength, attack, seed, AP, advantage, collapse, VFLAIR's DCS): the rows
  behind docs/analysis.md's example of the two rankings disagreeing.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks import run_space


def run_sweep(results: Path) -> float:
    return run_space("trust", results)


def measure(sweep_dir: Path, detail: str) -> dict[str, object]:
    from analysis.answer import answer_lines, build_answer
    from analysis.load import read_records
    from analysis.ranking import DEFAULT_WEIGHTS, kendall_tau, ranking_table
    from analysis.report import prepare

    dcs = prepare(read_records(sweep_dir, with_spec=False), 0.5)
    ranking = ranking_table(dcs, DEFAULT_WEIGHTS)
    answer = build_answer(dcs, ranking)
    scenarios = {}
    for scenario, part in ranking.groupby("scenario", observed=True):
        part = part[part["cdcs"].notna() & part["ca_cdcs"].notna()]
        vflair = part["cdcs"].rank(ascending=False, method="first").to_numpy()
        chance = part["ca_cdcs"].rank(ascending=False, method="first").to_numpy()
        top = part.loc[part["cdcs"].idxmax()]
        scenarios[str(scenario)] = {
            "cells": len(part),
            "rank_differs": int((vflair != chance).sum()),
            "kendall_tau": round(
                kendall_tau(part["cdcs"].to_numpy(), part["ca_cdcs"].to_numpy()), 4
            ),
            "vflair_top": f"{top['defense']}@{top['strength']}",
            "top_differs": bool(top["ca_group"] != 1),
            "collapsed_above": collapsed_above(answer.by_attack, str(scenario)),
            "collapsed_above_any": len(collapsed_above(answer.by_attack, str(scenario), True)),
        }
    return {
        "trainings": int(dcs["trial_id"].nunique()),
        "attack_rows": int((dcs["attack"] != "none").sum()),
        "scenarios": scenarios,
        "rank_differs_total": sum(s["rank_differs"] for s in scenarios.values()),
        "cells_total": sum(s["cells"] for s in scenarios.values()),
        "collapsed_attack_cells": int((answer.by_attack["collapsed_seeds"] > 0).sum()),
        "at_chance_undefended": answer.at_chance[["scenario", "attack"]].to_dict("records"),
        "lines": answer_lines(answer, max_rows=None),
        "per_seed": per_seed(dcs, detail),
    }


def per_seed(dcs, scenario: str) -> list[list[object]]:  # type: ignore[no-untyped-def]
    """The scenario's scored attack rows, one list each, sorted by cell, attack, seed."""
    rows = dcs[(dcs["scenario"].astype(str) == scenario) & dcs["dcs"].notna()]
    columns = ["defense", "defense_param", "attack", "seed", "ap", "adv", "ap_collapse", "dcs"]
    rows = rows[columns].sort_values(columns[:4])
    return [
        [str(d), None if p != p else p, str(a), int(s), round(ap, 4), round(adv, 4),
         round(c, 4), round(v, 4)]
        for d, p, a, s, ap, adv, c, v in rows.itertuples(index=False)
    ]  # fmt: skip


def collapsed_above(by_attack, scenario: str, any_advantage: bool = False) -> list[str]:  # type: ignore[no-untyped-def]
    """Pairs where a cell whose attack always collapsed ranks in a better group than a cell
    whose attack never did with no clearly higher advantage (``any_advantage``: whatever
    the other cell's advantage: the literal count, where a collapse under a defense that
    took the attack's information away ranks above a cell that leaks)."""
    out = []
    part = by_attack[by_attack["scenario"] == scenario]
    for attack, rows in part.groupby("attack"):
        always = rows[rows["collapsed_seeds"] == rows["n_seeds"]]
        never = rows[rows["collapsed_seeds"] == 0]
        for c in always.itertuples():
            for n in never.itertuples():
                margin = 0.0 if not np.isfinite(n.adv_half) else n.adv_half
                close = any_advantage or n.adv - margin <= c.adv
                if c.ca_group < n.ca_group and close:
                    out.append(
                        f"{attack}: {c.defense}@{c.defense_param:g} above "
                        f"{n.defense}@{n.defense_param:g}"
                    )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.chance_ranking")
    p.add_argument("--results", default="results", help="where the trust sweep is (or goes)")
    p.add_argument(
        "--detail", default="dataset=adult partition=agg", help="scenario whose rows to print"
    )
    args = p.parse_args(argv)
    results = Path(args.results)
    sweep_dir = results / "trust"
    seconds = run_sweep(results)  # resumes: a finished sweep only starts and stops
    out = {"benchmark": "chance_ranking", "sweep": str(sweep_dir), "sweep_seconds": seconds}
    out |= measure(sweep_dir, args.detail)
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
