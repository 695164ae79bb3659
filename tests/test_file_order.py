"""The suite's file order (tests/file_order.py): longest files first, each file's tests in
their own order, the same order in every process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from file_order import TABLE, longest_first, timeline, unit_of, unit_seconds

FILE_ORDER = Path(__file__).with_name("file_order.py")


def test_files_go_longest_first_and_keep_their_own_order() -> None:
    items = ["a1", "a2", "b1", "c1", "c2", "c3"]
    file_of = {id(i): i[0] for i in items}
    order = longest_first(items, file_of, {"a": 1.0, "b": 30.0, "c": 5.0})
    assert order == ["b1", "c1", "c2", "c3", "a1", "a2"]


def test_a_file_missing_from_the_table_counts_as_the_longest() -> None:
    items = ["a1", "new1", "b1"]
    file_of = {id(i): i.rstrip("1") for i in items}
    order = longest_first(items, file_of, {"a": 1.0, "b": 30.0})
    # ties with the longest keep collection order: b was collected after new
    assert order == ["new1", "b1", "a1"]


def test_no_table_keeps_collection_order() -> None:
    items = ["b1", "a1"]
    assert longest_first(items, {id(i): i[0] for i in items}, {}) == items


def test_unit_seconds_sum_every_phase_per_unit() -> None:
    reports = [
        ("tests/test_x.py::t1", 2.0),  # setup with a module fixture
        ("tests/test_x.py::t1", 0.5),
        ("tests/test_x.py::t2[p]", 1.0),
        ("tests/test_y.py::t", 0.25),
    ]
    assert unit_seconds(reports) == {"test_x": 3.5, "test_y": 0.25}


def test_a_units_name_is_its_files_stem() -> None:
    assert unit_of("tests/test_packs.py::test_a[1]") == "test_packs"


def test_the_committed_table_names_existing_test_files() -> None:
    table = json.loads(TABLE.read_text())
    root = TABLE.parent.parent
    missing = [f for f in table if not (root / "tests" / f"{f}.py").exists()]
    assert not missing, f"tests/durations.json names test files that are gone: {missing}"
    assert all(s >= 0 for s in table.values())


def test_xdist_runs_the_files_in_this_order_not_by_test_count(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``-n 1 --dist loadfile`` the one process runs the files as the controller
    queues them: by the table (b, c, a), not xdist's default of most tests first (a, c, b)."""
    log = pytester.path / "ran.txt"
    for name, n in (("a", 3), ("b", 1), ("c", 2)):
        body = "".join(
            f"def test_{i}():\n    open({str(log)!r}, 'a').write('{name}')\n\n" for i in range(n)
        )
        pytester.makepyfile(**{f"test_{name}": body})
    table = pytester.path / "durations.json"
    table.write_text(json.dumps({"test_a": 1.0, "test_b": 30.0, "test_c": 5.0}))
    monkeypatch.setenv("VFLSWEEP_DURATIONS", str(table))
    pytester.makepyfile(file_order=FILE_ORDER.read_text())
    result = pytester.runpytest_subprocess("-p", "file_order", "-n", "1", "--dist", "loadfile")
    result.assert_outcomes(passed=6)
    assert log.read_text() == "bccaaa"


def test_the_timeline_gives_each_process_its_files_first_start_to_last_stop() -> None:
    spans = [
        ("gw0", "tests/test_a.py::t1", 100.0, 101.0),
        ("gw0", "tests/test_a.py::t2", 101.0, 103.5),
        ("gw1", "tests/test_b.py::t", 100.5, 102.0),
        ("gw0", "tests/test_c.py::t", 103.5, 104.0),
    ]
    assert timeline(spans) == [
        {"process": "gw0", "file": "test_a", "start": 0.0, "stop": 3.5},
        {"process": "gw0", "file": "test_c", "start": 3.5, "stop": 4.0},
        {"process": "gw1", "file": "test_b", "start": 0.5, "stop": 2.0},
    ]
