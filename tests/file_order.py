"""How ``make test`` shares the suite between its two processes: by file, longest first.

``make test`` runs ``pytest -n 2 --dist loadfile``: each process takes one test file at a
time, in collection order (its module fixtures are built once). Collected alphabetically,
a long file that comes late runs alone at the end while the other process idles. Sorted by
the seconds each file took in a full run (``tests/durations.json``, keyed by the file's
stem, longest first: the LPT rule), the two queues end within about one file of each
other. ``VFLSWEEP_WRITE_DURATIONS=1 make test`` refreshes the table; a file missing from it
(a new one) counts as the longest, so it cannot end a run alone.

The documented commands (``tests/test_docs_commands.py``, the longest file) stay one
unit: split over both processes (one unit per sweep, 2026-12-07) each process started its
own Ray cluster for them, and sweeps on both failed with trials cancelled before they ran
(``ActorDiedError``), so the split was taken back.

xdist's ``loadfile`` reorders files by their number of tests unless told not to
(``--loadscope-reorder`` is on by default); until 2026-12-07 that undid this order, so
``pytest_configure`` turns the reorder off. ``VFLSWEEP_DURATIONS`` names another table (the
test of this plugin uses one).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

TABLE = Path(os.environ.get("VFLSWEEP_DURATIONS") or Path(__file__).with_name("durations.json"))
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
    """A test's unit: its file's stem (``tests/test_packs.py::t`` -> ``test_packs``)."""
    return Path(nodeid.split("::", 1)[0]).stem


def unit_seconds(reports: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Seconds per unit from ``(nodeid, duration)`` of every phase (setup, call, teardown:
    a module fixture's cost is its first test's setup)."""
    out: dict[str, float] = {}
    for nodeid, duration in reports:
        unit = unit_of(nodeid)
        out[unit] = out.get(unit, 0.0) + duration
    return out


def pytest_configure(config: pytest.Config) -> None:
    """Keep the order below under ``--dist loadfile``: xdist would sort files by test count."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seconds = json.loads(TABLE.read_text()) if TABLE.exists() else {}
    if seconds:
        units = {id(item): unit_of(item.nodeid) for item in items}
        items[:] = longest_first(items, units, seconds)


_phases: list[tuple[str, float]] = []
_spans: list[tuple[str, str, float, float]] = []  # (process, nodeid, start, stop)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _phases.append((report.nodeid, report.duration))
    worker = getattr(getattr(report, "node", None), "gateway", None)
    _spans.append((getattr(worker, "id", "main"), report.nodeid, report.start, report.stop))


def timeline(spans: Iterable[tuple[str, str, float, float]]) -> list[dict[str, object]]:
    """Per process, its files in the order they ran: first start, last stop (seconds from
    the run's first start), so a run shows which file ended it and what each process did."""
    spans = list(spans)
    t0 = min((s[2] for s in spans), default=0.0)
    files: dict[tuple[str, str], list[float]] = {}
    for process, nodeid, start, stop in spans:
        span = files.setdefault((process, unit_of(nodeid)), [start, stop])
        span[0], span[1] = min(span[0], start), max(span[1], stop)
    ordered = sorted(files.items(), key=lambda kv: (kv[0][0], kv[1][0]))
    return [
        {"process": p, "file": f, "start": round(a - t0, 1), "stop": round(b - t0, 1)}
        for (p, f), (a, b) in ordered
    ]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """With ``VFLSWEEP_WRITE_DURATIONS=1``, the controlling process of a full run writes
    the table (xdist forwards every worker's reports to it)."""
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller writes
        return
    if os.environ.get("VFLSWEEP_TIMELINE"):  # which process ran which file when
        Path(os.environ["VFLSWEEP_TIMELINE"]).write_text(json.dumps(timeline(_spans), indent=1))
    if os.environ.get("VFLSWEEP_WRITE_DURATIONS") != "1":
        return
    table = {unit: round(s, 1) for unit, s in sorted(unit_seconds(_phases).items())}
    TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
