"""Many tiny trainings on a 4-node ``ray.cluster_utils.Cluster``: exactly once, flat memory.

``python -m benchmarks.sweep_cluster --n 10000`` (or ``sweep_scale --cluster N``): a head
and three worker nodes on this machine, ``sweep.py --address`` joining them. While it
runs, the driver's resident memory (``/proc/<pid>/status`` VmRSS) is sampled against the
number of records written, so a leak shows as RSS growing with the trainings done.
Prints one JSON object: wall, records (rows, distinct trial ids), the RSS (and its
anonymous part, the heap) at every tenth of the trainings, the peak (VmHWM), and the
slope: KiB per training of a least-squares line through the samples after the first
tenth (the first record compaction, at ``runner.COMPACT_AT`` files, and warm-up are a
step, not a per-training cost). ``VFLSWEEP_TRACEMALLOC=<path>`` passes through to the
driver (``sweep_engine/memtrace.py``) to see what grows.
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

from sweep_engine.memtrace import status_kib

ROOT = Path(__file__).resolve().parents[1]


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
                    kib = status_kib(("VmRSS", "RssAnon", "VmHWM"), proc.pid)
                    peak = max(peak, kib.get("VmHWM", 0))
                    if "VmRSS" in kib and "RssAnon" in kib:
                        samples.append((_done(log), kib["VmRSS"], kib["RssAnon"]))
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
        **memory_curve(samples, n),
    }


def memory_curve(samples: list[tuple[int, int, int]], n: int) -> dict[str, Any]:
    """RSS and RssAnon (MiB) at the first sample past each tenth of ``n`` trainings done,
    and the slope (KiB per training) of both after the first tenth."""
    marks = []
    for k in range(1, 11):
        hit = next((s for s in samples if s[0] >= k * n // 10), None)
        if hit is not None:
            marks.append({"done": hit[0], "rss_mib": _mib(hit[1]), "anon_mib": _mib(hit[2])})
    late = [s for s in samples if n // 10 <= s[0] < n]
    return {
        "first_record_rss_mib": next((_mib(s[1]) for s in samples if s[0] > 0), None),
        "rss_by_done": marks,
        "slope_rss_kib_per_training": _slope([(s[0], s[1]) for s in late]),
        "slope_anon_kib_per_training": _slope([(s[0], s[2]) for s in late]),
    }


def _mib(kib: int) -> float:
    return round(kib / 1024, 1)


def _slope(points: list[tuple[int, int]]) -> float | None:
    """Least-squares slope of y (KiB) over x (trainings done); None with too few points."""
    if len({x for x, _ in points}) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    cov = sum((x - mx) * (y - my) for x, y in points)
    var = sum((x - mx) ** 2 for x, _ in points)
    return round(cov / var, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--nodes", type=int, default=4)
    args = parser.parse_args()
    print(json.dumps(cluster_run(args.n, args.nodes)))


if __name__ == "__main__":
    main()
