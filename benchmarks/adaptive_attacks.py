"""``python -m benchmarks.adaptive_attacks``: does the attacker's tuning beat its default
on the judge's test rows, chosen by cross-validation against a single holdout (issue 65)?

By default it runs one space twice, ``method: cv`` and ``method: holdout`` (the same
trainings, seeds and defaults: only the choosing rule differs): digits and breast_cancer,
aggVFL FedSGD, none + G-DP (1e-3, 0.1) + MID 1 + dCor 0.3, 3 seeds; PMC, MC and TBM tuned
over ``--trials`` settings on the trained model, LRB over 4 trainings stacked in its cell
(``tuning_trained``). It prints one JSON object: per rule and attack, in how many
(cell, seed) pairs the adapted advantage on the test rows was above, equal to or below the
default's, how often the default was kept or nothing could be tuned (and why), the mean
gain with its paired 95 % interval, the Kendall τ between the default and worst-case
C-DCS rankings per dataset, one LRB cell's trials (their settings, the attacker's own
scores, stacked or not), and the seconds. ``--keep DIR`` runs in DIR and reuses its
records (a second call only analyses).

``--space FILE`` summarizes one space instead (default vs worst case per cell, as
``search_spaces/adaptive_attacks.yaml``'s table in docs/attacks.md was measured).
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
from benchmarks.walkthrough import _run
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


def run(folder: Path, space: Path = SPACE) -> dict[str, object]:
    """One space, default vs worst case per cell (``summarize``)."""
    start = time.perf_counter()
    sweep_dir, ran = _sweep(folder, space)
    out: dict[str, object] = {"benchmark": "adaptive_attacks", "space": str(space.name)}
    out["sweep_wall_s"] = round(time.perf_counter() - start, 1) if ran else None
    out.update(summarize(sweep_dir))
    return out


def _sweep(folder: Path, space: Path) -> tuple[Path, bool]:
    """Run ``space`` in ``folder`` unless its records are there; (its folder, whether run)."""
    from sweep_engine.space import load_space

    sweep_dir = folder / "results" / load_space(str(space)).name
    if (sweep_dir / "records").exists():
        return sweep_dir, False
    step = _run(["run", str(space), "--no-mlflow"], folder)
    if step["rc"] != 0:
        raise SystemExit("\n".join(step["lines"][-20:]))  # type: ignore[call-overload]
    return sweep_dir, True


RULES_SPACE = """# written by benchmarks.adaptive_attacks: the choosing rule {method}
name: adapt_{method}
base: {{n_parties: 2, partition: agg, protocol: fedsgd}}
grid:
  dataset: [digits, breast_cancer]
  seed: [0, 1, 2]
defenses:
  gdp: [1.0e-3, 1.0e-1]
  mid: [1.0]
  dcor: [0.3]
attacks:
  - {{name: pmc, adapt: {{trials: {trials}, method: {method}}}}}
  - {{name: mc, adapt: {{trials: {trials}, method: {method}}}}}
  - {{name: tbm, adapt: {{trials: {trials}, method: {method}}}}}
  - {{name: lrb, adapt: {{trials: 4, sampler: random, method: {method}}}}}
resources: {{cpu_per_party: 0.5, cpu_per_trial: 0}}
"""


def pairs(records: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, cell, seed, attack): the default and the adapted test advantage, and
    what the attacker's choice was (``tuned``, ``kept`` or ``not tuned``)."""
    attacked = records[records["attack"] != "none"].copy()
    attacked["base"] = [base_label(str(a)) for a in attacked["attack_label"]]
    key = ["dataset", "defense", "defense_param", "seed", "base"]
    default = attacked[~attacked["attack_adapted"]].set_index(key)["ap_advantage"]
    rows = []
    for r in attacked[attacked["attack_adapted"]].itertuples():
        info = json.loads(r.extra)["adapted"]
        choice = "tuned" if info["best"] else "kept"
        if info["held_out_rows"] == 0:
            choice = "not tuned"
        d = default.get((r.dataset, r.defense, r.defense_param, r.seed, r.base))
        rows.append({"dataset": r.dataset, "defense": _cell(r.defense, r.defense_param),
                     "seed": r.seed, "attack": r.base, "default": d,
                     "adapted": r.ap_advantage, "choice": choice,
                     "why": info.get("why_default", "")})  # fmt: skip
    return pd.DataFrame(rows)


def beats(table: pd.DataFrame) -> dict[str, object]:
    """Per dataset and attack: how often the adapted advantage is above / equal to / below
    the default on the test rows, the choices, and the mean gain with its paired interval."""
    from benchmarks import seed_interval

    out: dict[str, object] = {}
    for (dataset, attack), g in table.groupby(["dataset", "attack"]):
        gain = (g["adapted"] - g["default"]).astype(float)
        mean, ci = seed_interval(gain.tolist())  # pairs of cells and seeds
        whys = sorted(
            {w for w, c in zip(g["why"], g["choice"], strict=True) if w and c == "not tuned"}
        )
        out[f"{dataset} {attack}"] = {
            "pairs": len(g),
            "higher": int((gain > 1e-12).sum()),
            "equal": int((gain.abs() <= 1e-12).sum()),
            "lower": int((gain < -1e-12).sum()),
            "tuned": int(g["choice"].eq("tuned").sum()),
            "kept": int(g["choice"].eq("kept").sum()),
            "not_tuned": int(g["choice"].eq("not tuned").sum()),
            "not_tuned_why": whys[:1],
            "mean_gain": mean,
            "gain_ci": ci,
        }
    return out


def lrb_cell(records: pd.DataFrame) -> dict[str, object] | None:
    """One LRB cell (digits, no defense, seed 0): its budget and trials, as recorded."""
    rows = records[(records["attack_label"] == "lrb@adapted") & (records["dataset"] == "digits")]
    rows = rows[(rows["defense"] == "none") & (rows["seed"] == 0)]
    if rows.empty:
        return None
    extra = json.loads(rows["extra"].iloc[0])
    info = extra["adapted"]
    keys = ("trainings", "trial_params", "trial_own_scores", "folds", "held_out_rows",
            "best", "default_kept", "why_default", "gain_noise")  # fmt: skip
    return {**{k: info.get(k) for k in keys}, "stacked": bool(extra.get("vectorized"))}


def rules(folder: Path, trials: int) -> dict[str, object]:
    """The same sweep under ``cv`` and ``holdout``: how often each beats the default."""
    out: dict[str, object] = {"benchmark": "adaptive_attacks", "trials": trials}
    for method in ("cv", "holdout"):
        space = folder / f"adapt_{method}.yaml"
        space.write_text(RULES_SPACE.format(method=method, trials=trials))
        start = time.perf_counter()
        sweep_dir, ran = _sweep(folder, space)
        records = read_records(sweep_dir)
        report = build(records, 0.5, DEFAULT_WEIGHTS, [])
        worst = report.worst
        out[method] = {
            "sweep_wall_s": round(time.perf_counter() - start, 1) if ran else None,
            "beats_default": beats(pairs(records)),
            "kendall_tau": {}
            if worst is None
            else {str(r.scenario): _r(r.tau) for r in worst.tau.itertuples()},
            "cost": costs(records),
        }
        if method == "cv":
            out["lrb_cell"] = lrb_cell(records)
    return out


def widths() -> dict[str, object]:
    """Per shipped dataset and tunable attack, at the defaults (min_rows 10, seed 0): the
    rows its attacker scores on, the folds cv makes of them and the fewest rows in one,
    the rows one holdout (0.5) keeps, and the 95 % half-width of one fold's score and of
    the judge's test score, each at its widest (p = 0.5: 1.96 * sqrt(0.25 / rows)),
    where the dataset's files are here."""
    import numpy as np

    from trainables.attacks import ATTACKS
    from trainables.attacks.harness import draw_aux
    from trainables.attacks.tuning import Adapt, _held_out, folds_of
    from trainables.data import DATASETS, load_dataset
    from trainables.errors import MissingDataError

    def half(rows: int) -> float | None:
        return round(1.96 * (0.25 / rows) ** 0.5, 3) if rows else None

    out: dict[str, object] = {}
    for name in DATASETS.names():
        try:
            ds = load_dataset(name)
        except MissingDataError as err:
            out[name] = {"missing": str(err)}
            continue
        y = np.asarray(ds.y_train)
        per: dict[str, object] = {"train_rows": len(y), "test_rows": len(ds.y_test),
                                  "judge_half_width": half(len(ds.y_test))}  # fmt: skip
        for attack in ("pmc", "mc", "tbm", "amc", "lrb"):
            cls = ATTACKS.get(attack)
            aux = draw_aux(cls.info, y, np.zeros((len(y), 1)), 0)
            groups = np.zeros(len(aux.feature_rows), dtype=np.int64)
            if len(aux.label_rows):
                groups = np.asarray(aux.labels)
            if attack == "lrb":  # it scores on its known rows of other classes
                groups = groups[groups != int(cls.defaults["target"])]
            masks, why = folds_of(groups, Adapt(), 0)
            held = int(_held_out(groups, 0.5, 0).sum())
            fewest = min((int(m.sum()) for m in masks), default=0)
            per[attack] = {
                "rows": len(groups), "cv_folds": len(masks), "cv_fold_rows": fewest,
                "fold_half_width": half(fewest), "holdout_rows": held,
                "holdout_half_width": half(held), "not_tuned": why or None,
            }  # fmt: skip
        out[name] = per
    return out


def main(argv: list[str] | None = None) -> None:
    import argparse
    import tempfile

    p = argparse.ArgumentParser(prog="python -m benchmarks.adaptive_attacks")
    p.add_argument("--keep", default=None, help="run in this folder and keep it")
    p.add_argument(
        "--trials", type=int, default=4, help="settings each inference-time attacker tries"
    )
    p.add_argument(
        "--space", default=None, help="summarize this one space instead (default vs worst case)"
    )
    p.add_argument("--widths", action="store_true", help="only the rows and interval widths")
    args = p.parse_args(argv)
    if args.widths:
        print(json.dumps({"benchmark": "adaptive_attacks", "widths": widths()}))
        return

    def go(folder: Path) -> dict[str, object]:
        if args.space:
            return run(folder, Path(args.space).resolve())
        return rules(folder, args.trials)

    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        out = go(Path(args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="adaptive_attacks-") as folder:
            out = go(Path(folder))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
