"""The plan's dropped cells for a person: one line per reason, and the comparisons they cost.

Why grouped: a binary-only attack on a 10-class dataset is dropped once per seed, defense
and strength; listed one line each, 39 lines said one thing. Why the arms: a space that
asks ``analysis: {compare: [ssl_variant=splitnn:hssl_simsiam]}`` and whose every
``hssl_simsiam`` cell was dropped gets no comparison at all, and nothing said so before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sweep_engine.progress import cell_text
from sweep_engine.words import plural

if TYPE_CHECKING:  # annotations only
    from sweep_engine.plan import Plan

SHOWN = 3  # cells named per reason; the rest are counted


def dropped_lines(dropped: list[dict[str, Any]]) -> list[str]:
    """``- N cells (a, b, and K more): reason`` per distinct reason, cells without their
    seed (seeds of one cell are dropped for one reason)."""
    by_reason: dict[str, list[str]] = {}
    for entry in dropped:
        cell = {k: v for k, v in entry["cell"].items() if k != "seed"}
        shown = cell_text(cell, list(cell)) or "the base cell"
        seen = by_reason.setdefault(str(entry["reason"]), [])
        seen.append(shown)
    out = []
    for reason, cells in by_reason.items():
        distinct = list(dict.fromkeys(cells))
        named = ", ".join(distinct[:SHOWN])
        more = f", and {len(distinct) - SHOWN} more" if len(distinct) > SHOWN else ""
        out.append(f"    - {plural(len(cells), 'cell')} ({named}{more}): {reason}")
    return out


def lost_arms(plan: Plan) -> list[str]:
    """A warning per ``analysis.compare`` arm that no planned training has any more."""
    from analysis.compare import arm_of
    from trainables.results.manifest import flat_spec

    out: list[str] = []
    lost: set[tuple[str, str]] = set()  # a reference lost: said once, not per level
    flats = [flat_spec(t.spec.model_dump(mode="json")) for t in plan.trainings]
    for compare in plan.space.compares():
        arms = {arm_of(flat.get(compare.axis), compare) for flat in flats}
        for arm, value in (("a", compare.a), ("b", compare.b)):
            if arm not in arms and (compare.axis, value) not in lost:
                lost.add((compare.axis, value))
                out.append(
                    f"warning: analysis.compare {compare.text}: every cell with "
                    f"{compare.axis}={value} was dropped (above); the sweep cannot make "
                    "this comparison"
                )
    return out
