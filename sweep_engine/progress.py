"""What a sweep prints, in the sweep's own terms: the axes that vary, not a fixed field list.

Why from the plan's cells: a defense sweep's 42 cells differ only in ``defense``; a line
that lists dataset, partition, protocol and seed reads the same for all of them. The cells
hold the grid values as the space wrote them, so ``defense=gdp@0.01 seed=2`` is what the
user asked for, and nothing that is the same in every cell is repeated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweep_engine.studies import study_path
from sweep_engine.words import plural

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pyarrow as pa

    from sweep_engine.plan import Plan, Training
    from trainables.records import Record

MISSING = object()


def varying_axes(cells: list[dict[str, Any]]) -> list[str]:
    """Axes whose value differs between ``cells`` (in the order they first appear)."""
    axes: list[str] = []
    for cell in cells:
        axes += [a for a in cell if a not in axes]
    return [a for a in axes if len({_key(c.get(a, MISSING)) for c in cells}) > 1]


def _key(value: Any) -> str:
    return "<missing>" if value is MISSING else json.dumps(value, sort_keys=True, default=str)


def fmt(value: Any) -> str:
    """A value as a user would type it: ``0.01``, ``1e-05``, ``[64,32]``."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def axis_text(axis: str, value: Any) -> str:
    """One axis value: ``defense=gdp@0.01``; a mapping value as its leaves (``protocol=fedbcd
    q=5``), since the axis name of a mapping is only the user's label for the bundle."""
    if isinstance(value, dict) and "defense" in value:
        strength = value.get("defense_param")
        text = f"defense={value['defense']}" + ("" if strength is None else f"@{fmt(strength)}")
        rest = value.get("defense_params") or {}
        return " ".join([text, *(f"{k}={fmt(v)}" for k, v in rest.items())])
    if isinstance(value, dict):
        return " ".join(_leaves(value)) or f"{axis}={{}}"
    return f"{axis}={fmt(value)}"


def _leaves(value: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, inner in value.items():
        out += _leaves(inner) if isinstance(inner, dict) and inner else [f"{key}={fmt(inner)}"]
    return out


def cell_text(cell: dict[str, Any], axes: list[str]) -> str:
    return " ".join(axis_text(a, cell[a]) for a in axes if a in cell)


def cell_labels(
    plan: Plan, skip: tuple[str, ...] = (), extra: Sequence[Training] = ()
) -> dict[str, str]:
    """trial_id -> the training's varying axes as text (``skip`` leaves axes out: ``seed``
    when grouping seeds together); ``extra`` trainings run beside the plan's count too."""
    known = {t.trial_id for t in plan.trainings}
    trainings = [*plan.trainings, *(t for t in extra if t.trial_id not in known)]
    axes = [a for a in varying_axes([t.cell for t in trainings]) if a not in skip]
    return {t.trial_id: cell_text(t.cell, axes) for t in trainings}


def ap_text(records: list[Record]) -> str:
    """``ap: pmc=0.76 (adv 0.00) ns=0.83 (adv 0.66)`` for the attacks a training evaluated
    (the advantage over a no-information guess beside each AP, where recorded: an AP of
    0.76 is nothing when the majority class is 0.76); empty without any."""
    attacked = [r for r in records if r.attack != "none"]
    if not attacked:
        return ""
    parts = []
    for r in attacked:
        text = f"{r.attack}={'n/a' if r.ap is None else f'{r.ap:.2f}'}"
        if r.ap_advantage is not None and r.ap_advantage == r.ap_advantage:  # not NaN
            text += f" (adv {r.ap_advantage:.2f})"
        parts.append(text)
    return "ap: " + " ".join(parts)


def seconds_text(records: list[Record]) -> str:
    """``train 0.5s, attacks 12.3s (pmc 11.9s, ns 0.4s)``: the training and its attack
    evaluations apart, since an attack such as PMC can take 20x the training; with one
    attack ``train 0.5s, attack pmc 11.9s``. Each attack record carries its own seconds."""
    text = f"train {records[0].train_seconds:.1f}s"
    attacked = [r for r in records if r.attack != "none"]
    if len(attacked) == 1:
        return f"{text}, attack {attacked[0].attack} {attacked[0].attack_seconds:.1f}s"
    if attacked:
        total = sum(r.attack_seconds for r in attacked)
        each = ", ".join(f"{r.attack} {r.attack_seconds:.1f}s" for r in attacked)
        return f"{text}, attacks {total:.1f}s ({each})"
    return text


def params_text(config: dict[str, Any]) -> str:
    """A search trial's sampled parameters: ``lr=0.0123 batch_size=64``."""
    return " ".join(
        f"{k}={f'{v:.4g}' if isinstance(v, float) else fmt(v)}" for k, v in config.items()
    )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _best_by_label(rows: list[dict[str, Any]], labels: dict[str, str], metric: str) -> dict:
    """label -> mean of ``metric`` over its rows (seeds), and how many rows."""
    groups: dict[str, list[float]] = {}
    for row in rows:
        if row[metric] is not None and row["trial_id"] in labels:
            groups.setdefault(labels[row["trial_id"]], []).append(float(row[metric]))
    return {label: (_mean(v), len(v)) for label, v in groups.items()}


def _ties(means: dict[str, tuple[float, int]], value: float, label: str) -> str:
    """`` (tied: a, b)`` naming the other labels with exactly ``value``; empty if none."""
    tied = sorted(k for k, (v, _) in means.items() if k != label and abs(v - value) <= 1e-12)
    if len(tied) > 3:
        return f" (tied: {', '.join(tied[:3])} and {len(tied) - 3} more)"
    return f" (tied: {', '.join(tied)})" if tied else ""


def grid_lines(plan: Plan, rows: list[dict[str, Any]], max_attacks: int = 4) -> list[str]:
    """The cell with the best mean MP over seeds (ties named; none when MP never varied);
    per attack, the defended cell (any cell when nothing is defended) with the lowest mean
    *advantage* over a no-information guess (analysis/answer.py's ``adv``), not the lowest
    AP: an attack that named the minority class for every row has a low AP and no
    information. Rows recorded before advantages existed fall back to AP, said so."""
    labels = {t: (text or "(one cell)") for t, text in cell_labels(plan, ("seed",)).items()}
    ok = [r for r in rows if r["status"] == "ok" and r["trial_id"] in labels]
    clean = [r for r in ok if r["attack"] == "none"]
    mp = _best_by_label(clean, labels, "mp")
    if not mp:
        return ["no training finished ok: nothing to summarize"]
    label, (value, n) = max(mp.items(), key=lambda kv: kv[1][0])
    if len(mp) > 1 and all(abs(v - value) <= 1e-12 for v, _ in mp.values()):
        lines = [f"mean MP {value:.4f} in every cell: no best"]
    else:
        seeds = plural(n, "seed")
        lines = [f"best mean MP: {value:.4f} over {seeds} at {label}{_ties(mp, value, label)}"]
    attacks = sorted({r["attack"] for r in ok if r["attack"] != "none"})
    for attack in attacks[:max_attacks]:
        hit = [r for r in ok if r["attack"] == attack]
        defended = [r for r in hit if r["defense"] != "none"] or hit
        metric = "ap_advantage" if any(r.get("ap_advantage") is not None for r in hit) else "ap"
        scores = _best_by_label(defended, labels, metric)
        if not scores:
            continue
        label, (value, n) = min(scores.items(), key=lambda kv: kv[1][0])
        # a training-time attack (AMC, LRB) has its own trainings and no clean row: the
        # MP its records carry is the attacked training's
        at_mp = mp.get(label, _best_by_label(hit, labels, "mp").get(label, (float("nan"), 0)))[0]
        kind = "defended cell" if defended is not hit else "cell"
        what = "advantage" if metric == "ap_advantage" else "AP (no chance baseline recorded)"
        lines.append(
            f"lowest mean {what} of {attack}: {value:.4f} ({kind} {label}, its MP "
            f"{at_mp:.4f}){_ties(scores, value, label)}"
        )
    if len(attacks) > max_attacks:
        more = plural(len(attacks) - max_attacks, "more attack")
        lines.append(f"... and {more} (see the report)")
    return lines


def answer_lines(table: pa.Table) -> list[str]:
    """The analysis' own verdict (analysis/answer.py): per scenario the cells that cannot
    be told apart from the best chance-aware C-DCS, ties named, and the attacks that were
    at chance even undefended. Empty when no attack row pairs with an undefended twin.
    ``table``: the sweep's records (RECORD_SCHEMA), as the summary already read them."""
    from analysis.answer import best_lines, build_answer
    from analysis.load import table_to_frame
    from analysis.ranking import DEFAULT_WEIGHTS, ranking_table
    from analysis.report import prepare

    dcs = prepare(table_to_frame(table.drop_columns(["spec_json"])), 0.5)
    if not dcs["dcs"].notna().any():
        return []
    return best_lines(build_answer(dcs, ranking_table(dcs, DEFAULT_WEIGHTS)))


def search_lines(plan: Plan, studies: list[dict[str, Any]], max_studies: int = 4) -> list[str]:
    """Per study (grid cell), the best trial per objective: its value and its params."""
    labels = cell_labels(plan)
    lines: list[str] = []
    for i, (training, study) in enumerate(zip(plan.trainings, studies, strict=True)):
        if i == max_studies:
            more = plural(len(studies) - max_studies, "more study", "more studies")
            lines.append(f"... and {more}")
            break
        label = labels[training.trial_id]
        name = f"study {i + 1}/{len(studies)}" + (f" {label}" if label else "")
        trials = [t for t in study.get("trials", []) if None not in t["values"]]
        if not trials:
            lines.append(f"{name}: no trial finished ok")
            continue
        for k, objective in enumerate(study["objectives"]):
            pick = max if objective["mode"] == "max" else min
            best = pick(trials, key=lambda t, k=k: float(t["values"][k]))
            value = float(best["values"][k])
            lines.append(
                f"{name}: best {objective['metric']} ({objective['mode']}) {value:.4g} "
                f"at {params_text(best['params'])}"
            )
    return lines


def vflsweep_command() -> str:
    """How to call ``vflsweep`` from here: its name when the PATH finds this installation's
    script, else the script's path (a venv not activated), else the module."""
    import shutil
    import sys

    script = Path(sys.executable).with_name("vflsweep")
    found = shutil.which("vflsweep")
    if found is not None and (not script.exists() or Path(found).resolve() == script.resolve()):
        return "vflsweep"
    if script.exists():
        return str(script)
    return f"{Path(sys.executable).name} -m sweep_engine.vflsweep"


def open_commands(sweep_dir: str, uri: str | None, explicit: bool) -> list[str]:
    """The exact commands that open the report and the tracking UI."""
    exe = vflsweep_command()
    analysis = f"{exe} analyze {sweep_dir}"
    if uri is not None and explicit:
        analysis += f" --mlflow-uri {uri}"
    lines = [f"report: {analysis}"]
    if uri is None:
        lines.append("mlflow: off (--no-mlflow)")
    elif uri.startswith(("http://", "https://")):
        lines.append(f"mlflow: open {uri} in a browser")
    elif explicit:
        lines.append(f"mlflow: {exe} ui --mlflow-uri {uri}")
    else:  # the default store, <results>/mlflow.db
        lines.append(f"mlflow: {exe} ui --results {Path(sweep_dir).parent}")
    return lines


def end_summary(plan: Plan, sweep_dir: Path, uri: str | None, explicit: bool) -> list[str]:
    """The lines after ``done:``: best cells from the records on disk, then the commands."""
    from sweep_engine.sink import RecordSink

    if plan.space.search is not None:
        searched = list(plan.space.search.params)
        studies = []
        for t in plan.trainings:
            path = study_path(sweep_dir, t.spec.model_dump(mode="json"), searched)
            studies.append(json.loads(path.read_text()) if path.exists() else {})
        for study in studies:
            study.setdefault("objectives", plan.space.search.model_dump()["objectives"])
        lines = search_lines(plan, studies)
    else:
        columns = ["trial_id", "attack", "status", "mp", "ap", "ap_advantage", "defense"]
        table = RecordSink(sweep_dir).read()
        rows = table.select(columns).to_pylist() if table.num_rows else []
        lines = grid_lines(plan, rows)
        if any(r["attack"] != "none" for r in rows):
            lines += answer_lines(table)
    return lines + open_commands(str(sweep_dir), uri, explicit)
