"""Reading ``<results>/<sweep>/manifest.json``: what the sweep varies, written beside its records.

Why a manifest: the records hold each training's full spec (``spec_json``) but not which
of its fields the sweep varied, nor the space they came from. The analysis needs the
axes to group by (``by_axis.csv``), and a reader of a results folder needs the space
without hunting for the YAML file that produced it (it may have changed since). The
engine writes it (``sweep_engine/manifest.py``); the reading and the flattening of a spec
that both sides share live here, so the analysis reads it without importing the engine.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
# spec fields that are parameter mappings: grid axes may be dotted into them
# ("protocol_params.q", "model_params.n_trees"; sweep_engine/space.py), and a flat spec
# dots them out the same way
NESTED_FIELDS = (
    "protocol_params",
    "dataset_params",
    "model_params",
    "defense_params",
    "split_params",
)


def flat_spec(spec: dict[str, object]) -> dict[str, object]:
    """A spec dict with its parameter mappings dotted out (``protocol_params.q``); other
    non-scalar values (``hidden``, ``stack``) as canonical JSON strings."""
    out: dict[str, object] = {}
    for key, value in spec.items():
        if key in NESTED_FIELDS and isinstance(value, dict):
            for inner, item in value.items():
                out[f"{key}.{inner}"] = item
        elif isinstance(value, dict | list | tuple):
            out[key] = json.dumps(value, sort_keys=True)
        else:
            out[key] = value
    return out


def read_manifest(sweep_dir: Path) -> dict[str, Any] | None:
    """The sweep's manifest, or None when absent or unreadable (sweeps run before it
    existed, a hand-made records folder): the analysis then infers the axes."""
    path = sweep_dir / MANIFEST
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def of_planned(
    statuses: dict[str, str], manifest: dict[str, object] | None
) -> tuple[dict[str, str], int]:
    """(the statuses of the manifest's planned trainings, how many others were recorded).

    Why: a folder can hold records of trainings its plan does not have (an older plan of the
    same name, a copied file); ``status`` and an answer's completeness count the plan's
    only. A manifest without ``trial_ids`` (a search, an older sweep) keeps them all."""
    ids = (manifest or {}).get("trial_ids")
    if not isinstance(ids, list):
        return statuses, 0
    planned = set(map(str, ids))
    kept = {tid: s for tid, s in statuses.items() if tid in planned}
    return kept, len(statuses) - len(kept)
