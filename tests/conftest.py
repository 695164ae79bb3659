"""Shared fixtures: one real local Ray per test session, shared-data lookup."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
import torch

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# The machine's cost cache (sweep_engine/costs.py) is not the suite's to fill or read: a
# test's tiny trainings would teach it wrong seconds. Dry runs do not probe unless a test
# asks (tests/test_estimate.py does, with its own cache).
os.environ["VFLSWEEP_CACHE"] = os.path.join(
    os.environ.get("TMPDIR", "/tmp"), f"vflsweep-test-cache-{os.getpid()}"
)
os.environ["VFLSWEEP_PROBE_S"] = "0"

# One torch thread in the test process, as in every party actor: the suite shares 2 cores
# with Ray workers, and oversubscribed intra-op threads slow small models by 10-50x here.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """A real local Ray, started once (about 4 s here) and reused by every Ray test."""
    import ray

    if not ray.is_initialized():
        # logical CPUs, not cores: a trial's placement group needs one bundle per party
        # address="local": always a fresh instance, never a cluster another process left up
        ray.init(address="local", num_cpus=6, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


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
