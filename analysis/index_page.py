"""``report/index.md`` and ``report/index.html``: the answer ``python -m analysis`` prints,
the per-attack detail behind it, then every figure and table of the report.

Why both: Markdown reads well in a terminal, a repository and MLflow's artifact view;
HTML opens in a browser with the figures inline. Both come from the same cells of text
(``answer.ScenarioTable``), so neither can say something the screen did not. No template
library: a handful of tags.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from analysis.answer import Answer, ScenarioTable, legend_of, pm_text, scenario_table, strength_text
from analysis.completeness import completeness_lines
from analysis.kept_comparisons import kept_lines

if TYPE_CHECKING:
    from analysis.report_data import Report

DETAIL_HEAD = [
    "attack",
    "type",
    "defense",
    "strength",
    "AP",
    "chance",
    "advantage",
    "collapsed seeds",
    "ca-DCS",
    "group",
    "VFLAIR DCS",
]


def detail_rows(answer: Answer, scenario: str) -> list[list[str]]:
    """Per attack and cell: the AP next to its no-information baseline, the advantage, how
    often the attack collapsed to one class, and both DCS."""
    rows = []
    part = answer.by_attack[answer.by_attack["scenario"] == scenario]
    for r in part.itertuples():
        group = "-" if not np.isfinite(r.ca_group) else str(int(r.ca_group))
        rows.append(
            [
                str(r.attack),
                str(r.attack_type),
                str(r.defense),
                strength_text(r.defense_param),
                f"{r.ap:.4f}",
                "-" if not np.isfinite(r.ap_chance) else f"{r.ap_chance:.4f}",
                pm_text(r.adv, r.adv_half, int(r.n_seeds)),
                f"{int(r.collapsed_seeds)}/{int(r.n_seeds)}",
                "-" if not np.isfinite(r.ca_dcs) else f"{r.ca_dcs:.4f}",
                group + ("=" if bool(r.ca_tied) and str(r.defense) != "none" else ""),
                f"{r.dcs:.4f}",
            ]
        )
    return rows


# Separators that neither escape below touches. Why: a report's contrast tables hold some
# 300k cells; the cells of a table are joined with these, escaped in one call and the
# separators replaced by the markup, instead of one call and one f-string per cell.
_CELL, _ROW = "\x00", "\x01"


def _joined(rows: list[list[str]]) -> str | None:
    """The cells joined by ``_CELL``, the rows by ``_ROW``; None when that cannot be split
    back (no rows, a row without cells, a cell holding a separator)."""
    if not rows or not all(rows):
        return None
    text = _ROW.join(_CELL.join(r) for r in rows)
    cells = sum(len(r) for r in rows)
    if text.count(_CELL) != cells - len(rows) or text.count(_ROW) != len(rows) - 1:
        return None
    return text


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    text = _joined(rows)
    if text is None:
        body = [line(r) for r in rows]
    else:
        escaped = text.replace("|", "\\|").replace(_CELL, " | ")
        body = [f"| {r} |" for r in escaped.split(_ROW)]
    return [line(head), "|" + "---|" * len(head), *body]


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    text = _joined(rows)
    if text is None:
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows
        )
    else:
        inner = html.escape(text).replace(_CELL, "</td><td>").replace(_ROW, "</td></tr><tr><td>")
        body = f"<tr><td>{inner}</td></tr>"
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def contrast_sections(report: Report) -> tuple[list[str], list[str]]:
    """Each ``--compare``'s tables (contrast_text.py) as markdown and as HTML."""
    from analysis.contrast_text import legend, tables

    md: list[str] = []
    page: list[str] = []
    for found in report.contrasts.values():
        md += [f"## Comparison {found.compare.text} (Δ = {found.compare.label})", ""]
        page.append(f"<h2>Comparison {html.escape(found.compare.text)}</h2>")
        for t in tables(found):
            md += [f"### {t.title}", "", *[f"- {h}" for h in t.header], ""]
            md += ["Contrast:", "", *_md_table(t.contrast_head, t.contrast_rows), ""]
            page.append(f"<h3>{html.escape(t.title)}</h3>")
            page += [f"<p>{html.escape(h)}</p>" for h in t.header]
            page.append(_html_table(t.contrast_head, t.contrast_rows))
            if t.interaction_rows:
                md += ["Interaction (does the defense act equally under both?):", ""]
                md += [*_md_table(t.interaction_head, t.interaction_rows), ""]
                page.append("<p>Interaction (does the defense act equally under both?):</p>")
                page.append(_html_table(t.interaction_head, t.interaction_rows))
        md += [f"> {line}" for line in legend(found)] + [""]
        page += [f"<p class='note'>{html.escape(line)}</p>" for line in legend(found)]
    return md, page


def write_pages(report: Report, folder: Path) -> tuple[Path, Path]:
    """Both pages into ``folder`` (the report's staging folder, figures already drawn)."""
    answer = report.answer
    tables: list[tuple[ScenarioTable, list[list[str]]]] = []
    if answer is not None:
        scenarios = [str(s) for s in answer.cells["scenario"].unique()]
        tables = [(scenario_table(answer, s), detail_rows(answer, s)) for s in scenarios]
    figures = sorted(p.name for p in folder.glob("*.png"))
    files = sorted(p.name for p in folder.iterdir() if p.suffix in {".csv", ".json", ".parquet"})
    notes = [] if answer is None else answer.notes
    md = ["# Sweep report", ""]
    page = ["<!doctype html><meta charset='utf-8'><title>Sweep report</title>", STYLE]
    page.append("<h1>Sweep report</h1>")
    head = completeness_lines(report.summary)  # how complete, before any number
    if head:
        md += [f"**{head[0]}**", "", *(f"- {line.strip()}" for line in head[1:]), ""]
        page.append(f"<p class='warn'>{html.escape(head[0])}</p><ul>")
        page += [f"<li>{html.escape(line.strip())}</li>" for line in head[1:]]
        page.append("</ul>")
    if not tables:
        text = str(report.summary.get("dcs", "no attack rows: no defense ranking"))
        md += [text, ""]
        page.append(f"<p>{html.escape(text)}</p>")
    for table, detail in tables:
        md += [f"## {table.title}", ""]
        md += [f"- **{line}**" for line in table.chance] + ([""] if table.chance else [])
        md += [*_md_table(table.head, table.rows), ""]
        md += ["### Per attack", "", *_md_table(DETAIL_HEAD, detail), ""]
        page.append(f"<h2>{html.escape(table.title)}</h2>")
        page += [f"<p class='warn'>{html.escape(line)}</p>" for line in table.chance]
        page.append(_html_table(table.head, table.rows))
        page.append("<h3>Per attack</h3>" + _html_table(DETAIL_HEAD, detail))
    contrast_md, contrast_html = contrast_sections(report)
    md += contrast_md
    page += contrast_html
    for line in kept_lines(report.summary):  # their files are listed below with the rest
        md += [f"> {line}", ""]
        page.append(f"<p class='note'>{html.escape(line)}</p>")
    if report.worst is not None:  # adaptive attackers: the screen's section, verbatim
        from analysis.worst_case import worst_lines

        worst = worst_lines(report.worst, rows=1000)
        md += ["## Worst case: attacks tuned by their attacker", "", "```", *worst, "```", ""]
        page.append("<h2>Worst case: attacks tuned by their attacker</h2>")
        page.append(f"<pre>{html.escape(chr(10).join(worst))}</pre>")
    legend = legend_of([table for table, _ in tables])
    md += [f"> {line}" for line in legend] + ([""] if legend else [])
    page += [f"<p class='note'>{html.escape(line)}</p>" for line in legend]
    if notes:
        md += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
        page.append("<h2>Notes</h2><ul>")
        page += [f"<li>{html.escape(n)}</li>" for n in notes] + ["</ul>"]
    md += ["## Figures", ""] + [f"![{name}]({name})" for name in figures] + [""]
    page.append("<h2>Figures</h2>")
    page += [
        f"<figure><img src='{name}'><figcaption>{name}</figcaption></figure>" for name in figures
    ]
    md += ["## Tables", ""] + [f"- [{name}]({name})" for name in files] + [""]
    page.append("<h2>Tables</h2><ul>")
    page += [f"<li><a href='{name}'>{name}</a></li>" for name in files] + ["</ul>"]
    md_path, html_path = folder / "index.md", folder / "index.html"
    md_path.write_text("\n".join(md))
    html_path.write_text("\n".join(page) + "\n")
    return md_path, html_path


STYLE = (
    "<style>body{font-family:sans-serif;margin:2em;max-width:80em}"
    "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;"
    "padding:2px 6px;font-size:13px;text-align:left}.warn{color:#a00}.note{color:#555;"
    "font-size:12px}img{max-width:100%}pre{white-space:pre;overflow-x:auto;max-width:100%}"
    "</style>"
)
