"""``python -m benchmarks.estimate_constants [--repeats N]``: the estimate's fixed costs.

``sweep_engine/estimate.py`` adds constants to the measured parts of a plan; this
measures two of them (``STARTUP_S``, ``IMPORT_S``) on spaces and processes that
``benchmarks.estimate_accuracy`` does not judge, so they are not fitted on the spaces
that test them:

- ``startup_s``: the whole ``vflsweep run smoke`` command (imports, planning, Ray's start,
  Tune's set-up, cold actors, MLflow, the summary) less the smoke sweep's own measured
  parts, as the estimate counts them on the cost cache that run taught. Per repeat: a
  fresh results folder, planned first (the probe is not timed); the cache is kept, and
  the parts are read after each run, on the actors' own numbers.
- ``import_s``: CPU seconds of a fresh Python importing what each process of a pack
  imports before its first training (Ray's worker, torch, the party and its actor).

Prints one JSON object with each repeat and the medians. The machine must be otherwise
idle.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.estimate_accuracy import _vflsweep
from sweep_engine.estimate import IMPORT_S, STARTUP_S

ROOT = Path(__file__).resolve().parents[1]
IMPORTS = "import ray, torch; import trainables.party, trainables.transport.ray_actors.actor"


def startup(work: Path, repeat: int) -> dict[str, float]:
    """One smoke run's command wall, and its parts as the estimate counts them after."""
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "VFLSWEEP_CACHE": str(work / "cache")}
    results = work / f"results{repeat}"
    _vflsweep(["plan", "smoke", "--json", "--results", str(results)], env)  # probe, not timed
    actual, _ = _vflsweep(["run", "smoke", "--results", str(results)], env)
    _, out = _vflsweep(["plan", "smoke", "--json", "--results", str(work / "empty")], env)
    parts = json.loads(out.strip().splitlines()[-1])["estimate_s"] - STARTUP_S
    return {
        "actual_s": round(actual, 2),
        "parts_s": round(parts, 2),
        "startup_s": round(actual - parts, 2),
    }


def process_cpu() -> float:
    """CPU seconds (user + system) of a fresh Python that imports a pack process's code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", IMPORTS], cwd=ROOT, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="est-constants-") as work:
        runs = [startup(Path(work), i) for i in range(args.repeats)]
    imports = [round(process_cpu(), 2) for _ in range(args.repeats)]
    out = {
        "benchmark": "estimate_constants",
        "cpus": os.cpu_count(),
        "startup_runs": runs,
        "startup_s": statistics.median(r["startup_s"] for r in runs),
        "import_cpu_runs": imports,
        "import_s": statistics.median(imports),
        "shipped": {"STARTUP_S": STARTUP_S, "IMPORT_S": IMPORT_S},
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
