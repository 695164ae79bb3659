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

    import pandas as pd
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
        text = f"{r.label}={'n/a' if r.ap is None else f'{r.ap:.2f}'}"
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
        return f"{text}, attack {attacked[0].label} {attacked[0].attack_seconds:.1f}s"
    if attacked:
        total = sum(r.attack_seconds for r in attacked)
        each = ", ".join(f"{r.label} {r.attack_seconds:.1f}s" for r in attacked)
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
        if row.get(metric) is not None and row["trial_id"] in labels:
            groups.setdefault(labels[row["trial_id"]], []).append(float(row[metric]))
    return {label: (_mean(v), len(v)) for label, v in groups.items()}


# The label of a scenario's only cell (no axis but the seed varies in it): lines say "the
# one cell" instead of naming it, never "(one cell: (one cell))"
ONE_CELL = "(one cell)"


def _cell_named(kind: str, label: str) -> str:
    """``cell lr=0.1``; ``the one cell`` for a scenario's only cell, which has no name."""
    return f"the one {kind}" if label == ONE_CELL else f"{kind} {label}"


def _mp_line(mp: dict[str, tuple[float, int]], val: dict[str, tuple[float, int]]) -> str:
    """A scenario's MP line: the best cell chosen on the validation MP (``val``), with its
    test MP; without validation rows the range of test MPs, naming no best (choosing on
    the rows a number is reported on would flatter it)."""
    if len(mp) == 1:
        ((label, (value, n)),) = mp.items()
        where = ONE_CELL if label == ONE_CELL else f"(one cell: {label})"
        return f"mean MP {value:.4f} over {plural(n, 'seed')} {where}"
    values = [v for v, _ in mp.values()]
    if max(values) - min(values) <= 1e-12:
        return f"mean MP {values[0]:.4f} in every cell: no best"
    if not val:
        return (
            f"mean MP {min(values):.4f} to {max(values):.4f} over {plural(len(mp), 'cell')} "
            "(test rows); no best named: no validation rows (val_ratio 0) to select on"
        )
    label, (value, n) = max(val.items(), key=lambda kv: kv[1][0])
    test = mp.get(label, (float("nan"), 0))[0]
    return (
        f"best mean validation MP: {value:.4f} over {plural(n, 'seed')} at {label}"
        f"{_ties(val, value, label)}; its test MP {test:.4f}"
    )


def _ties(means: dict[str, tuple[float, int]], value: float, label: str) -> str:
    """`` (tied: a, b)`` naming the other labels with exactly ``value``; empty if none."""
    tied = sorted(k for k, (v, _) in means.items() if k != label and abs(v - value) <= 1e-12)
    if len(tied) > 3:
        return f" (tied: {', '.join(tied[:3])} and {len(tied) - 3} more)"
    return f" (tied: {', '.join(tied)})" if tied else ""


def plan_scenarios(plan: Plan) -> dict[str, str]:
    """trial_id -> its scenario as the analysis names it (``analysis.load.scenario_labels``
    over the planned specs), for rows read without their records' scenario columns."""
    import pandas as pd

    from analysis.load import SCENARIO_COLUMNS, scenario_labels

    specs = [t.spec.model_dump(mode="json") for t in plan.trainings]
    frame = pd.DataFrame(
        [{c: fmt(s[c]) if isinstance(s[c], dict) else s[c] for c in SCENARIO_COLUMNS if c in s}
         for s in specs]
    )  # fmt: skip
    labels = scenario_labels(frame).astype(str)
    return dict(zip([t.trial_id for t in plan.trainings], labels, strict=True))


def grid_lines(
    plan: Plan,
    rows: list[dict[str, Any]],
    max_attacks: int = 4,
    scenarios: dict[str, str] | None = None,
    at_chance: pd.DataFrame | None = None,
) -> list[str]:
    """``scenario_lines`` of every scenario, one after the other."""
    blocks = scenario_lines(plan, rows, max_attacks, scenarios, at_chance)
    return [line for block in blocks.values() for line in block]


def scenario_lines(
    plan: Plan,
    rows: list[dict[str, Any]],
    max_attacks: int = 4,
    scenarios: dict[str, str] | None = None,
    at_chance: pd.DataFrame | None = None,
) -> dict[str, list[str]]:
    """Per scenario (the dataset, partition, protocol… held fixed; ``scenarios``: trial_id
    -> label, from the records where they exist, else ``plan_scenarios``): the cell with
    the best mean MP over seeds (ties named; none when MP never varied); per attack, the
    defended cell (any cell when nothing is defended) with the lowest mean *advantage*
    over a no-information guess (analysis/answer.py's ``adv``), not the lowest AP: an
    attack that named the minority class for every row has a low AP and no information.
    Rows recorded before advantages existed fall back to AP, said so.

    Why per scenario: MP on digits against MP on adult compares tasks, not settings. An
    attack at chance even undefended there (``at_chance``: ``answer.chance_table``) gets
    that said instead of a "lowest" cell: a defense cannot be credited with an advantage
    the attack never had."""
    scenarios = scenarios if scenarios is not None else plan_scenarios(plan)
    ok = [r for r in rows if r["status"] == "ok" and r["trial_id"] in scenarios]
    stopped = [r for r in rows if r["status"] == "stopped" and r["trial_id"] in scenarios]
    if not any(r["attack"] == "none" for r in ok):
        return {"": ["no training finished ok: nothing to summarize"]}
    chance = {}
    if at_chance is not None:
        chance = {(str(c.scenario), str(c.attack)): c for c in at_chance.itertuples()}
    blocks: dict[str, list[str]] = {}
    for scenario in dict.fromkeys(
        scenarios[t.trial_id] for t in plan.trainings if t.trial_id in scenarios
    ):
        trainings = [t for t in plan.trainings if scenarios.get(t.trial_id) == scenario]
        axes = [a for a in varying_axes([t.cell for t in trainings]) if a != "seed"]
        labels = {t.trial_id: cell_text(t.cell, axes) or ONE_CELL for t in trainings}
        mine = [r for r in ok if r["trial_id"] in labels]
        lines = _scenario_lines(mine, labels, max_attacks, chance, scenario) if mine else []
        cut = sorted({labels[r["trial_id"]] for r in stopped if r["trial_id"] in labels})
        if cut:  # early stopping: no test MP, so in no line above
            shown = ", ".join(cut[:4]) + (f" and {len(cut) - 4} more" if len(cut) > 4 else "")
            lines.append(f"stopped early (no test MP): {plural(len(cut), 'cell')}: {shown}")
        if lines:
            blocks[scenario] = [f"{scenario}: {line}" for line in lines]
    return blocks


def _scenario_lines(
    ok: list[dict[str, Any]],
    labels: dict[str, str],
    max_attacks: int,
    chance: dict[tuple[str, str], Any],
    scenario: str,
) -> list[str]:
    """One scenario's best-MP line and its lines per attack (``scenario_lines``)."""
    clean = [r for r in ok if r["attack"] == "none"]
    mp = _best_by_label(clean, labels, "mp")
    lines = [_mp_line(mp, _best_by_label(clean, labels, "val_mp"))] if mp else []
    attacks = sorted({r["attack"] for r in ok if r["attack"] != "none"})
    for attack in attacks[:max_attacks]:
        hit = [r for r in ok if r["attack"] == attack]
        at = chance.get((scenario, attack))
        if at is not None:  # its interval reaches 0, or (< 3 seeds) its test-set error does
            spread = f"±{at.adv_half:.4f}" if at.adv_half == at.adv_half else ""
            seeds = plural(int(at.n_seeds), "seed")
            lines.append(
                f"{attack} was at chance even undefended (advantage {at.adv:.4f}{spread} over "
                f"{seeds}): no defense to credit"
            )
            continue
        defended = [r for r in hit if r["defense"] != "none"] or hit
        metric = "ap_advantage" if any(r.get("ap_advantage") is not None for r in hit) else "ap"
        scores = _best_by_label(defended, labels, metric)
        if not scores:
            continue
        label, (value, _) = min(scores.items(), key=lambda kv: kv[1][0])
        # a training-time attack (AMC, LRB) has its own trainings and no clean row: the
        # MP its records carry is the attacked training's
        at_mp = mp.get(label, _best_by_label(hit, labels, "mp").get(label, (float("nan"), 0)))[0]
        kind = "defended cell" if defended is not hit else "cell"
        what = "advantage" if metric == "ap_advantage" else "AP (no chance baseline recorded)"
        lines.append(
            f"lowest mean {what} of {attack}: {value:.4f} ({_cell_named(kind, label)}, its MP "
            f"{at_mp:.4f}){_ties(scores, value, label)}"
        )
    if len(attacks) > max_attacks:
        more = plural(len(attacks) - max_attacks, "more attack")
        lines.append(f"... and {more} (see the report)")
    return lines


def record_lines(plan: Plan, table: pa.Table) -> list[str]:
    """The summary of a grid sweep's records (RECORD_SCHEMA): per scenario its
    ``scenario_lines``, then the analysis' own verdict (analysis/answer.py's ``best_lines``:
    the cells that cannot be told apart from the best chance-aware C-DCS, ties named),
    one set of scenario names and one chance rule for both."""
    import pyarrow as pa

    from analysis.answer import best_lines, build_answer
    from analysis.load import attack_labels, scenario_labels, table_to_frame
    from analysis.ranking import DEFAULT_WEIGHTS, ranking_table
    from analysis.report import prepare
    from trainables.results.labels import is_adapted

    if table.num_rows and "extra" in table.column_names:  # headlines: the fixed settings;
        table = attack_labels(table)  # adapted attacks are the analysis' worst case
        fixed = [not is_adapted(str(a)) for a in table.column("attack").to_pylist()]
        table = table.filter(pa.array(fixed, type=pa.bool_()))
    columns = ["trial_id", "attack", "status", "mp", "val_mp", "ap", "ap_advantage", "defense"]
    rows = table.select(columns).to_pylist() if table.num_rows else []
    if not rows:
        return grid_lines(plan, rows)
    frame = table_to_frame(
        table.drop_columns([c for c in ("spec_json",) if c in table.column_names])
    )
    answer = None
    if any(r["attack"] != "none" for r in rows):
        frame = prepare(frame, 0.5)  # adds the scenario beside the DCS columns
        if frame["dcs"].notna().any():
            answer = build_answer(frame, ranking_table(frame, DEFAULT_WEIGHTS))
    else:
        frame = frame.assign(scenario=scenario_labels(frame))
    named = zip(frame["trial_id"].astype(str), frame["scenario"].astype(str), strict=True)
    scenarios = dict(named)
    at_chance = answer.at_chance if answer is not None else None
    lines = []
    for name, block in scenario_lines(plan, rows, 4, scenarios, at_chance).items():
        lines += block + (best_lines(answer, chance=False, scenario=name) if answer else [])
    return lines


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
        trials = [t for t in study.get("trials", []) if None not in t.get("values", [None])]
        stopped = study.get("n_stopped", 0)
        if stopped:
            lines.append(f"{name}: {plural(stopped, 'trial')} stopped early (no test MP)")
        if not trials:
            lines.append(f"{name}: no trial finished ok")
            continue
        for k, objective in enumerate(study["objectives"]):
            pick = max if objective["mode"] == "max" else min
            best = pick(trials, key=lambda t: float(t["values"][k]))  # called here: k is current
            value, at = float(best["values"][k]), params_text(best["params"])
            if objective["metric"] == "mp":  # chosen on the validation rows (search.selected)
                lines.append(
                    f"{name}: best validation MP {value:.4g} at {at}; its test MP "
                    f"{float(best['test_mp']):.4f}"
                )
                continue
            lines.append(
                f"{name}: best {objective['metric']} ({objective['mode']}) {value:.4g} at {at}"
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


def end_summary(
    plan: Plan, sweep_dir: Path, uri: str | None, explicit: bool, table: pa.Table | None = None
) -> list[str]:
    """The lines after ``done:``: best cells from the records on disk (``table``: already
    read and verified by the caller), then the commands."""
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
        lines = record_lines(plan, RecordSink(sweep_dir).read() if table is None else table)
    return lines + open_commands(str(sweep_dir), uri, explicit)
