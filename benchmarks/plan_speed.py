"""``python -m benchmarks.plan_speed [SPACE ...]``: how long a dry run takes on each shipped
space with a fresh, empty cost cache, and what its estimate line says (issue 45: a dry
run answers within 35 s on any shipped space and says which parts it could not measure).

Each space runs ``python sweep.py --space SPACE --dry-run`` in its own process (imports,
planning, the probe's child process and its budget all counted), with
``VFLSWEEP_CACHE`` pointing at an empty temporary folder. Prints one JSON object: per
space the wall seconds and the ``wall time:`` line; then the slowest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(space: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="plan-speed-") as cache:
        env = {**os.environ, "VFLSWEEP_CACHE": cache, "RAY_USAGE_STATS_ENABLED": "0"}
        env.pop("VFLSWEEP_PROBE_S", None)  # the shipped budget
        start = time.perf_counter()
        cmd = [sys.executable, "sweep.py", "--space", space, "--dry-run"]
        done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
    line = next((x.strip() for x in done.stdout.splitlines() if "wall time:" in x), "")
    return {"seconds": round(seconds, 1), "rc": done.returncode, "estimate": line}


def main(argv: list[str] | None = None) -> int:
    names = (sys.argv[1:] if argv is None else argv) or sorted(
        p.stem for p in (ROOT / "search_spaces").glob("*.yaml")
    )
    rows = {}
    for name in names:
        rows[name] = one(name)
        print(f"{name}: {rows[name]}", file=sys.stderr, flush=True)
    slowest = max(rows, key=lambda n: float(rows[n]["seconds"]))  # type: ignore[arg-type]
    out = {"benchmark": "plan_speed", "spaces": rows, "slowest": slowest}
    out["slowest_s"] = rows[slowest]["seconds"]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
