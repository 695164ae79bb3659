"""``python -m benchmarks.defenses_quick``: what the ``converge`` presets buy and cost on the
whole defense benchmark (issue 45).

Runs ``defenses.yaml`` (the papers' settings) and ``defenses_converge.yaml`` (PMC, MC, AMC
and BLI at their ``converge`` preset, otherwise the same space) one after the other, each
as a whole ``vflsweep run`` command into a fresh results folder and a fresh cost cache,
and reads their records:

- ``wall_s``: the command's wall time (start-up, trainings, attacks, MLflow, summary);
- ``cpu_s``: the CPU seconds the records report, for the trainings and per attack;
- per attack with a preset, the AP at the preset less the AP at the defaults, paired on the
  same cell (dataset, defense, strength, seed: the same training, bit for bit, for the
  inference-time attacks): mean, a 95 % interval over the cells, the largest change;
- ``ranking``: whether the analysis ranks the defenses the same (Kendall's tau of the two
  C-DCS columns, the top cell of each, the largest C-DCS change).

``--spaces defenses_converge`` runs one of them only (no pairs then). ``--against DIR``
runs ``defenses.yaml`` with the code of another checkout (``DIR``, e.g. a clone of the
commit before a change) and then with this one, back to back, and pairs every attack's AP
on the same cells (``ap_change``: this tree less ``DIR``'s; ``identical``: the cells whose
AP did not move) and the rankings: what a change that alters random streams must show to
leave the records "identical in distribution".
Prints one JSON object. The machine must be otherwise idle.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.load import read_records
from analysis.ranking import DEFAULT_WEIGHTS, kendall_tau, ranking_table
from analysis.report import prepare
from benchmarks.estimate_accuracy import _vflsweep

SPACES = ("defenses", "defenses_converge")
CELL = ["dataset", "defense", "defense_param", "seed"]


def run_space(space: str, work: Path, root: Path | None = None) -> tuple[float, pd.DataFrame]:
    """(wall seconds of ``vflsweep run SPACE``, with the code of checkout ``root`` (None:
    this one), its records with ``base``: the attack's name without its preset)."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "VFLSWEEP_CACHE": str(work / "cache")}
    results = work / "results"
    wall, _ = _vflsweep(["run", space, "--results", str(results)], env, root)
    df = read_records(results / space, with_spec=False)
    df["attack"] = df["attack"].astype(str)
    df["base"] = df["attack"].str.split("@").str[0]
    return wall, df


def ranks(df: pd.DataFrame) -> pd.DataFrame:
    """The analysis' ranking (C-DCS per scenario, defense, strength) of a sweep's records."""
    table = ranking_table(prepare(df.drop(columns="base"), 0.5), DEFAULT_WEIGHTS)
    return table.set_index(["scenario", "defense", "strength"])


def same_answer(default: pd.DataFrame, preset: pd.DataFrame) -> dict[str, object]:
    """Does the preset sweep rank the defenses as the default one: Kendall's tau of the
    two C-DCS columns over the cells both rank, and whether the top cell is the same."""
    a, b = ranks(default)["cdcs"].dropna(), ranks(preset)["cdcs"].dropna()
    both = a.index.intersection(b.index)
    a, b = a.loc[both], b.loc[both]
    return {
        "cells": len(both),
        "kendall_tau": round(kendall_tau(a.to_numpy(), b.to_numpy()), 4),
        "top_default": "@".join(map(str, a.idxmax()[1:])),
        "top_preset": "@".join(map(str, b.idxmax()[1:])),
        "max_abs_cdcs_diff": round(float((a - b).abs().max()), 4),
    }


def cpu_of(df: pd.DataFrame) -> dict[str, float]:
    """CPU seconds the records report: ``training``, the trainings' clean rows (AMC's and
    LRB's own trainings write no clean row, so they are not counted here), and per attack
    its evaluations."""
    clean = df[df["attack"] == "none"]
    out = {"training": round(float(clean["train_seconds"].sum()), 1)}
    attacked = df[df["attack"] != "none"]
    for name, seconds in attacked.groupby("attack")["attack_seconds"].sum().items():
        out[str(name)] = round(float(seconds), 1)
    return out


def ap_pairs(a: pd.DataFrame, b: pd.DataFrame) -> dict[str, object] | None:
    """AP(b) - AP(a) on the cells both ran (``CELL``; ``a``, ``b``: one attack's records):
    cells, how many did not move, mean with its 95 % interval, the largest change, and
    each side's mean AP; None without a common cell."""
    both = pd.concat(
        [a.set_index(CELL)["ap"], b.set_index(CELL)["ap"]], axis=1, keys=["a", "b"]
    ).dropna()  # the cells both ran: the means below are of the same cells
    d = (both["b"] - both["a"]).to_numpy(dtype=float)
    if len(d) == 0:
        return None
    half = 1.96 * float(d.std(ddof=1)) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
    return {
        "cells": len(d),
        "identical": int((d == 0).sum()),
        "mean_diff": round(float(d.mean()), 4),
        "ci95": [round(float(d.mean()) - half, 4), round(float(d.mean()) + half, 4)],
        "max_abs_diff": round(float(np.abs(d).max()), 4),
        "ap_a": round(float(both["a"].mean()), 4),
        "ap_b": round(float(both["b"].mean()), 4),
    }


def paired(default: pd.DataFrame, preset: pd.DataFrame) -> dict[str, dict[str, object]]:
    """Per attack run with a preset in ``preset``: AP(preset) - AP(default) on each cell."""
    out = {}
    presets = preset[preset["attack"].str.contains("@", regex=False)]
    for base, rows in presets.groupby("base"):
        pair = ap_pairs(default[default["attack"] == base], rows)
        if pair is not None:
            pair["ap_default"], pair["ap_preset"] = pair.pop("ap_a"), pair.pop("ap_b")
            out[str(base)] = pair
    return out


def against(root: Path) -> dict[str, object]:
    """``defenses.yaml`` with ``root``'s code, then with this tree's, and every attack's AP
    paired on the same cells (this tree less ``root``'s), with the rankings compared."""
    frames, out = {}, {}
    for name, code in (("against", root), ("this", None)):
        with tempfile.TemporaryDirectory(prefix=f"quick-{name}-") as work:
            wall, df = run_space(SPACES[0], Path(work), code)
        frames[name] = df
        out[name] = {"wall_s": round(wall, 1), "records": len(df), "cpu_s": cpu_of(df)}
        print(f"{name}: {out[name]}", file=sys.stderr, flush=True)
    a, b = frames["against"], frames["this"]
    changes: dict[str, object] = {}
    for attack in sorted(set(a["attack"]) - {"none"}):
        pair = ap_pairs(a[a["attack"] == attack], b[b["attack"] == attack])
        if pair is not None:
            changes[str(attack)] = pair
    out["ap_change"] = changes
    out["ranking"] = same_answer(a, b)
    out["wall_ratio"] = round(out["this"]["wall_s"] / out["against"]["wall_s"], 3)  # type: ignore[index]
    return out


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--against" in args:
        root = Path(args[args.index("--against") + 1]).resolve()
        print(json.dumps({"benchmark": "defenses_quick", "cpus": os.cpu_count(),
                          "against_root": str(root), **against(root)}))  # fmt: skip
        return 0
    spaces = list(SPACES)
    if "--spaces" in args:
        spaces = args[args.index("--spaces") + 1].split(",")
    out: dict[str, object] = {"benchmark": "defenses_quick", "cpus": os.cpu_count()}
    frames = {}
    for space in spaces:
        with tempfile.TemporaryDirectory(prefix=f"quick-{space}-") as work:
            wall, df = run_space(space, Path(work))
        frames[space] = df
        trainings = int(df["trial_id"].nunique())
        failed = int((df["status"] != "ok").sum())
        out[space] = {"wall_s": round(wall, 1), "trainings": trainings, "failed_records": failed}
        out[space]["cpu_s"] = cpu_of(df)  # type: ignore[index]
        print(f"{space}: {out[space]}", file=sys.stderr, flush=True)
    if set(SPACES) <= set(frames):
        out["ap_change"] = paired(frames[SPACES[0]], frames[SPACES[1]])
        out["ranking"] = same_answer(frames[SPACES[0]], frames[SPACES[1]])
        out["wall_ratio"] = round(
            out[SPACES[1]]["wall_s"] / out[SPACES[0]]["wall_s"],  # type: ignore[index]
            3,
        )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
