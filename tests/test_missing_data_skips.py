"""The suite's promise to a newcomer: a test that needs a shared dataset skips, naming it,
when the data is absent; it never fails for that (tests/conftest.py's hook). Proved by
running data-needing tests against an empty data directory in a child pytest that loads the
real conftest: wherever the file is first needed (a loader, a plan that wraps the error, a
subprocess), the test is skipped with the dataset's name, and other failures stay failures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")
FILE_ORDER = Path(__file__).with_name("file_order.py")

NEEDS_DATA = """
import subprocess
import sys

import pytest

from sweep_engine.plan import expand
from sweep_engine.space import load_space
from trainables.data import load_dataset
from trainables.errors import MissingDataError


def test_loader_needs_adult():
    assert load_dataset("adult").n_classes == 2


def test_plan_wraps_the_error(tmp_path):
    space = tmp_path / "s.yaml"
    space.write_text("name: s\\nbase: {dataset: credit}\\nattacks: [ns]\\n")
    assert expand(load_space(str(space))).trainings


def test_a_subprocess_needs_nursery():
    code = "from trainables.data import load_dataset; load_dataset('nursery')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_caught_missing_file_passes():
    with pytest.raises(MissingDataError):
        load_dataset("adult")


def test_another_failure_stays_a_failure():
    try:
        load_dataset("adult")
    except MissingDataError:
        pass
    assert load_dataset("breast_cancer").n_classes == 3
"""


def test_a_missing_dataset_is_a_skip_that_names_it(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "no-data"
    empty.mkdir()
    monkeypatch.setenv("VFLSWEEP_DATA", str(empty))
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(file_order=FILE_ORDER.read_text())  # a plugin the conftest loads
    pytester.makepyfile(test_needs_data=NEEDS_DATA)
    result = pytester.runpytest_subprocess("-rfs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=3, passed=1, failed=1)
    out = result.stdout.str()
    for name in ("adult", "credit", "nursery"):
        assert f"needs dataset {name!r}, not in {empty}" in out, out
    # the genuine failure is reported as one, with its own assertion
    assert "FAILED test_needs_data.py::test_another_failure_stays_a_failure" in out, out
