"""``python -m benchmarks.adaptive_attacks``: defenses against the attacker's default
setting and against the setting it tuned on its own rows (issue 43, worst-case leakage).

Runs ``search_spaces/adaptive_attacks.yaml`` (digits, aggVFL, FedSGD, none + the 9
defenses of ``defenses.yaml`` at a weak and a strong strength, 3 seeds; PMC and TBM each
tuned over 8 settings on half of the attacker's auxiliary rows) as its own process, then
the analysis, and prints one JSON object: per attack and defense cell the mean advantage
at default and adapted with intervals and rank groups, the cells whose group changes, the
Kendall τ between the default and worst-case chance-aware C-DCS rankings, and what the
tuning cost against one default evaluation. ``--keep DIR`` runs in DIR (and reuses its
records: a second call only analyses).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pandas as pd

from analysis.load import read_records
from analysis.ranking import DEFAULT_WEIGHTS
from analysis.report import build
from benchmarks.walkthrough import _run, in_folder
from trainables.results.labels import base_label

ROOT = Path(__file__).resolve().parents[1]
SPACE = ROOT / "search_spaces" / "adaptive_attacks.yaml"


def _r(x: object) -> float | None:
    return None if pd.isna(x) else round(float(x), 4)  # type: ignore[arg-type]


def costs(records: pd.DataFrame) -> dict[str, object]:
    """Seconds of each default evaluation and of each tuning (tuning + the final run),
    median per attack, and how often the attacker changed its setting."""
    out: dict[str, object] = {}
    attacked = records[records["attack"] != "none"]
    names = [base_label(str(a)) for a in attacked["attack"]]
    for name, rows in attacked.groupby(names):
        extras = [json.loads(e) for e in rows["extra"]]
        adapted = [e.get("adapted") for e in extras]
        default_s = [s for s, a in zip(rows["attack_seconds"], adapted, strict=True) if a is None]
        tuned_s = [s for s, a in zip(rows["attack_seconds"], adapted, strict=True) if a]
        changed = [bool(a["best"]) for a in adapted if a]
        out[str(name)] = {
            "default_eval_s_median": round(statistics.median(default_s), 2),
            "adapted_eval_s_median": round(statistics.median(tuned_s), 2),
            "ratio": round(statistics.median(tuned_s) / statistics.median(default_s), 1),
            "setting_changed": f"{sum(changed)} of {len(changed)}",
        }
    return out


def summarize(sweep_dir: Path) -> dict[str, object]:
    records = read_records(sweep_dir)
    report = build(records, 0.5, DEFAULT_WEIGHTS, [])
    worst = report.worst
    assert worst is not None, "no adapted records: is adapt set in the space?"
    per_attack: dict[str, list[dict[str, object]]] = {}
    for row in worst.attacks.itertuples():
        per_attack.setdefault(str(row.attack), []).append(
            {
                "defense": _cell(row.defense, row.defense_param),
                "adv_default": _r(row.adv_default),
                "adv_default_half": _r(row.adv_half_default),
                "adv_adapted": _r(row.adv_adapted),
                "adv_adapted_half": _r(row.adv_half_adapted),
                "group_default": _r(row.ca_group_default),
                "group_adapted": _r(row.ca_group_adapted),
            }
        )
    moved = worst.attacks[worst.attacks["group_changed"]]
    cells = worst.cells
    cdcs = [
        {
            "defense": _cell(r.defense, r.defense_param),
            "default": _r(r.ca_cdcs_default),
            "worst": _r(r.ca_cdcs_worst),
            "rank_default": _r(r.ca_rank_default),
            "rank_worst": _r(r.ca_rank_worst),
            "group_default": _r(r.ca_group_default),
            "group_worst": _r(r.ca_group_worst),
        }
        for r in cells.itertuples()
    ]
    return {
        "per_attack": per_attack,
        "mean_gain_per_attack": {
            str(a): _r(g["gain"].mean()) for a, g in worst.attacks.groupby("attack")
        },
        "attack_cells_group_changed": [
            f"{r.attack} {_cell(r.defense, r.defense_param)} "
            f"({int(r.ca_group_default)}->{int(r.ca_group_adapted)})"
            for r in moved.itertuples()
        ],
        "cdcs": cdcs,
        "cdcs_cells_group_changed": [
            f"{_cell(r.defense, r.defense_param)} "
            f"({_r(r.ca_group_default)}->{_r(r.ca_group_worst)})"
            for r in cells[cells["group_changed"]].itertuples()
        ],
        "kendall_tau": {str(r.scenario): _r(r.tau) for r in worst.tau.itertuples()},
        "notes": worst.notes,
        "cost": costs(records),
    }


def _cell(defense: object, strength: object) -> str:
    return str(defense) if pd.isna(strength) else f"{defense} {float(strength):g}"  # type: ignore[arg-type]


def run(folder: Path) -> dict[str, object]:
    sweep_dir = folder / "results" / "adaptive_attacks"
    start = time.perf_counter()
    step = None
    if not (sweep_dir / "records").exists():
        step = _run(["run", str(SPACE), "--no-mlflow"], folder)
        if step["rc"] != 0:
            raise SystemExit("\n".join(step["lines"][-20:]))  # type: ignore[call-overload]
    out: dict[str, object] = {"benchmark": "adaptive_attacks", "space": str(SPACE.name)}
    out["sweep_wall_s"] = round(time.perf_counter() - start, 1) if step else None
    out.update(summarize(sweep_dir))
    return out


def main() -> None:
    in_folder("benchmarks.adaptive_attacks", run)


if __name__ == "__main__":
    main()
