"""How complete an answer is: trainings planned, recorded, failed, stopped, damaged, missing,
and the cells that lack seeds.

Why every answer carries it: a sweep with 14 of 24 trainings, or with two files set aside
as damaged, ranks cells on fewer seeds than planned, and the order can change. Nothing in
a table shows that; this block is printed first, written into ``summary.json``,
``index.md/html`` and the MLflow parent run.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pandas as pd

from analysis.load import SCENARIO_COLUMNS, scenario_labels
from trainables.results.manifest import of_planned


def completeness(records: pd.DataFrame, manifest: dict[str, Any] | None) -> dict[str, Any]:
    """The counts (JSON-ready); ``planned`` is None without a manifest (a hand-made folder).

    ``recorded``: planned trainings with a finished record (``ok`` or ``stopped``);
    ``failed``: with ``status='error'`` records; ``damaged``: files not read
    (``records.attrs['damaged']``); ``missing``: planned, with no readable record;
    ``unplanned``: trainings recorded in the folder that the plan does not have.
    """
    statuses, unplanned = of_planned(training_statuses(records), manifest)
    planned = ((manifest or {}).get("plan") or {}).get("trainings")
    counts = {s: sum(1 for v in statuses.values() if v == s) for s in ("ok", "stopped", "error")}
    recorded = counts["ok"] + counts["stopped"]
    damaged = dict(records.attrs.get("damaged") or {})
    missing = None if planned is None else max(int(planned) - recorded - counts["error"], 0)
    out: dict[str, Any] = {
        "planned": planned,
        "recorded": recorded,
        "failed": counts["error"],
        "stopped": counts["stopped"],
        "damaged": len(damaged),
        "missing": missing,
        "unplanned": unplanned,
        "complete": planned is not None and recorded >= int(planned) and not damaged,
        "cells_lacking_seeds": cells_lacking_seeds(records),
    }
    out["line"] = headline(out)
    return out


def training_statuses(records: pd.DataFrame) -> dict[str, str]:
    """Per training: ``ok`` when every record of it is ``ok``, ``stopped`` when every one is
    ``stopped``, ``error`` otherwise (a missing status is neither).

    Why two boolean ``all``s and not a function per group: a million records hold 231k
    trainings, and a Python function per group took tens of seconds there."""
    status = records["status"]
    flags = pd.DataFrame(
        {"ok": status == "ok", "stopped": status == "stopped"}, index=records.index
    )
    every = flags.groupby(records["trial_id"], observed=True).all()
    names = np.where(every["ok"], "ok", np.where(every["stopped"], "stopped", "error"))
    return dict(zip(every.index.tolist(), names.tolist(), strict=True))


def headline(c: dict[str, Any]) -> str:
    """``complete: 24 of 24 trainings`` or ``incomplete: 14 of 24 trainings (…)``."""
    planned = c["planned"]
    if planned is None:
        head = f"{c['recorded']} trainings recorded (no manifest: planned count unknown)"
    elif c["complete"]:
        head = f"complete: {c['recorded']} of {planned} trainings"
    else:
        head = f"incomplete: {c['recorded']} of {planned} trainings"
    parts = [
        f"{c[key]} {word}"
        for key, word in (
            ("failed", "failed"),
            ("stopped", "stopped early"),
            ("damaged", "damaged file(s) not read"),
            ("missing", "not recorded"),
            ("unplanned", "not in the plan (left in)"),
        )
        if c.get(key)
    ]
    return head + (f" ({', '.join(parts)})" if parts else "")


def cells_lacking_seeds(records: pd.DataFrame) -> list[dict[str, Any]]:
    """Cells (scenario, defense, strength) with fewer seeds than the most any cell of their
    scenario has: their means and groups rest on fewer replicates."""
    # only the columns read (scenario_labels reads the scenario columns): not a str per
    # row nor a copy of every column of a million records
    used = [c for c in (*SCENARIO_COLUMNS, "defense", "defense_param", "seed") if c in records]
    clean = records.loc[(records["attack"] == "none").to_numpy(), used]
    if clean.empty or "seed" not in clean:
        return []
    frame = pd.DataFrame(
        {
            "scenario": scenario_labels(clean).astype(str).to_numpy(),
            "defense": clean["defense"].astype(str).to_numpy(),
            "strength": clean["defense_param"].to_numpy(),
            "seed": clean["seed"].to_numpy(),
        }
    )
    seeds = frame.groupby(["scenario", "defense", "strength"], dropna=False)["seed"].nunique()
    most = seeds.groupby(level="scenario").transform("max")
    short = seeds < most
    return [
        {
            "scenario": scenario,
            "cell": defense if pd.isna(strength) else f"{defense}@{strength:g}",
            "seeds": int(n),
            "of": int(top),
        }
        for (scenario, defense, strength), n, top in zip(
            seeds.index[short], seeds[short], most[short], strict=True
        )
    ]


def lacking_line(c: dict[str, Any], limit: int = 8) -> str | None:
    """One line naming the cells that lack seeds, or None."""
    cells = c.get("cells_lacking_seeds") or []
    if not cells:
        return None
    shown = ", ".join(f"{e['cell']} ({e['seeds']} of {e['of']})" for e in cells[:limit])
    more = f", and {len(cells) - limit} more" if len(cells) > limit else ""
    return f"cells with fewer seeds than their scenario's others: {shown}{more}"


def completeness_lines(summary: dict[str, object]) -> list[str]:
    """The answer's first lines: how many trainings it rests on of those planned, each
    damaged file not read, and the cells with fewer seeds than their scenario's others."""
    found = summary.get("completeness")
    if not isinstance(found, dict):
        return []
    damaged = cast(dict[str, object], summary.get("damaged") or {})
    out = [str(found["line"])]
    out += [f"  damaged, not read: {path}: {why}" for path, why in damaged.items()]
    lacking = lacking_line(found)
    return out + ([lacking] if lacking else [])
