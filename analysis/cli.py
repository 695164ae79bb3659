"""``python -m analysis <sweep dir>``: per-axis tables and plots of any sweep (``by_axis.csv``,
``best.json``, ``axis_<axis>.png``) and, when it ran attacks, DCS tables and plots, into
``<sweep dir>/report/``, logged to the sweep's MLflow parent run.

Exit codes: 0 report written (an MLflow failure only warns: the answer comes from the
records), 2 bad input (nothing written).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, cast

from analysis.compare import parse_compares, parse_group, record_levels
from analysis.completeness import completeness_lines
from analysis.contrast import FAMILIES
from analysis.kept_comparisons import kept_lines
from analysis.load import read_records
from analysis.paper_tables import FORMATS, write_paper_tables
from analysis.plot_jobs import PlotPool
from analysis.ranking import parse_weights
from analysis.report import Report, make
from trainables.errors import ConfigError
from trainables.results.manifest import read_manifest


def build_parser(prog: str = "python -m analysis") -> argparse.ArgumentParser:
    """The options; ``prog`` is the command the user typed (``vflsweep analyze`` too), which
    the usage line and every argparse error name."""
    p = argparse.ArgumentParser(
        prog=prog,
        description="Analyze a sweep's records: print the answer tables and write the "
        "report folder (per-axis tables and plots; DCS rankings, gaps, CAP and their plots "
        "when it ran attacks) into <sweep dir>/report/, and log it to the sweep's MLflow run.",
    )
    p.add_argument("sweep_dir", help="the sweep's folder, e.g. results/smoke")
    p.add_argument("--beta", type=float, default=0.5, help="DCS weight on MP (default 0.5)")
    p.add_argument("--weights", default=None, help="C-DCS weights, e.g. LI=0.5,FR=0.5")
    p.add_argument(
        "--compare",
        action="append",
        default=None,
        help="AXIS=A:B: contrasts (B − A, paired over seeds, with intervals and Holm-corrected "
        "verdicts), interactions and DCS gaps, e.g. protocol=fedsgd:fedbcd; any spec field "
        "(dotted: protocol_params.q). AXIS=REF:B,C contrasts each level with REF, AXIS=REF:* "
        "every other level; repeat for more comparisons. Default: the space's analysis.compare",
    )
    p.add_argument(
        "--family",
        choices=FAMILIES,
        default="comparison",
        help="what Holm corrects over: each comparison's rows (default), each attack's rows "
        "of a comparison apart, or every comparison of this analysis together",
    )
    p.add_argument(
        "--effect",
        type=float,
        default=0.05,
        help="the difference (in MP or advantage) whose needed seeds each comparison's "
        "header states (default 0.05)",
    )
    p.add_argument(
        "--table",
        choices=FORMATS,
        default=None,
        help="also write the ranking (VFLAIR's layout and ours with intervals), the contrasts "
        "and the worst case as paper-ready tables: report/tables.tex or report/tables.md",
    )
    p.add_argument("--out", default=None, help="report folder (default <sweep dir>/report)")
    p.add_argument("--no-plots", action="store_true", help="tables only")
    p.add_argument(
        "--mlflow-uri",
        default=None,
        help="tracking server, e.g. http://127.0.0.1:5000 "
        "(default sqlite:///<results>/mlflow.db when that file exists)",
    )
    p.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the summary (counts, files, timings) as one JSON line instead of the tables",
    )
    p.add_argument(
        "--rows", type=int, default=20, help="rows per scenario on screen (index.md has all)"
    )
    return p


def run(args: argparse.Namespace) -> tuple[dict[str, object], list[str]]:
    """Validate everything, build and write the report; returns the summary (``--json``
    prints it) and the lines printed otherwise (the answer's tables, where the report is)."""
    sweep_dir = Path(args.sweep_dir)
    if not 0.0 <= args.beta <= 1.0:
        raise ConfigError(f"--beta={args.beta}: must be between 0 and 1")
    if not args.effect > 0:
        raise ConfigError(
            f"--effect={args.effect}: must be above 0 (a difference in MP or advantage)"
        )
    weights = parse_weights(args.weights)
    manifest = read_manifest(sweep_dir)
    texts = args.compare if args.compare is not None else space_compares(manifest)
    for text in texts:  # bad syntax: refused before any record is read
        parse_group(text)
    started = time.perf_counter()
    out = Path(args.out) if args.out else sweep_dir / "report"
    # plot workers first: they import matplotlib while this process reads the records
    with PlotPool() if not args.no_plots else nullcontext() as pool:
        clock = time.perf_counter()
        records = read_records(sweep_dir)
        read_s = time.perf_counter() - clock
        compares = parse_compares(texts, record_levels(records))  # ``*``: the records' levels
        report = make(
            records, args.beta, weights, compares, out, manifest, pool, args.family, args.effect
        )
    report.timings = {"read": round(read_s, 4), **report.timings}
    report.timings["report"] = round(time.perf_counter() - started, 4)
    report.timings["cpu_main"] = round(time.process_time(), 4)  # imports included
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)  # the plot workers, reaped
    report.timings["cpu_plot_workers"] = round(workers.ru_utime + workers.ru_stime, 4)
    summary = {**report.summary, "report": str(out), "timings": report.timings}
    if args.table is not None:
        summary["tables"] = str(write_paper_tables(report, out, args.table))
    lines = screen_lines(report, out, args.rows)
    lines = [*completeness_lines(report.summary), *lines]  # how complete, before any number
    if "tables" in summary:
        lines.append(f"paper tables ({args.table}): {summary['tables']}")
    if (sweep_dir / "search").is_dir():  # Optuna's own analysis of the searches, into the
        from analysis.optuna_report import write_studies  # report: MLflow gets it with it

        summary["optuna"] = write_studies(sweep_dir, out / "optuna", plots=not args.no_plots)
    uri = tracking_uri(args, sweep_dir)
    if uri is not None:
        summary["mlflow"] = log_to_mlflow(sweep_dir, uri, out, report)
    return summary, lines


def log_to_mlflow(sweep_dir: Path, uri: str, out: Path, report: Report) -> dict[str, object]:
    """Log the report to MLflow; a failure warns and is returned, never raised: the answer
    and the report folder come from the records, and MLflow only mirrors them."""
    from analysis.tracking import log_analysis

    try:
        return log_analysis(sweep_dir, uri, out, report.ranking, report.dcs, report.best)
    except Exception as err:  # a broken or unreachable store, a full disk: the answer stands
        first = (str(err).strip().splitlines() or [""])[0][:300]
        why = f"{type(err).__name__}: {first}"
        print(
            f"warning: MLflow logging to {uri} failed ({why}); the report is written and "
            "the answer below is complete; re-run the analysis to log it (--no-mlflow: skip)",
            file=sys.stderr,
            flush=True,
        )
        return {"error": why}


def space_compares(manifest: dict[str, object] | None) -> list[str]:
    """The comparisons the sweep's space asks for (``analysis: {compare: [...]}``)."""
    space = (manifest or {}).get("space_spec")
    block = space.get("analysis") if isinstance(space, dict) else None
    compare = block.get("compare") if isinstance(block, dict) else None
    return [str(c) for c in compare] if isinstance(compare, list) else []


def tracking_uri(args: argparse.Namespace, sweep_dir: Path) -> str | None:
    """The URI given, else the sweep's default sqlite store if the sweep created one."""
    if args.no_mlflow:
        return None
    if args.mlflow_uri:
        return str(args.mlflow_uri)
    from analysis.tracking import default_uri

    results = sweep_dir.resolve().parent
    return default_uri(results) if (results / "mlflow.db").exists() else None


def screen_lines(report: Report, out: Path, rows: int) -> list[str]:
    """What a researcher reads first: the answer's tables, then where everything is."""
    from analysis.answer import answer_lines
    from analysis.contrast_text import contrast_lines

    lines = answer_lines(report.answer, rows) if report.answer is not None else []
    if report.answer is None:
        lines.append(str(report.summary.get("dcs", "no attack rows")))
        metrics = cast(dict[str, dict[str, Any]], report.best.get("metrics") or {})
        for metric, entry in metrics.items():
            best = entry.get("best")
            if best is not None:
                tied = [c["cell"] for c in entry.get("tied", [])]
                text = f"best {metric} ({entry['direction']}): {best['mean']:.4g} at {best['cell']}"
                if "selected_mean" in best:
                    text += f" (chosen on {entry['selected_on']} {best['selected_mean']:.4g})"
                lines.append(text + (f" (tied: {', '.join(tied)})" if tied else ""))
    if report.worst is not None:
        from analysis.worst_case import worst_lines

        lines += worst_lines(report.worst, rows)
        lines.append(f"every worst-case cell: {out / 'worst_case_attacks.csv'}")
    for found in report.contrasts.values():
        lines += contrast_lines(found, rows)
        lines.append(f"every contrast: {out / f'contrast_{found.compare.key}.csv'}")
    lines += kept_lines(report.summary)
    lines.append(f"report: {out / 'index.html'} (also index.md, ranking.csv, summary.json)")
    return lines


def main(argv: list[str] | None = None, prog: str = "python -m analysis") -> int:
    """The command: 0 report written, 2 bad input; ``prog`` names it in usage and errors."""
    args = build_parser(prog).parse_args(argv)
    try:
        summary, lines = run(args)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary, default=str))
    else:
        print("\n".join(lines))
    return 0
