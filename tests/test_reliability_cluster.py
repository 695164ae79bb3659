"""A worker node of a real multi-node ``ray.cluster_utils.Cluster`` removed mid-sweep (its
raylet and every worker on it killed): the sweep still records every training once.

The cluster is its own set of Ray processes; this module never joins it from the test
process, so it does not clash with the session's Ray (the sweep joins via ``--address``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as pads
import pytest

from sweep_engine.plan import expand
from sweep_engine.space import load_space

pytestmark = [pytest.mark.ray, pytest.mark.slow]
pytest.importorskip("ray.cluster_utils")
ROOT = Path(__file__).resolve().parents[1]


def busy_training(node: object) -> bool:
    """Whether a PartyActor on ``node`` is inside ``train`` (read from its process titles)."""
    raylet = node.all_processes["raylet"][0].process.pid  # type: ignore[attr-defined]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            title = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == raylet and title.startswith(b"ray::PartyActor.train"):
            return True
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_worker_node_removed_mid_sweep_every_training_recorded_once(tmp_path: Path) -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        workers = [cluster.add_node(num_cpus=2) for _ in range(2)]
        cluster.wait_for_nodes()
        space = tmp_path / "nodeloss.yaml"
        space.write_text(
            "name: nodeloss\nbase: {dataset: digits, epochs: 40}\ngrid: {seed: [0, 1, 2, 3]}\n"
            "resources: {cpu_per_party: 1, cpu_per_trial: 0}\nrun: {max_failures: 2, pack: 1}\n"
        )
        results = tmp_path / "results"
        records = results / "nodeloss" / "records"
        log = tmp_path / "sweep.log"
        args = ["--space", str(space), "--results", str(results), "--no-mlflow"]
        args += ["--address", cluster.address]
        with open(log, "w") as fh:
            proc = subprocess.Popen(
                [sys.executable, "sweep.py", *args],
                cwd=ROOT,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
            )
        deadline = time.time() + 300
        victim = None
        while victim is None and proc.poll() is None and time.time() < deadline:
            victim = next((w for w in workers if busy_training(w)), None)
            time.sleep(0.05)
        assert victim is not None, "no node was seen training\n" + log.read_text()[-3000:]
        before = len(list(records.glob("*.parquet"))) if records.is_dir() else 0
        cluster.remove_node(victim, allow_graceful=False)  # SIGKILL its raylet and workers

        assert proc.wait(timeout=400) == 0, log.read_text()[-4000:]
        out = log.read_text()
        assert before < 4 and "[retry]" in out, out[-3000:]  # a training was lost and re-run
        assert "done: 4 trainings recorded, 0 failed" in out
        rows = pads.dataset(records, format="parquet").to_table().to_pylist()
        plan = expand(load_space(str(space)))
        assert sorted(r["trial_id"] for r in rows) == sorted(t.trial_id for t in plan.trainings)
        assert all(r["status"] == "ok" for r in rows)
    finally:
        cluster.shutdown()
