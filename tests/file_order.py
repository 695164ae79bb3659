"""How ``make test`` shares the suite between its two processes: by unit, longest first.

``make test`` runs ``pytest -n 2 --dist loadfile``: each process takes one *unit* at a
time, in collection order, and a unit's tests run in one process, in order. xdist's unit
is a test file (its module fixtures are built once); this plugin's scheduler
(``pytest_xdist_make_scheduler``) keeps that, but lets a test module split itself further
(``REFINED``): the docs' commands (``tests/test_docs_commands.py``, a fifth of the suite)
are one unit per sweep they run or read, so that they share the two processes too, each
sweep's commands in their order.

Collected alphabetically, a long unit that comes late runs alone at the end while the
other process idles. Sorted by the seconds each unit took in a full run
(``tests/durations.json``, longest first: the LPT rule), the two queues end within about
one unit of each other. ``VFLSWEEP_WRITE_DURATIONS=1 make test`` refreshes the table; a
unit missing from it (a new one) counts as the longest, so it cannot end a run alone.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

TABLE = Path(__file__).with_name("durations.json")
# test files that split themselves into units: the module's ``xdist_unit(nodeid)`` names a
# test's unit, or None for the file's own
REFINED = {"tests/test_docs_commands.py": "test_docs_commands"}
T = TypeVar("T")


def longest_first(
    items: Sequence[T], unit_of: dict[int, str], seconds: dict[str, float]
) -> list[T]:
    """``items`` grouped by unit, units longest first, each unit's own order kept.

    ``unit_of`` maps ``id(item)`` to its unit; a unit without ``seconds`` counts as the
    longest known one. Ties keep the collection order, so the result is the same in every
    process (xdist refuses processes that collected different orders)."""
    longest = max(seconds.values(), default=0.0)
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(unit_of[id(item)], len(first_seen))

    def key(item: T) -> tuple[float, int]:
        unit = unit_of[id(item)]
        return (-seconds.get(unit, longest), first_seen[unit])

    return sorted(items, key=key)  # stable: a unit's tests keep their order


def unit_of(nodeid: str) -> str:
    """A test's unit: its file's stem (``tests/test_packs.py::t`` -> ``test_packs``), or
    what the file's module says (``REFINED``)."""
    file = nodeid.split("::", 1)[0]
    module = REFINED.get(file)
    if module is not None:
        unit = importlib.import_module(module).xdist_unit(nodeid)
        if unit is not None:
            return str(unit)
    return Path(file).stem


def unit_seconds(reports: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Seconds per unit from ``(nodeid, duration)`` of every phase (setup, call, teardown:
    a module fixture's cost is its first test's setup)."""
    out: dict[str, float] = {}
    for nodeid, duration in reports:
        unit = unit_of(nodeid)
        out[unit] = out.get(unit, 0.0) + duration
    return out


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seconds = json.loads(TABLE.read_text()) if TABLE.exists() else {}
    if seconds:
        units = {id(item): unit_of(item.nodeid) for item in items}
        items[:] = longest_first(items, units, seconds)


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with this plugin's units (None: xdist's own scheduler)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class UnitScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return UnitScheduling(config, log)


_phases: list[tuple[str, float]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _phases.append((report.nodeid, report.duration))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With ``VFLSWEEP_WRITE_DURATIONS=1``, the controlling process of a full run writes
    the table (xdist forwards every worker's reports to it)."""
    if os.environ.get("VFLSWEEP_WRITE_DURATIONS") != "1":
        return
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller writes
        return
    table = {unit: round(s, 1) for unit, s in sorted(unit_seconds(_phases).items())}
    TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
