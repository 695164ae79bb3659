"""``<results>/<sweep>/manifest.json``: what the sweep varies, written beside its records.

Why a manifest: the records hold each training's full spec (``spec_json``) but not which
of its fields the sweep varied, nor the space they came from. The analysis needs the
axes to group by (``by_axis.csv``), and a reader of a results folder needs the space
without hunting for the YAML file that produced it (it may have changed since). Written
atomically (temporary file, fsync, rename) each time a sweep runs, never on a dry run or
on bad input; a re-run rewrites it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweep_engine.space import NESTED_FIELDS
from trainables.records import ENGINE_VERSION

if TYPE_CHECKING:  # the analysis imports this module without the planner (torch, data)
    from sweep_engine.plan import Plan

MANIFEST = "manifest.json"


def flat_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A spec dict with its parameter mappings dotted out (``protocol_params.q``); other
    non-scalar values (``hidden``, ``stack``) as canonical JSON strings."""
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if key in NESTED_FIELDS and isinstance(value, dict):
            for inner, item in value.items():
                out[f"{key}.{inner}"] = item
        elif isinstance(value, dict | list | tuple):
            out[key] = json.dumps(value, sort_keys=True)
        else:
            out[key] = value
    return out


def varying_fields(plan: Plan) -> list[str]:
    """Spec fields (dotted) whose value differs between the planned trainings, plus the
    searched parameters (Optuna fills those per trial, so they vary too)."""
    flats = [flat_spec(t.spec.model_dump(mode="json")) for t in plan.trainings]
    keys = sorted({k for flat in flats for k in flat})
    varying = [k for k in keys if len({json.dumps(f.get(k)) for f in flats}) > 1]
    searched = list(plan.space.search.params) if plan.space.search else []
    return varying + [k for k in searched if k not in varying]


def build_manifest(plan: Plan) -> dict[str, Any]:
    """The manifest of ``plan`` (JSON-ready)."""
    space = plan.space
    summary = plan.summary()
    search = space.search.model_dump(mode="json") if space.search else None
    return {
        "space": space.name,
        "source": space.source,
        "space_spec": space.model_dump(mode="json", exclude={"source"}),
        "axes": space.effective_grid(),
        "attacks": [e.model_dump(mode="json") for e in space.attack_entries()],
        "search": search,
        "varying_fields": varying_fields(plan),
        "plan": {
            k: summary[k] for k in ("trainings", "evaluations", "dropped", "duplicates_merged")
        },
        "engine_version": ENGINE_VERSION,
        "created_at": datetime.now(UTC).isoformat(),
    }


def write_manifest(sweep_dir: Path, plan: Plan) -> Path:
    """Write (or replace) ``sweep_dir/manifest.json`` atomically."""
    from sweep_engine.sink import write_json_atomic

    return write_json_atomic(sweep_dir / MANIFEST, build_manifest(plan))


def read_manifest(sweep_dir: Path) -> dict[str, Any] | None:
    """The sweep's manifest, or None when absent or unreadable (sweeps run before it
    existed, a hand-made records folder): the analysis then infers the axes."""
    path = sweep_dir / MANIFEST
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
