"""A ``--compare`` as text: per context, both arms' undefended MP and advantages (a
setting's own cost is seen before any defense), then the contrasts, then the interactions.

The screen (``python -m analysis``) and ``report/index.md`` / ``index.html`` show the same
tables (``ContrastTable``); ``contrast_<axis>.csv`` holds every number behind them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.contrast import ALPHA, Contrasts
from analysis.uncertainty import MIN_SEEDS

HEAD = ["defense", "strength", "metric"]
# the columns a row's text reads (``cell``, ``interval``, ``tail``): ``to_dict`` of the
# table's other columns (labels, intervals, power) cost more than the text itself
SHOWN = ["defense", "defense_param", "metric", "mean_a", "mean_b", "delta", "n", "lo", "hi",
         "p_holm", "verdict", "not_a_baseline"]  # fmt: skip


@dataclass
class ContrastTable:
    """One context of one comparison, as cells of text."""

    title: str
    header: list[str]  # the undefended arms, what was left out
    contrast_head: list[str]
    contrast_rows: list[list[str]]
    interaction_head: list[str]
    interaction_rows: list[list[str]]


def number(value: float, sign: bool = False) -> str:
    if not np.isfinite(value):
        return "-"
    return f"{value:+.3f}" if sign else f"{value:.3f}"


def interval(row: Mapping[str, Any]) -> str:
    text = number(float(row["delta"]), sign=True)
    if int(row["n"]) < MIN_SEEDS:
        return text + f" (n={int(row['n'])})"
    return text + f" [{number(float(row['lo']), True)}, {number(float(row['hi']), True)}]"


def metric_text(metric: str) -> str:
    return {"mp": "MP", "cap": "CAP"}.get(metric, f"{metric} adv")


def strength(value: float | None) -> str:
    return "-" if value is None or pd.isna(value) else f"{float(value):g}"


def p_text(value: float) -> str:
    return "-" if not np.isfinite(value) else f"{value:.3g}"


def arm_text(base: pd.DataFrame, arm: str) -> str:
    """``MP 0.848±0.008, ns adv 0.310±0.100`` for one arm's undefended cell."""
    part = base[base["arm"] == arm]
    part = pd.concat([part[part["metric"] == "mp"], part[part["metric"] != "mp"]])
    texts = []
    for row in part.itertuples():
        half = f"±{row.half:.3f}" if np.isfinite(row.half) else f" (n={int(row.n)})"
        texts.append(f"{metric_text(str(row.metric))} {row.mean:.3f}{half}")
    return ", ".join(texts) or "no undefended training"


def tables(c: Contrasts) -> list[ContrastTable]:
    """One table per context, in the order the records list them (built once per
    comparison: the screen and the report page show the same)."""
    if c.text is None:
        c.text = _tables(c)
    return c.text


def _tables(c: Contrasts) -> list[ContrastTable]:
    a, b, axis = c.compare.a, c.compare.b, c.compare.axis
    out = []
    for context in c.contexts:
        rows = c.table[c.table["context"] == context]
        base = c.baselines[c.baselines["context"] == context]
        n = int(rows["n"].max()) if len(rows) else 0
        header = [f"undefended under {a}: {arm_text(base, 'a')}"]
        header.append(f"undefended under {b}: {arm_text(base, 'b')}")
        power = power_text(rows, c.effect)
        if power:
            header.append(power)
        gone = c.left_out[c.left_out["context"] == context]["metric"].astype(str).tolist()
        if gone:
            header.append(
                f"left out: {', '.join(gone)} (at chance undefended under both {a} and {b}: "
                "nothing to compare)"
            )
        shown = rows[[c for c in SHOWN if c in rows.columns]]  # to_dict: only these
        contrast = shown[rows["kind"] == "contrast"]
        inter = shown[rows["kind"] == "interaction"]
        out.append(
            ContrastTable(
                title=f"{axis}: {c.compare.label} | {context} (up to {n} paired seeds)",
                header=header,
                contrast_head=[*HEAD, a, b, f"Δ {b}−{a} [95% CI]", "p (Holm)", "verdict"],
                contrast_rows=[
                    [*cell(r), number(r["mean_a"]), number(r["mean_b"]), *tail(r)]
                    for r in contrast.to_dict("records")  # plain dicts: 20x iterrows' speed
                ],
                interaction_head=[
                    *HEAD,
                    f"effect under {a}",
                    f"effect under {b}",
                    "ΔΔ [95% CI]",
                    "p (Holm)",
                    "verdict",
                ],
                interaction_rows=[
                    [*cell(r), number(r["mean_a"], True), number(r["mean_b"], True), *tail(r)]
                    for r in inter.to_dict("records")
                ],
            )
        )
    return out


def cell(row: Mapping[str, Any]) -> list[str]:
    return [str(row["defense"]), strength(row["defense_param"]), metric_text(str(row["metric"]))]


def tail(row: Mapping[str, Any]) -> list[str]:
    mark = " †" if row.get("not_a_baseline") else ""  # analysis/baselines.py: see the note
    return [interval(row), p_text(float(row["p_holm"])), str(row["verdict"]) + mark]


def power_text(rows: pd.DataFrame, effect: float) -> str:
    """``detectable (80 % power): MP ±0.012, ns adv ±0.150; seeds for 0.05: MP 3, ns adv
    28``, from each metric's undefended contrast (``power.py``): what "cannot tell" means
    at these seeds."""
    from analysis.power import seeds_needed

    undefended = rows[(rows["kind"] == "contrast") & (rows["defense"] == "none")]
    undefended = undefended[np.isfinite(undefended["mde"].astype(float))]
    if "mde" not in rows.columns or undefended.empty:
        return ""
    found, needed = [], []
    for r in undefended.to_dict("records"):
        name = metric_text(str(r["metric"]))
        found.append(f"{name} ±{float(r['mde']):.3f}")
        n = seeds_needed(float(r["std"]), float(r["n"]), float(r["se"]), effect)
        needed.append(f"{name} {n if n is not None else 'no number (test-set error)'}")
    return (
        "smallest Δ these seeds could detect (80 % power, α 0.05 uncorrected, undefended): "
        f"{', '.join(found)}; seeds to detect Δ {effect:g}: {', '.join(needed)}"
    )


FAMILY_TEXT = {
    "comparison": "over the {m} contrasts and interactions of this comparison",
    "attack": "within each metric's contrasts and interactions of this comparison apart "
    "(families of {sizes})",
    "analysis": "over all {m} contrasts and interactions of every comparison of this analysis",
}


def legend(c: Contrasts) -> list[str]:
    table = c.table
    family = int(table["family"].max()) if len(table) else 0
    by = str(table["family_by"].iloc[0]) if len(table) and "family_by" in table else "comparison"
    sizes = "/".join(str(int(v)) for v in pd.unique(table["family"])) if len(table) else "0"
    a, b = c.compare.a, c.compare.b
    return [
        f"Δ = {b} − {a}, paired over seeds (same seed, defense and context). MP: main-task "
        "accuracy; adv: attack advantage over a no-information guess. 95% CI: t over the "
        "paired seeds with the test-set error, uncorrected. p (Holm): Holm-corrected "
        f"{FAMILY_TEXT[by].format(m=family, sizes=sizes)} (--family {by}); verdicts read it "
        f"at {ALPHA:g}: an interval that excludes 0 may still read 'cannot tell' once "
        "corrected. Interaction: a defense's effect (defended − undefended, same seed) under "
        f"{b} minus under {a}; on adv, negative = it removes more leakage under {b}."
    ]


def fixed_width(head: list[str], rows: list[list[str]], max_rows: int | None) -> list[str]:
    shown = rows if max_rows is None else rows[:max_rows]
    widths = [max(len(r[i]) for r in [head, *shown]) for i in range(len(head))]
    lines = [
        ("    " + "  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True))).rstrip()
        for r in [head, *shown]
    ]
    if len(rows) > len(shown):
        lines.append(f"    ... {len(rows) - len(shown)} more rows in report/index.md")
    return lines


def contrast_lines(c: Contrasts, max_rows: int | None = 20) -> list[str]:
    """Every context's tables, then the legend and notes once."""
    import textwrap

    lines: list[str] = []
    for t in tables(c):
        lines.append(f"== {t.title} ==")
        lines += [
            part
            for h in t.header
            for part in textwrap.wrap(h, 98, initial_indent="  ", subsequent_indent="    ")
        ]
        lines.append("  contrast:")
        lines += fixed_width(t.contrast_head, t.contrast_rows, max_rows)
        if t.interaction_rows:
            lines.append("  interaction (does the defense act equally under both?):")
            lines += fixed_width(t.interaction_head, t.interaction_rows, max_rows)
    lines += [part for line in legend(c) for part in textwrap.wrap(line, 96)]
    return lines + [f"note: {n}" for n in c.notes]
