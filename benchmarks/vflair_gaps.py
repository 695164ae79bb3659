"""``python -m benchmarks.vflair_gaps``: VFLAIR's DCS-gap findings on MNIST, recomputed.

The benchmark paper's headline comparisons (its "DCS gap Distribution" figures, MNIST):
splitVFL − aggVFL under FedSGD, and FedBCD (Q = 5) − FedSGD under aggVFL, one gap per
attack type and defense point. This runs ``search_spaces/vflair_mnist.yaml`` (its defense
grid, every multi-class attack, 3 seeds) three times under ``procedure: vflair`` at
VFLAIR's steps per epoch (batch 273, as ``vflair_mnist_table --procedure vflair
--batch-size 273``): aggVFL FedSGD, splitVFL FedSGD and aggVFL FedBCD. It sets our gaps
beside the gaps of the published T-DCS tables (``vflair_mnist_table.PUBLISHED`` and
``vflair_published``).

Per comparison and attack type, over the defense points where both have a value: the mean
gap (ours with a 95 % t interval over seeds: the gap is paired by seed, each seed's gap
averaged over the points), the share of points with a positive gap, and the Pearson
correlation of our gaps with the published ones across points; and our undefended gap per
attack type, which the published tables do not hold (the paper's figure draws it).
Our LI is the multi-class label attacks: the published LI_10 column (no LI_2 here).

``--results DIR`` keeps the three sweeps' records and resumes them (default: a folder
under the system temp dir). ``--seeds`` runs fewer seeds (the paper's comparison: 3).
``--defenses gdp ldp dcor mid`` runs the 21 points the paper ranks (all four types
published) and leaves out GS, CAE, DCAE and GPer (16 points with LI and TB only).
``--attacks dli bli tbm lrb nsb mf`` runs those attacks only (each type's T-DCS is then the
mean over its attacks that ran); a setting already run with every attack in ``--results``
is resumed and read for those attacks, so its gaps stay paired with the same trainings.
Needs ``../shared/datasets/mnist``.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from analysis.load import read_records
from analysis.ranking import DEFAULT_WEIGHTS, ranking_table
from analysis.report import prepare
from benchmarks import ROOT, run_space, seed_interval
from benchmarks.vflair_mnist_table import PUBLISHED, SPACE, TYPES
from benchmarks.vflair_published import AGG_FEDBCD, SPLIT_FEDSGD, Table

BATCH = 273  # VFLAIR's ~29 batches per epoch of its 60k rows, on our 8,000 (docs/vflair.md)
SETTINGS: dict[str, tuple[dict[str, object], Table]] = {
    "agg_fedsgd": ({"partition": "agg", "protocol": "fedsgd"}, PUBLISHED),
    "split_fedsgd": ({"partition": "split", "protocol": "fedsgd"}, SPLIT_FEDSGD),
    "agg_fedbcd": ({"partition": "agg", "protocol": "fedbcd"}, AGG_FEDBCD),
}
# gap name: (setting, minus setting), as the paper defines each DCS gap
GAPS = {"split_minus_agg": ("split_fedsgd", "agg_fedsgd"),
        "fedbcd_minus_fedsgd": ("agg_fedbcd", "agg_fedsgd")}  # fmt: skip


def space_file(
    setting: str,
    seeds: list[int],
    folder: Path,
    defenses: list[str] | None = None,
    attacks: list[str] | None = None,
) -> tuple[str, str]:
    """(path, name) of the space for ``setting``: the shipped grid under VFLAIR's procedure
    (``defenses``: only those of its grid, with the undefended cell; ``attacks``: only
    those of its attacks)."""
    space = yaml.safe_load((ROOT / "search_spaces" / f"{SPACE}.yaml").read_text())
    missing = sorted(set(defenses or ()) - set(space["defenses"]))
    if missing:
        raise SystemExit(f"--defenses: {missing}; allowed: {[*space['defenses']]}")
    unknown = sorted(set(attacks or ()) - set(space["attacks"]))
    if unknown:
        raise SystemExit(f"--attacks: {unknown}; allowed: {space['attacks']}")
    if defenses:
        space["defenses"] = {k: v for k, v in space["defenses"].items() if k in defenses}
    if attacks:
        space["attacks"] = [a for a in space["attacks"] if a in attacks]
    name = f"vflair_gaps_{setting}" + ("_" + "_".join(sorted(defenses)) if defenses else "")
    name += "_atk_" + "_".join(sorted(attacks)) if attacks else ""
    space["name"] = name
    space["base"] = {**space["base"], **SETTINGS[setting][0], "procedure": "vflair",
                     "batch_size": BATCH}  # fmt: skip
    space["grid"] = {**space.get("grid", {}), "seed": seeds}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return str(path), name


def attack_name(label: str) -> str:
    """The attack's registry name from its record label (``lrb[count=all,...]`` -> lrb)."""
    return re.split(r"[@\[+]", label, maxsplit=1)[0]


def per_seed_tdcs(records: pd.DataFrame) -> pd.DataFrame:
    """T-DCS per (defense, strength, seed) and type (VFLAIR's DCS, β = 0.5); the
    undefended point is ``("none", 0.0)``."""
    frames = []
    for seed, rows in records.groupby("seed", observed=True):
        table = ranking_table(prepare(rows, 0.5), DEFAULT_WEIGHTS)
        table = table.assign(seed=int(seed), strength=table["strength"].astype("float64"))
        table["strength"] = table["strength"].fillna(0.0)
        frames.append(table[["defense", "strength", "seed", *[f"tdcs_{t}" for t in TYPES]]])
    return pd.concat(frames, ignore_index=True)


def published_gaps(a: Table, b: Table) -> pd.DataFrame:
    """The published gap a − b per point and type (NaN where either has "-")."""
    rows = []
    for key in a.keys() & b.keys():
        row = {"defense": key[0], "strength": key[1]}
        for i, t in enumerate(TYPES):
            x, y = a[key][i], b[key][i]
            row[f"vflair_{t}"] = np.nan if x is None or y is None else x - y
        rows.append(row)
    return pd.DataFrame(rows)


def compare_gap(ours: dict[str, pd.DataFrame], name: str) -> dict[str, object]:
    """One comparison: per type, ours beside the published gaps (module docstring)."""
    a, b = GAPS[name]
    keys = ["defense", "strength", "seed"]
    paired = ours[a].merge(ours[b], on=keys, suffixes=("_a", "_b"))
    for t in TYPES:
        paired[f"gap_{t}"] = paired[f"tdcs_{t}_a"] - paired[f"tdcs_{t}_b"]
    published = published_gaps(SETTINGS[a][1], SETTINGS[b][1])
    defended = paired[paired["defense"] != "none"]
    means = defended.groupby(["defense", "strength"], as_index=False)[
        [f"gap_{t}" for t in TYPES]
    ].mean()
    table = published.merge(means, on=["defense", "strength"], how="left")
    undefended = paired[paired["defense"] == "none"]
    out: dict[str, object] = {}
    for t in TYPES:
        both = table.dropna(subset=[f"vflair_{t}", f"gap_{t}"])
        pts = set(zip(both["defense"], both["strength"], strict=True))
        in_pts = [(d, s) in pts for d, s in zip(defended["defense"], defended["strength"],
                                                   strict=True)]  # fmt: skip
        per_seed = defended[in_pts].groupby("seed")[f"gap_{t}"].mean().to_numpy()
        mine, theirs = both[f"gap_{t}"].to_numpy(), both[f"vflair_{t}"].to_numpy()
        r = float(np.corrcoef(mine, theirs)[0, 1]) if len(both) > 2 else float("nan")
        none = undefended[f"gap_{t}"].dropna().to_numpy()
        out[t] = {
            "points": len(both),
            "ours_mean_gap": round(float(mine.mean()), 4) if len(both) else None,
            "ours_mean_gap_ci95": seed_interval(per_seed)[1],
            "ours_share_positive": round(float((mine > 0).mean()), 3) if len(both) else None,
            "vflair_mean_gap": round(float(theirs.mean()), 4) if len(both) else None,
            "vflair_share_positive": round(float((theirs > 0).mean()), 3) if len(both) else None,
            "same_sign_share": round(float((np.sign(mine) == np.sign(theirs)).mean()), 3)
            if len(both) else None,
            "pearson_r": None if np.isnan(r) else round(r, 3),
            "ours_undefended_gap": round(float(none.mean()), 4) if len(none) else None,
            "ours_undefended_gap_ci95": seed_interval(none)[1],
        }  # fmt: skip
    points = table.dropna(subset=[f"gap_{t}" for t in TYPES], how="all").round(4)
    return {"per_type": out, "points": points.to_dict(orient="records")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--defenses", nargs="+", default=None,
                        help="only these defenses of the grid (gdp ldp dcor mid: the 21 points "
                             "the paper ranks, every type published)")  # fmt: skip
    parser.add_argument("--attacks", nargs="+", default=None,
                        help="only these attacks (a setting already run with every attack in "
                             "--results is resumed and read for these)")  # fmt: skip
    args = parser.parse_args()
    results = args.results or Path(tempfile.gettempdir()) / "vflsweep_vflair_gaps"
    start = time.perf_counter()
    ours, seconds, trainings = {}, {}, {}
    sources = {}
    for setting in SETTINGS:
        seeds = list(range(args.seeds))
        space, name = space_file(setting, seeds, results, args.defenses, args.attacks)
        full, full_name = space_file(setting, seeds, results, args.defenses)
        if args.attacks and (results / full_name).exists():  # a run with every attack
            space, name = full, full_name  # resumed, and read for ``--attacks`` only
        seconds[setting] = round(run_space(space, results), 1)
        records = read_records(results / name)
        if args.attacks:
            names = records["attack"].astype(str).map(attack_name)
            records = records[names.isin(["none", *args.attacks])]
        sources[setting] = name
        trainings[setting] = int(records["trial_id"].nunique())
        ours[setting] = per_seed_tdcs(records)
    print(json.dumps({
        "benchmark": "vflair_gaps", "results": str(results), "procedure": "vflair",
        "batch_size": BATCH, "seeds": args.seeds, "defenses": args.defenses or "all",
        "attacks": args.attacks or "all", "sweeps": sources,
        "trainings": trainings,
        "sweep_seconds": seconds,
        **{name: compare_gap(ours, name) for name in GAPS},
        "seconds": round(time.perf_counter() - start, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
