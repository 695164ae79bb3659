"""Comparisons an earlier analysis wrote, kept when a later one asks for others.

Why: a researcher asks ``--compare ssl_variant=local_simsiam:*`` today and
``--compare aligned_ratio=0.2:0.4`` tomorrow; the report folder is rebuilt by every analysis
(``report.py`` swaps a fresh folder in), so the second used to delete the first's files.
Now each comparison's files are listed in ``comparisons.json`` with the records they were
computed from; a later analysis copies the files of every comparison it did not redo into
its new folder and keeps their entries, marked ``kept`` with when they were made. A kept
comparison whose records have changed since (a resumed or extended sweep) is marked
``stale`` with the command that recomputes it: its numbers are never passed off as current.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.report_data import Report

INDEX = "comparisons.json"


def fingerprint(dcs: pd.DataFrame) -> str:
    """The records an analysis read: its trainings' ids and the row count, hashed."""
    ids = sorted(str(t) for t in dcs["trial_id"].unique()) if len(dcs) else []
    return hashlib.sha256(("\n".join(ids) + f"\n{len(dcs)}").encode()).hexdigest()[:16]


def files_of(key: str, folder: Path) -> list[str]:
    """The files in ``folder`` that belong to comparison ``key``."""
    names = [f"contrast_{key}.csv", f"contrast_{key}.parquet", f"contrast_{key}_baselines.csv"]
    names += [f"dcs_gap_{key}.csv", f"dcs_gap_{key}_summary.csv", f"dcs_gap_{key}.png"]
    return [n for n in names if (folder / n).is_file()]


def _earlier(out: Path) -> dict[str, Any]:
    try:
        data = json.loads((out / INDEX).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def keep(report: Report, tmp: Path, out: Path | None) -> dict[str, Any]:
    """Write ``comparisons.json`` into ``tmp`` (the new report): this analysis's comparisons,
    then those of ``out`` (the report it replaces) it did not redo, their files copied into
    ``tmp``. Returns the index; ``report.summary["comparisons_kept"]`` lists the kept ones."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    records = fingerprint(report.dcs)
    index: dict[str, Any] = {}
    for key, found in report.contrasts.items():
        index[key] = {
            "compare": found.compare.text,
            "files": files_of(key, tmp),
            "analyzed_at": now,
            "records": records,
            "trainings": int(report.dcs["trial_id"].nunique()),
        }
    kept = []
    source = out if out is not None else tmp
    earlier = _earlier(out) if out is not None else {}
    for key, entry in earlier.items():
        if key in index or not isinstance(entry, dict) or not re.fullmatch(r"[\w.=-]+", key):
            continue  # a key is ``Compare.key``: a file-name part, never a path
        listed = set(entry.get("files") or [])  # only a comparison's own names, no path
        present = [n for n in files_of(str(key), source) if n in listed]
        if not present:
            continue
        for name in present:
            shutil.copy2(source / name, tmp / name)
        entry = {**entry, "files": present, "kept": True}
        if entry.get("records") != records:
            entry["stale"] = (
                f"the records changed since ({entry.get('trainings')} trainings then, "
                f"{index_trainings(report)} now): re-run with --compare {entry.get('compare')}"
            )
        else:
            entry.pop("stale", None)
        index[key] = entry
        kept.append({k: entry.get(k) for k in ("compare", "analyzed_at", "stale") if entry.get(k)})
    (tmp / INDEX).write_text(json.dumps(index, indent=2))
    if kept:
        report.summary["comparisons_kept"] = kept
    return index


def index_trainings(report: Report) -> int:
    return int(report.dcs["trial_id"].nunique()) if len(report.dcs) else 0


def kept_lines(summary: dict[str, Any]) -> list[str]:
    """One line per comparison kept from an earlier analysis (the screen and index.md)."""
    out = []
    for entry in summary.get("comparisons_kept", []):
        text = f"kept from an earlier analysis ({entry.get('analyzed_at')}): --compare "
        text += str(entry.get("compare"))
        if entry.get("stale"):
            text += f"; STALE: {entry['stale']}"
        out.append(text)
    return out
