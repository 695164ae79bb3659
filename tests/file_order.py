"""Longest test files first, so that the two processes of ``make test`` finish together.

``make test`` runs ``pytest -n 2 --dist loadfile``: each process takes one test file at a
time, in collection order. Collected alphabetically, a long file that comes late runs alone
at the end while the other process idles (the last ~8 of 25.8 minutes here). Sorted by the
seconds each file took in a full run (``tests/durations.json``, longest first: the LPT rule),
the two queues end within about one file of each other.

The table is refreshed by a full run with ``VFLSWEEP_WRITE_DURATIONS=1 make test``; a file
missing from it (a new one) counts as the longest, so it cannot end a run alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

TABLE = Path(__file__).with_name("durations.json")
T = TypeVar("T")


def longest_first(
    items: Sequence[T], file_of: dict[int, str], seconds: dict[str, float]
) -> list[T]:
    """``items`` grouped by file, files longest first, each file's own order kept.

    ``file_of`` maps ``id(item)`` to its file; a file without ``seconds`` counts as the
    longest known one. Ties keep the collection order, so the result is the same in every
    process (xdist refuses processes that collected different orders)."""
    longest = max(seconds.values(), default=0.0)
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(file_of[id(item)], len(first_seen))

    def key(item: T) -> tuple[float, int]:
        file = file_of[id(item)]
        return (-seconds.get(file, longest), first_seen[file])

    return sorted(items, key=key)  # stable: a file's tests keep their order


def file_seconds(reports: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Seconds per test file from ``(nodeid, duration)`` of every phase (setup, call,
    teardown: a module fixture's cost is its first test's setup)."""
    out: dict[str, float] = {}
    for nodeid, duration in reports:
        file = nodeid.split("::", 1)[0]
        out[file] = out.get(file, 0.0) + duration
    return out


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seconds = json.loads(TABLE.read_text()) if TABLE.exists() else {}
    if not seconds:
        return
    root = config.rootpath
    file_of = {id(item): _relative(item.path, root) for item in items}
    items[:] = longest_first(items, file_of, seconds)


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
    table = {file: round(s, 1) for file, s in sorted(file_seconds(_phases).items())}
    TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
