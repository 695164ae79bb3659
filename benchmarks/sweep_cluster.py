"""Many tiny trainings on a 4-node ``ray.cluster_utils.Cluster``: exactly once, flat memory.

``python -m benchmarks.sweep_cluster --n 10000`` (or ``sweep_scale --cluster N``): a head
and three worker nodes on this machine, ``sweep.py --address`` joining them. While it
runs, the driver's resident memory (``/proc/<pid>/status`` VmRSS) is sampled against the
number of records written, so a leak shows as RSS growing with the trainings done.
Prints one JSON object: wall, records (rows, distinct trial ids), RSS samples and the
peak (VmHWM).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def _kib(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _done(log: Path) -> int:
    """Records written so far: the last ``[k/N]`` progress line's k."""
    last = 0
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("[") and "/" in line.split("]")[0]:
            head = line[1:].split("/")[0]
            last = int(head) if head.isdigit() else last
    return last


def cluster_run(n: int, nodes: int = 4, cpus_per_node: int = 1) -> dict[str, Any]:
    from ray.cluster_utils import Cluster

    from sweep_engine.sink import RecordSink

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus_per_node})
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=cpus_per_node)
        cluster.wait_for_nodes()
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            space = folder / "many.yaml"
            space.write_text(
                yaml.safe_dump(
                    {
                        "name": "many",
                        "base": {"dataset": "breast_cancer", "epochs": 2},
                        "grid": {"seed": list(range(n))},
                        "resources": {"cpu_per_party": 0.5, "cpu_per_trial": 0},
                    }
                )
            )
            results, log = folder / "results", folder / "sweep.log"
            cmd = [sys.executable, "sweep.py", "--space", str(space), "--results", str(results)]
            cmd += ["--no-mlflow", "--address", cluster.address]
            samples: list[tuple[int, int]] = []
            start = time.perf_counter()
            with open(log, "w") as fh:
                env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
                proc = subprocess.Popen(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, env=env)
                peak = 0
                while proc.poll() is None:
                    rss = _kib(proc.pid, "VmRSS")
                    peak = max(peak, _kib(proc.pid, "VmHWM") or 0)
                    if rss is not None:
                        samples.append((_done(log), rss))
                    time.sleep(1.0)
            wall = time.perf_counter() - start
            if proc.returncode != 0:
                raise RuntimeError(log.read_text()[-3000:])
            ids = RecordSink(results / "many").read().column("trial_id").to_pylist()
    finally:
        cluster.shutdown()
    return {
        "n": n,
        "nodes": nodes,
        "wall_s": round(wall, 1),
        "rows": len(ids),
        "distinct_trial_ids": len(set(ids)),
        "exactly_once": len(ids) == len(set(ids)) == n,
        "peak_rss_mib": round(peak / 1024, 1),
        "rss_mib_by_done": _thin([(d, round(r / 1024, 1)) for d, r in samples], 12),
    }


def _thin(samples: list[tuple[int, float]], keep: int) -> list[tuple[int, float]]:
    if len(samples) <= keep:
        return samples
    step = len(samples) / keep
    return [samples[int(i * step)] for i in range(keep)] + [samples[-1]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=4)
    args = parser.parse_args()
    print(json.dumps(cluster_run(args.n, args.nodes)))


if __name__ == "__main__":
    main()
