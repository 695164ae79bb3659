"""Writing ``<results>/<sweep>/manifest.json``: what the sweep varies, beside its records.

Why a manifest, and how it is read: ``trainables/results/manifest.py`` (the analysis reads
it from there, without the engine). Written atomically (temporary file, fsync, rename)
each time a sweep runs, never on a dry run or on bad input; a re-run rewrites it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sweep_engine.experiment import definition
from sweep_engine.parts import write_json_atomic
from trainables.records import ENGINE_VERSION
from trainables.results.manifest import MANIFEST, flat_spec

if TYPE_CHECKING:  # annotations only
    from sweep_engine.plan import Plan


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
        # the planned trainings: ``status`` counts records of these only (a search's
        # trainings get their ids as Optuna fills them: none here)
        "trial_ids": None if space.search else sorted(t.trial_id for t in plan.trainings),
        # what defines the experiment: a re-run of an edited space is refused
        # (``sweep_engine/experiment.py``)
        "experiment": definition(plan),
        "plan": {
            k: summary[k] for k in ("trainings", "evaluations", "dropped", "duplicates_merged")
        },
        "engine_version": ENGINE_VERSION,
        "created_at": datetime.now(UTC).isoformat(),
    }


def write_manifest(sweep_dir: Path, plan: Plan) -> Path:
    """Write (or replace) ``sweep_dir/manifest.json`` atomically."""
    return write_json_atomic(sweep_dir / MANIFEST, build_manifest(plan))
