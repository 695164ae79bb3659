"""``python -m benchmarks.compare_walkthrough``: a comparative question, end to end.

"Does FedBCD (q = 5) leak more labels to NS than FedSGD, does G-DP protect equally under
both, and at what MP cost?" Writes ``SPACE`` (docs/analysis.md shows exactly this text;
``tests/test_analysis_contrast.py`` runs it) into a temporary folder, then runs
``vflsweep run`` and ``vflsweep analyze --compare protocol=fedsgd:fedbcd`` as their own
processes, and recomputes the undefended NS contrast by hand from the Parquet records
(per seed fedbcd − fedsgd, their mean) to set beside the printed one, and G-DP's CAP
contrast the same way. Prints one JSON object: each command's wall seconds and printed
lines, and the hand checks.
``--keep DIR`` runs in DIR instead (and keeps it).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from benchmarks.walkthrough import _run, in_folder

SPACE = """\
# Does FedBCD (q=5) leak more labels to NS than FedSGD, does G-DP
# protect equally under both, and at what MP cost?
name: fedbcd_ns
base: {dataset: breast_cancer, n_parties: 2, partition: agg}
grid:
  seed: [0, 1, 2]
  protocol:
    - {protocol: fedsgd}
    - {protocol: fedbcd, protocol_params: {q: 5}}
defenses:
  gdp: [1e-2, 1e-1]
attacks: [ns]
analysis: {compare: [protocol=fedsgd:fedbcd]}   # Δ = fedbcd − fedsgd
resources: {cpu_per_party: 0.5, cpu_per_trial: 0}
"""


def by_hand(sweep_dir: Path) -> dict[str, object]:
    """The undefended NS contrast from the records alone: per seed, the advantage under
    fedbcd minus under fedsgd, and their mean."""
    frame = pd.concat(pd.read_parquet(p) for p in sorted((sweep_dir / "records").glob("*.parquet")))
    ns = frame[(frame["attack"] == "ns") & (frame["defense"] == "none")]
    per = ns.pivot_table(index="seed", columns="protocol", values="ap_advantage")
    diffs = (per["fedbcd"] - per["fedsgd"]).round(6)
    return {"per_seed": diffs.tolist(), "mean": round(float(diffs.mean()), 6)}


def cap_by_hand(sweep_dir: Path, defense: str = "gdp") -> dict[str, object]:
    """The CAP contrast of ``defense`` from the records alone (docs/analysis.md): per seed
    and protocol, the mean over the defense's strengths of U·E (U the training's clean MP,
    E = 1 − NS's AP), then fedbcd minus fedsgd per seed, and their mean."""
    frame = pd.concat(pd.read_parquet(p) for p in sorted((sweep_dir / "records").glob("*.parquet")))
    clean = frame[frame["attack"] == "none"].set_index("trial_id")["mp"]
    ns = frame[(frame["attack"] == "ns") & (frame["defense"] == defense)].copy()
    ns["ue"] = ns["trial_id"].map(clean) * (1.0 - ns["ap"])
    per = ns.pivot_table(index="seed", columns="protocol", values="ue", aggfunc="mean")
    diffs = (per["fedbcd"] - per["fedsgd"]).round(6)
    return {"defense": defense, "per_seed": diffs.tolist(), "mean": round(float(diffs.mean()), 6)}


def printed(table: pd.DataFrame, metric: str, defense: str) -> float:
    """The contrast's Δ as ``analyze`` wrote it (contrast_<axis>_<A>_vs_<B>.csv)."""
    row = table[
        (table["kind"] == "contrast") & (table["metric"] == metric) & (table["defense"] == defense)
    ]
    return round(float(row["delta"].iloc[0]), 6)


def walk(folder: Path) -> dict[str, object]:
    (folder / "fedbcd_ns.yaml").write_text(SPACE)
    steps = [
        _run(["run", "fedbcd_ns.yaml", "--no-mlflow"], folder),
        _run(["analyze", "results/fedbcd_ns", "--no-mlflow"], folder),
    ]
    check = by_hand(folder / "results" / "fedbcd_ns")
    report = folder / "results" / "fedbcd_ns" / "report"
    table = pd.read_csv(report / "contrast_protocol_fedsgd_vs_fedbcd.csv")
    check["printed_delta"] = printed(table, "ns", "none")
    check["matches"] = abs(check["printed_delta"] - check["mean"]) < 1e-6  # type: ignore[operator]
    cap = cap_by_hand(folder / "results" / "fedbcd_ns")
    cap["printed_delta"] = printed(table, "cap", "gdp")
    cap["matches"] = abs(cap["printed_delta"] - cap["mean"]) < 1e-6  # type: ignore[operator]
    return {"benchmark": "compare_walkthrough", "folder": str(folder), "steps": steps,
            "hand_check": check, "cap_hand_check": cap}  # fmt: skip


def main() -> None:
    in_folder("benchmarks.compare_walkthrough", walk)


if __name__ == "__main__":
    main()
