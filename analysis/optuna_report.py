"""Optuna's own analysis of a sweep's searches: importances, history, Pareto front.

Why rebuild each study from ``<sweep>/search/<cell>.json``: the search runs through Tune's
OptunaSearch with an in-memory study, and the records are the source of truth. The
summary file holds, from the records, every finished trial's params and objective values
and the distributions the search sampled from, so ``optuna.trial.create_trial`` +
``study.add_trial`` give a study Optuna's importance evaluators and plots accept as is —
the numbers are Optuna's, not a hand-rolled imitation.

Per study (named by the cell's hash, as its summary file) into ``<report>/optuna/``:
``importances_<study>.json`` (fANOVA, seeded; one mapping per objective, each summing to
1), ``history_<study>.png`` (``history_<study>_<metric>.png`` per objective with several),
``importances_<study>[_<metric>].png`` and, with 2 or 3 objectives, ``pareto_<study>.png``.
What is undefined for a study (fewer than 2 finished trials, an objective constant across
trials) is said in the JSON's ``undefined`` and in the returned notes, never plotted.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import optuna

MIN_TRIALS = 2  # fANOVA on one trial splits importance evenly: a number that means nothing
EVALUATOR_SEED = 0  # fANOVA's random forest: seeded, so a report is reproducible


def study_from_summary(name: str, summary: dict[str, Any]) -> tuple[optuna.Study, list[str]]:
    """An in-memory Optuna study holding the summary's finished trials, in finishing order;
    the notes say which trials could not be added (values missing, params off the space)."""
    objectives = summary["objectives"]
    directions: list[Literal["maximize", "minimize"]] = [
        "maximize" if o["mode"] == "max" else "minimize" for o in objectives
    ]
    study = optuna.create_study(study_name=name, directions=directions)
    dists = {
        k: optuna.distributions.json_to_distribution(v) for k, v in summary["distributions"].items()
    }
    notes: list[str] = []
    for trial in summary.get("trials", []):
        if trial.get("stopped"):  # stopped early (a scheduler, a pruner): no final value
            notes.append(
                f"{name}: trial {trial['trial_id']} stopped early after "
                f"{trial.get('epochs_run')} epochs (left out: it has no final value)"
            )
            continue
        values = trial["values"]
        if any(v is None or not math.isfinite(float(v)) for v in values):
            notes.append(f"{name}: trial {trial['trial_id']} has no value for every objective")
            continue
        try:
            frozen = optuna.trial.create_trial(
                params=trial["params"],
                distributions={k: dists[k] for k in trial["params"]},
                values=[float(v) for v in values],
                user_attrs={"trial_id": trial["trial_id"]},
            )
        except (ValueError, KeyError) as err:  # a value outside the space it was drawn from
            notes.append(f"{name}: trial {trial['trial_id']} left out: {err}")
            continue
        study.add_trial(frozen)
    return study, notes


def _target(k: int) -> Callable[[optuna.trial.FrozenTrial], float]:
    return lambda t: float(t.values[k])


def importances(study: optuna.Study, metrics: list[str]) -> tuple[dict, dict[str, str]]:
    """metric -> {param: importance} (fANOVA, normalized to sum 1), and metric -> why not."""
    done: dict[str, dict[str, float]] = {}
    undefined: dict[str, str] = {}
    n = len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
    for k, metric in enumerate(metrics):
        if n < MIN_TRIALS:
            undefined[metric] = f"needs at least {MIN_TRIALS} finished trials, has {n}"
            continue
        evaluator = optuna.importance.FanovaImportanceEvaluator(seed=EVALUATOR_SEED)
        try:
            found = optuna.importance.get_param_importances(
                study, evaluator=evaluator, target=_target(k)
            )
        except RuntimeError as err:  # "zero total variance": the objective never moved
            undefined[metric] = f"{err} (the objective is the same in every trial)"
            continue
        done[metric] = {p: float(v) for p, v in found.items()}
    return done, undefined


def _slug(text: str) -> str:
    return re.sub(r"[^\w.-]", "-", text)


def _save(ax: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    ax.figure.tight_layout()
    ax.figure.savefig(path, dpi=90)
    plt.close(ax.figure)
    return path.name


def plot_study(
    study: optuna.Study, name: str, metrics: list[str], usable: list[str], out: Path
) -> tuple[list[str], list[str]]:
    """History per objective, importances where defined, Pareto front with 2-3 objectives."""
    import matplotlib

    matplotlib.use("Agg")
    from optuna.visualization import matplotlib as vis

    files: list[str] = []
    notes: list[str] = []
    several = len(metrics) > 1
    for k, metric in enumerate(metrics):
        tail = f"_{_slug(metric)}" if several else ""
        ax = vis.plot_optimization_history(study, target=_target(k), target_name=metric)
        files.append(_save(ax, out / f"history_{name}{tail}.png"))
        if metric in usable:
            evaluator = optuna.importance.FanovaImportanceEvaluator(seed=EVALUATOR_SEED)
            ax = vis.plot_param_importances(
                study, evaluator=evaluator, target=_target(k), target_name=metric
            )
            files.append(_save(ax, out / f"importances_{name}{tail}.png"))
    if len(metrics) in (2, 3):
        ax = vis.plot_pareto_front(study, target_names=metrics)
        files.append(_save(ax, out / f"pareto_{name}.png"))
    elif several:
        notes.append(f"{name}: no Pareto plot: Optuna plots 2 or 3 objectives, not {len(metrics)}")
    return files, notes


def analyse_study(path: Path, out: Path, plots: bool) -> tuple[list[str], list[str]]:
    """One study's files; returns (file names written, notes)."""
    name = path.stem
    summary = json.loads(path.read_text())
    if "distributions" not in summary:
        return [], [f"{name}: {path} predates recorded distributions; re-run the sweep"]
    study, notes = study_from_summary(name, summary)
    metrics = [o["metric"] for o in summary["objectives"]]
    found, undefined = importances(study, metrics)
    notes += [f"{name}: importance of {m} undefined: {why}" for m, why in undefined.items()]
    blob = {
        "study": name,
        "cell": summary.get("cell"),
        "n_trials": len(study.trials),
        "objectives": summary["objectives"],
        "evaluator": f"fanova(seed={EVALUATOR_SEED})",
        "importances": found,
        "undefined": undefined,
    }
    target = out / f"importances_{name}.json"
    target.write_text(json.dumps(blob, indent=2, default=str))
    files = [target.name]
    if plots and study.trials:
        more, plot_notes = plot_study(study, name, metrics, list(found), out)
        files, notes = files + more, notes + plot_notes
    return files, notes


def write_studies(sweep_dir: Path, out: Path, plots: bool = True) -> dict[str, Any] | None:
    """Every study of the sweep analysed into ``out``; None when the sweep searched nothing."""
    summaries = sorted((sweep_dir / "search").glob("*.json"))
    if not summaries:
        return None
    out.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    notes: list[str] = []
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():  # Optuna marks its matplotlib plots experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        for path in summaries:
            more, why = analyse_study(path, out, plots)
            files, notes = files + more, notes + why
    return {"studies": len(summaries), "folder": str(out), "files": files, "notes": notes}
