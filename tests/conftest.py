"""Shared fixtures: one real local Ray per test session, shared-data lookup, and the hook
that turns a missing shared dataset into a skip."""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path

import pytest
import torch

from trainables.data.cache import cache_root
from trainables.data.catalog import default_data_dir
from trainables.errors import MissingDataError

# pytester: tests/test_missing_data_skips.py runs the hook below; file_order: longest files
# first, so that the two processes of `make test` end together (tests/file_order.py)
pytest_plugins = ["pytester", "file_order"]

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# The machine's cost cache (sweep_engine/costs.py) is not the suite's to fill or read: a
# test's tiny trainings would teach it wrong seconds. Dry runs do not probe unless a test
# asks (tests/test_estimate.py does, with its own cache).
# mypy's cache is the machine's, though (tests/test_types.py): mypy checks each file against
# its cache by content, and the per-run folder below made every run check all 224 cold
# (48 s against 4 s warm, 2026-12-07).
os.environ.setdefault("VFLSWEEP_MYPY_CACHE", str(cache_root() / "mypy"))
os.environ["VFLSWEEP_CACHE"] = os.path.join(
    os.environ.get("TMPDIR", "/tmp"), f"vflsweep-test-cache-{os.getpid()}"
)
os.environ["VFLSWEEP_PROBE_S"] = "0"

# One torch thread in the test process, as in every party actor: the suite shares 2 cores
# with Ray workers, and oversubscribed intra-op threads slow small models by 10-50x here.
torch.set_num_threads(1)


# The session Ray's logical CPUs: this machine's 2 cores. With 6 (until 2026-12-07) a sweep
# in a test ran up to 6 trials at once, each starting its own party actors on 2 cores (a
# 4-trial search took 36 s against 22 s). 2 first hung a full run: warm actors a file had
# pooled in this process held a CPU, and a later file's trial waited for it
# (``session_ray_left_free`` below now stops them when their file ends).
RAY_CPUS = 2


SESSION_RAY: dict[str, str] = {}  # the session Ray's GCS address, once started


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A real local Ray, started once (about 4 s here) and reused by every Ray test."""
    import ray

    if not ray.is_initialized():
        # address="local": always a fresh instance, never a cluster another process left up
        ray.init(address="local", num_cpus=RAY_CPUS, include_dashboard=False, log_to_driver=False)
    SESSION_RAY["address"] = ray.get_runtime_context().gcs_address
    yield
    ray.shutdown()


# How long a file's released actors and placement groups may take to give their CPUs back
FREE_WAIT_S = 15.0


@pytest.fixture(autouse=True, scope="module")
def session_ray_left_free() -> Iterator[None]:
    """Each test file leaves the session Ray's CPUs as it found them: all free.

    Warm party actors that a file's tests pooled in this process (``pool.POOL``) are stopped
    when the file ends. They hold CPUs between trainings, and the next file's sweep runs its
    trials in other processes, which cannot release them: with few CPUs its placement group
    waited forever (a full run hung in tests/test_early_stopping.py, 2026-12-07). Anything
    else still holding CPUs then fails this file's last test, naming the file, instead of
    hanging a later one.
    """
    yield
    pool = sys.modules.get("trainables.transport.ray_actors.pool")
    if pool is not None and pool.POOL:
        pool.release_warm_actors()
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return
    if ray.get_runtime_context().gcs_address != SESSION_RAY.get("address"):
        return  # a file's own cluster: not the session's to check
    total = ray.cluster_resources().get("CPU", 0.0)
    deadline = time.monotonic() + FREE_WAIT_S
    while (free := ray.available_resources().get("CPU", 0.0)) < total:
        if time.monotonic() > deadline:
            pytest.fail(
                f"this file left {total - free:g} of the session Ray's {total:g} CPUs held "
                f"{FREE_WAIT_S:g} s after its last test (an actor or placement group not "
                "stopped): a later file's sweep would wait for them"
            )
        time.sleep(0.2)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/datasets``; tests that need it skip with the reason elsewhere."""
    from trainables.data import default_data_dir

    path = default_data_dir()
    if path is None or not (path / "README.md").exists():
        pytest.skip("needs ../shared/datasets (present in CI; set VFLSWEEP_DATA elsewhere)")
    return path


@pytest.fixture
def refused_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Callable[..., str]:
    """``sweep.py --space SPACE`` must refuse the space: exit 2, no Ray start, nothing
    written, no traceback, and stderr naming the file and every fragment. Returns stderr."""
    from sweep_engine import runner
    from sweep_engine.cli import main

    def run(space: Path, fragments: Iterable[str] = ()) -> str:
        results = tmp_path / "results"
        starts = runner.START_CALLS
        assert main(["--space", str(space), "--results", str(results)]) == 2
        assert runner.START_CALLS == starts, "the CLI started Ray for a refused space"
        assert not results.exists(), "something was written"
        err = capsys.readouterr().err
        assert "Traceback" not in err and str(space) in err, err
        for fragment in fragments:
            assert fragment in err, (fragment, err)
        return err

    return run


# --- a missing shared dataset is a skip, by construction ------------------------------------
#
# A newcomer's clone has no ../shared. Any test that needs a dataset file skips there, with
# the dataset's name, wherever in the test the file is first needed: in a loader, behind a
# plan that turns the error into a SpaceError, or in a subprocess whose output says so. The
# data directory is read once, when the suite starts (before any test points
# VFLSWEEP_DATA elsewhere), and a failure becomes a skip only if the file it names is
# absent from it: with ../shared present (CI), a failure is never hidden.

DATA_AT_START: Path | None = default_data_dir()
# the loaders' message: "dataset 'adult' needs the file adult/adult.data from …" or
# "dataset 'adult' needs /some/dir/adult/adult.data, which does not exist"
_MISSING_TEXT = re.compile(r"dataset '([\w.-]+)' needs (?:the file )?(\S+?)[,;]? ")


def _absent(file: str | None) -> bool:
    """Whether ``file`` (relative to a data directory, or absolute) is missing from the data
    directory the suite started with; unknown files count as missing only with no data."""
    if DATA_AT_START is None or not DATA_AT_START.is_dir():
        return True
    if not file:
        return False
    path = Path(file)
    if path.is_absolute():  # "…/adult/adult.data" from another directory: match its tail
        parts = path.parts
        return not any((DATA_AT_START / Path(*parts[i:])).is_file() for i in range(1, len(parts)))
    return not (DATA_AT_START / path).is_file()


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or during."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def missing_dataset(exc: BaseException | None, text: str) -> str | None:
    """The name of a shared dataset whose absence made a test fail, or None: a
    MissingDataError the failure was raised from, else the loaders' message in the failure's
    text or captured output (a wrapped error: a plan's SpaceError, a CLI's exit 2, a
    subprocess or a Ray worker). A MissingDataError the test caught and got past is no cause.
    """
    for err in _chain(exc):
        if isinstance(err, MissingDataError) and err.dataset and _absent(err.file):
            return err.dataset
    for match in _MISSING_TEXT.finditer(text):
        if _absent(match.group(2)):
            return match.group(1)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and call.when in ("setup", "call"):
        captured = "".join(content for _, content in report.sections)
        exc = call.excinfo.value if call.excinfo is not None else None
        name = missing_dataset(exc, report.longreprtext + captured)
        if name is not None:
            where = DATA_AT_START or "../shared/datasets (absent)"
            report.outcome = "skipped"
            report.longrepr = (
                str(item.path),
                item.location[1] or 0,
                f"Skipped: needs dataset {name!r}, not in {where} "
                f"(CI has ../shared; elsewhere set VFLSWEEP_DATA)",
            )
    return report
