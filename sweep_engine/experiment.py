"""One experiment per sweep folder: what defines it, and the guard on re-running an edited space.

Why: re-running a space after an edit (``epochs: 10`` → ``3``) under the same ``name:``
writes the new trainings beside the old ones; ``status`` then counts both and the analysis
pools trainings at 3 and 10 epochs into one cell. A sweep's manifest records its
*definition*: the cells it plans (every resolved spec field but the seed, with the attacks
each training serves) as a hash, the values each field takes, and the seeds. A run whose
definition differs from the one its folder holds is refused (exit 2) with what changed,
unless ``--new-version`` asks for a folder of its own (``NAME.v2``, ``NAME.v3``…).

Seeds are not part of the definition: adding seeds to the same cells extends the
experiment (more replicates), it does not change it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainables.errors import ConfigError
from trainables.results.manifest import flat_spec, read_manifest

if TYPE_CHECKING:  # annotations only
    from sweep_engine.plan import Plan

MAX_VERSIONS = 99


def _cells(plan: Plan) -> list[dict[str, Any]]:
    """Each training's cell: its flat spec without the seed, and the attacks it serves."""
    out = []
    for t in plan.trainings:
        flat = flat_spec(t.spec.model_dump(mode="json"))
        flat.pop("seed", None)
        flat["attacks"] = json.dumps(sorted(json.dumps(a, sort_keys=True) for a in t.attacks))
        out.append(flat)
    return out


def definition(plan: Plan) -> dict[str, Any]:
    """What defines ``plan``'s experiment (JSON-ready, written into the manifest)."""
    cells = _cells(plan)
    keys = sorted({json.dumps(c, sort_keys=True, default=str) for c in cells})
    fields: dict[str, list[str]] = {}
    for cell in cells:
        for name, value in cell.items():
            fields.setdefault(name, []).append(json.dumps(value, sort_keys=True, default=str))
    return {
        "cells_sha256": hashlib.sha256("\n".join(keys).encode()).hexdigest(),
        "cells": len(keys),
        "seeds": sorted({t.spec.seed for t in plan.trainings}),
        "fields": {name: sorted(set(values)) for name, values in sorted(fields.items())},
    }


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two definitions, a phrase each (``epochs: 10 → 3``)."""
    out = []
    old_fields, new_fields = old.get("fields") or {}, new.get("fields") or {}
    for name in sorted(set(old_fields) | set(new_fields)):
        before, after = old_fields.get(name, []), new_fields.get(name, [])
        if before != after:
            was, now = ", ".join(before) or "(absent)", ", ".join(after) or "(absent)"
            out.append(f"{name}: {was} → {now}")
    if old.get("cells") != new.get("cells"):
        out.append(f"cells: {old.get('cells')} → {new.get('cells')}")
    if not out:  # the same values, combined otherwise
        out.append("the same field values in other combinations")
    return out


def _held(sweep_dir: Path) -> dict[str, Any] | None:
    """The definition the folder's manifest holds, or None (no sweep there yet, or one
    written before definitions were recorded: nothing to compare with)."""
    held = (read_manifest(sweep_dir) or {}).get("experiment")
    return held if isinstance(held, dict) and "cells_sha256" in held else None


def _matches(sweep_dir: Path, new: dict[str, Any]) -> bool | None:
    held = _held(sweep_dir)
    return None if held is None else held["cells_sha256"] == new["cells_sha256"]


def versioned(
    plan: Plan, results: Path, new_version: bool, tell: Callable[[str], None] = print
) -> Plan:
    """``plan`` as it may run in ``results``: unchanged when its folder holds the same
    experiment (or none yet); renamed to the first ``NAME.vK`` that holds it or is free with
    ``new_version``; a ConfigError (exit 2) saying what changed otherwise."""
    name = plan.space.name
    new = definition(plan)
    if _matches(results / name, new) is not False:
        if new_version and _held(results / name) is not None:
            tell(f"--new-version: {results / name} holds this same definition; resuming it")
        return plan
    if new_version:
        for k in range(2, MAX_VERSIONS + 1):
            candidate = f"{name}.v{k}"
            if _matches(results / candidate, new) is not False:
                state = "resuming" if (results / candidate).exists() else "starting"
                tell(
                    f"--new-version: {state} {results / candidate} "
                    f"({results / name} keeps the earlier definition)"
                )
                space = plan.space.model_copy(update={"name": candidate})
                return dataclasses.replace(plan, space=space)
        raise ConfigError(f"{results / name}: {MAX_VERSIONS} versions exist; give a new 'name:'")
    held = _held(results / name) or {}
    said = "; ".join(changes(held, new))
    raise ConfigError(
        f"{results / name} holds sweep {name!r} planned from another definition of its space "
        f"(what changed: {said}); running this one there would pool two experiments. "
        f"Give the space a new 'name:', or pass --new-version to run it beside the old one "
        f"as {name}.v2 (each folder is analysed apart)"
    )
