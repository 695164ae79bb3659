"""A party actor's process SIGKILLed in the middle of a training: that trial fails, Tune
retries it (``run.max_failures``), the sweep finishes with every training recorded once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as pads
import pytest

from sweep_engine.plan import expand
from sweep_engine.space import load_space

pytestmark = [
    pytest.mark.ray,
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform != "linux", reason="reads /proc"),
]
ROOT = Path(__file__).resolve().parents[1]


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (Ray's workers are the raylet's children)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def training_party_actor(raylet: int) -> int | None:
    """The pid of a PartyActor busy in ``train`` (Ray sets its process title), or None."""
    for pid in descendants(raylet):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if title.startswith(b"ray::PartyActor.train"):
            return pid
    return None


def session_raylet() -> int:
    """This test session's raylet: the parent of any of its workers (never another Ray's)."""
    import ray

    @ray.remote(num_cpus=0)
    def parent() -> int:
        return os.getppid()

    return ray.get(parent.remote())


def test_party_actor_killed_mid_training_is_retried_and_recorded_once(
    tmp_path: Path, ray_session: None
) -> None:
    import ray

    space = tmp_path / "actorkill.yaml"
    space.write_text(
        "name: actorkill\nbase: {dataset: digits, epochs: 60}\ngrid: {seed: [0, 1, 2]}\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
        "run: {max_failures: 1, max_concurrent_trials: 2}\n"
    )
    results = tmp_path / "results"
    raylet = session_raylet()
    log = tmp_path / "sweep.log"
    args = ["--space", str(space), "--results", str(results), "--no-mlflow"]
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "sweep.py", *args, "--address", ray.get_runtime_context().gcs_address],
            cwd=ROOT,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
        )
    deadline = time.time() + 240
    victim = None
    while victim is None and proc.poll() is None and time.time() < deadline:
        victim = training_party_actor(raylet)
        time.sleep(0.05)
    assert victim is not None, "no party actor was ever seen training\n" + log.read_text()[-3000:]
    os.kill(victim, signal.SIGKILL)  # a real crash: no cleanup, no exception in the actor

    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]
    out = log.read_text()
    assert out.count("[retry]") == 1, out[-3000:]  # the killed trial, retried once
    assert "done: 3 trainings recorded, 0 failed" in out
    rows = pads.dataset(results / "actorkill" / "records", format="parquet").to_table().to_pylist()
    plan = expand(load_space(str(space)))
    assert sorted(r["trial_id"] for r in rows) == sorted(t.trial_id for t in plan.trainings)
    assert all(r["status"] == "ok" and r["mp"] > 0.8 for r in rows)


def test_a_pooled_actor_killed_while_idle_is_evicted_and_the_next_trial_runs_once(
    ray_session: None,
) -> None:
    """Before eviction, the next trial got the dead actor and failed in ``load``."""
    import ray

    from trainables.data import load_dataset
    from trainables.spec import TrialSpec
    from trainables.transport.ray_actors import PartyResources, RayParties, release_warm_actors
    from trainables.trial import prepare_parties, train_local, train_prepared

    spec = TrialSpec.build(dataset="breast_cancer", epochs=2)
    prepared = prepare_parties(spec, load_dataset("breast_cancer"))
    expected = train_local(prepared, 2)
    release_warm_actors()  # earlier tests in this process may have left warm actors
    attempts = 0
    try:
        with RayParties(prepared.inits, PartyResources(cpu=0.5), reuse=True) as first:
            pooled = [a._actor_id for a in first.actors]
        ray.kill(first.actors[0])  # an idle pooled actor dies (OOM killer, a kill by hand)
        _wait_until_dead(first.actors[0])  # ray.kill is asynchronous: let the death land
        with RayParties(prepared.inits, PartyResources(cpu=0.5), reuse=True) as second:
            attempts += 1
            result = train_prepared(prepared, 2, group=second).result
            assert second.evicted == 1 and not second.reused
            assert not {a._actor_id for a in second.actors} & set(pooled)  # a fresh set
        assert attempts == 1 and result.mp == expected.mp
    finally:
        assert release_warm_actors() == 2  # only the fresh set is pooled; the dead one left


def _wait_until_dead(actor: object, timeout_s: float = 30.0) -> None:
    """Block until Ray reports ``actor`` dead (a call on it raises RayActorError)."""
    import ray

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.ping.remote(), timeout=5)  # type: ignore[attr-defined]
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"actor still alive {timeout_s}s after ray.kill")
