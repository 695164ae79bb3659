"""Which study a search trial belongs to, and where that study's summary is on disk.

A search runs one Optuna study per grid cell (``search.py``); a cell is its spec without
the searched parameters, and ``<sweep>/search/<cell_id>.json`` holds the study's summary.
Why a module of its own: the search writes those files and the end-of-sweep summary
(``progress.py``) reads them, and the summary must not import the search, which imports
Optuna and Ray Tune and the runner that imports the summary's module.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

SEARCH_DIR = "search"


def without(spec: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """``spec`` (a JSON dump of a TrialSpec) without ``keys``, dotted ones too
    (``protocol_params.q``); ``spec`` itself is left as it was."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in spec.items()}
    for key in keys:
        head, _, tail = key.partition(".")
        if tail:
            out.get(head, {}).pop(tail, None)
        else:
            out.pop(head, None)
    return out


def cell_id(spec: dict[str, Any], searched: list[str]) -> str:
    """The id of the study ``spec`` belongs to: the same for every trial of one cell."""
    blob = json.dumps(without(spec, searched), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def study_path(sweep_dir: Path, spec: dict[str, Any], searched: list[str]) -> Path:
    """``<sweep>/search/<cell_id>.json``: the summary of the study ``spec`` belongs to."""
    return sweep_dir / SEARCH_DIR / f"{cell_id(spec, searched)}.json"
