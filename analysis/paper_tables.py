"""``--table latex|markdown``: the report's answer as tables to paste into a paper.

Why: the CSVs hold every number, but a paper wants VFLAIR's layout (per defense and
strength: T-DCS per attack type, C-DCS, rank) and, beside it, ours with intervals
(chance-aware C-DCS with its 95 % interval and its rank group), the contrasts of every
``--compare`` (Δ with its interval, Holm p, verdict) and the worst-case table. One file,
``report/tables.tex`` or ``report/tables.md``: a table per scenario and per comparison,
numbers to 3 decimals, nothing recomputed (the same frames the CSVs are written from).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from analysis.contrast_text import metric_text, strength
from analysis.report_data import Report

FORMATS = ("latex", "markdown")
SUFFIX = {"latex": "tex", "markdown": "md"}
LATEX_ESCAPES = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "#": r"\#", "_": r"\_", "$": r"\$",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}",
    "Δ": r"$\Delta$", "−": "-", "†": r"$\dagger$", "±": r"$\pm$", "→": r"$\to$",
}  # fmt: skip


def _num(value: object, sign: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int | float):
        return f"{value:+.3f}" if sign else f"{value:.3f}"
    return str(value)


def _ci(mean: object, lo: object, hi: object, sign: bool = False) -> str:
    text = _num(mean, sign)
    if all(isinstance(v, int | float) and math.isfinite(v) for v in (lo, hi)):
        text += f" [{_num(lo, sign)}, {_num(hi, sign)}]"
    return text


def render(head: list[str], rows: list[list[str]], caption: str, fmt: str) -> str:
    """One table in ``fmt``: a markdown pipe table under a bold caption, or a LaTeX
    ``table`` with booktabs rules and every cell escaped."""
    if fmt == "markdown":
        lines = [f"**{caption}**", "", "| " + " | ".join(head) + " |"]
        lines.append("|" + "|".join("---" for _ in head) + "|")
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
        return "\n".join(lines) + "\n"

    def esc(text: str) -> str:
        return "".join(LATEX_ESCAPES.get(ch, ch) for ch in text)

    lines = [r"\begin{table}[ht]", r"\centering", rf"\caption{{{esc(caption)}}}"]
    lines.append(r"\begin{tabular}{" + "l" * len(head) + "}")
    lines += [r"\toprule", " & ".join(esc(h) for h in head) + r" \\", r"\midrule"]
    lines += [" & ".join(esc(c) for c in r) + r" \\" for r in rows]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def ranking_tables(ranking: pd.DataFrame, fmt: str) -> list[str]:
    """Per scenario: VFLAIR's columns (T-DCS per type, C-DCS, rank), then ours."""
    types = [c.removeprefix("tdcs_") for c in ranking.columns if c.startswith("tdcs_")]
    head = ["defense", "strength", *(f"T-DCS {t}" for t in types), "C-DCS", "rank"]
    head += ["ca-C-DCS [95% CI]", "group", "seeds"]
    out = []
    for scenario, part in ranking.groupby("scenario", sort=False, observed=True):
        rows = []
        for r in part.to_dict("records"):
            row = [str(r["defense"]), strength(r.get("strength"))]
            row += [_num(r.get(f"tdcs_{t}")) for t in types]
            row += [_num(r.get("cdcs")), _num(r.get("rank")).split(".")[0]]
            row += [_ci(r.get("ca_cdcs"), r.get("ca_cdcs_lo"), r.get("ca_cdcs_hi"))]
            group = r.get("ca_group")
            row += ["-" if group is None or pd.isna(group) else str(int(group))]
            row += [str(int(r["n_seeds"])) if pd.notna(r.get("n_seeds")) else "-"]
            rows.append(row)
        out.append(render(head, rows, f"Defense ranking: {scenario}", fmt))
    return out


def contrast_tables(report: Report, fmt: str) -> list[str]:
    """Per comparison and context: each contrast and interaction with its interval."""
    out = []
    for found in report.contrasts.values():
        c, table = found.compare, found.table
        head = ["kind", "defense", "strength", "metric", c.a, c.b]
        head += [f"Δ {c.b}−{c.a} [95% CI]", "p (Holm)", "verdict"]
        for context, part in table.groupby("context", sort=False, observed=True):
            rows = [
                [str(r["kind"]), str(r["defense"]), strength(r["defense_param"]),
                 metric_text(str(r["metric"])),
                 _num(r["mean_a"]), _num(r["mean_b"]), _ci(r["delta"], r["lo"], r["hi"], True),
                 "-" if pd.isna(r["p_holm"]) else f"{r['p_holm']:.3g}",
                 str(r["verdict"]) + (" †" if r.get("not_a_baseline") else "")]
                for r in part.to_dict("records")
            ]  # fmt: skip
            family = f"Holm over {int(part['family'].max())} ({part['family_by'].iloc[0]})"
            caption = f"{c.axis}: {c.label} | {context}; {family}"
            out.append(render(head, rows, caption, fmt))
    return out


def worst_tables(report: Report, fmt: str) -> list[str]:
    """The worst-case attacks table: default vs adapted advantage per cell."""
    worst = report.worst
    if worst is None or worst.attacks.empty:
        return []
    head = ["attack", "defense", "strength", "adv default", "adv adapted", "gain"]
    out = []
    for scenario, part in worst.attacks.groupby("scenario", sort=False, observed=True):
        rows = [
            [str(r["attack"]), str(r["defense"]), strength(r["defense_param"]),
             _num(r["adv_default"]), _num(r["adv_adapted"]), _num(r["gain"], True)]
            for r in part.to_dict("records")
        ]  # fmt: skip
        out.append(render(head, rows, f"Worst case (tuned attacks): {scenario}", fmt))
    return out


def write_paper_tables(report: Report, folder: Path, fmt: str) -> Path:
    """``tables.tex`` / ``tables.md`` in ``folder``: ranking, contrasts, worst case."""
    parts: list[str] = []
    if not report.ranking.empty:
        parts += ranking_tables(report.ranking, fmt)
    parts += contrast_tables(report, fmt)
    parts += worst_tables(report, fmt)
    path = folder / f"tables.{SUFFIX[fmt]}"
    note = "%" if fmt == "latex" else "<!--"
    end = "" if fmt == "latex" else " -->"
    head = f"{note} vflsweep analyze --table {fmt}: numbers as in the report's CSVs{end}\n"
    if fmt == "latex":
        head += "% needs \\usepackage{booktabs}\n"
    path.write_text(head + "\n" + "\n".join(parts))
    return path
