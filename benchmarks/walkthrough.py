"""``python -m benchmarks.walkthrough``: the README's question-to-answer walk-through, run.

Writes the README's ``gdp_ns.yaml`` (``SPACE`` below; ``tests/test_docs.py`` checks the
README shows exactly this text) into a temporary folder, then runs what the README tells a
newcomer to run, each as its own ``vflsweep`` process: ``plan``, ``run``, ``status``,
``analyze``. Prints one JSON object with each command's wall seconds and its printed
lines, which are the outputs the README and ``docs/getting-started.md`` show.
``--keep DIR`` runs in DIR instead (and keeps it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

SPACE = """\
# On breast_cancer, which G-DP strength stops the NS label attack,
# and what does it cost in main-task accuracy (MP)?
name: gdp_ns
base: {dataset: breast_cancer, n_parties: 2, partition: agg, protocol: fedsgd}
grid:
  seed: [0, 1, 2]            # three seeds: fewer get no intervals and no rank groups
defenses:                    # + the undefended cell, always
  gdp: [1e-3, 1e-2, 1e-1]
attacks: [ns]
resources: {cpu_per_party: 0.5, cpu_per_trial: 0}
"""


def _run(args: list[str], cwd: Path) -> dict[str, object]:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "sweep_engine.vflsweep", *args],
        cwd=cwd, env=env, capture_output=True, text=True,
    )  # fmt: skip
    return {
        "command": "vflsweep " + " ".join(args),
        "rc": done.returncode,
        "seconds": round(time.perf_counter() - start, 1),
        "lines": (done.stdout + done.stderr).splitlines(),
    }


def walk(folder: Path) -> dict[str, object]:
    (folder / "gdp_ns.yaml").write_text(SPACE)
    steps = [
        _run(["plan", "gdp_ns.yaml"], folder),
        _run(["run", "gdp_ns.yaml"], folder),
        _run(["status", "results/gdp_ns"], folder),
        _run(["analyze", "results/gdp_ns"], folder),
    ]
    return {"benchmark": "walkthrough", "folder": str(folder), "steps": steps}


def in_folder(
    prog: str, run: Callable[[Path], dict[str, object]], argv: list[str] | None = None
) -> dict[str, object]:
    """``run`` in ``--keep DIR`` (kept) or in a temporary folder; its JSON printed."""
    p = argparse.ArgumentParser(prog=f"python -m {prog}")
    p.add_argument("--keep", default=None, help="run in this folder and keep it")
    args = p.parse_args(argv)
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        out = run(Path(args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix=f"{prog.rsplit('.', 1)[-1]}-") as folder:
            out = run(Path(folder))
    print(json.dumps(out))
    return out


def main(argv: list[str] | None = None) -> int:
    out = in_folder("benchmarks.walkthrough", walk, argv)
    return 0 if all(s["rc"] == 0 for s in out["steps"]) else 1  # type: ignore[index, union-attr]


if __name__ == "__main__":
    sys.exit(main())
