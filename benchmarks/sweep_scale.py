"""``python -m benchmarks.sweep_scale``: the sweep engine against a plain for-loop.

Workloads (issue 17), each timed as a user waits for it, medians over ``--repeats``:
- ``tiny``: ``--tiny`` breast_cancer trainings of 2 epochs (default 500).
- ``vflair``: 100 breast_cancer trainings at VFLAIR's settings (50 epochs).
  ``--defense mid:1`` puts a defense on every training of ``tiny`` and ``vflair``;
  ``stacked_share`` says how many of the sweep's trainings ran stacked.
- ``startup``: seconds from the command to the first record of the smoke sweep, and the
  CPU-seconds its processes had spent by then, by role (driver, the Tune trial, party
  actors, Ray's own processes; read from ``/proc``, Linux only): on 2 cores start-up is
  bound by that sum, not by any one wait. ``--startup-against DIR`` also times another
  checkout's start-up, one run of each in turn (``startup_against``).
- ``heavy`` (``--heavy``): the compute-bound workload of ``benchmarks.sweep_throughput``.
- ``cluster`` (``--cluster N``): N tiny trainings on a 4-node ``ray.cluster_utils.Cluster``;
  every record exactly once, and the driver's peak RSS against the trainings done.

For each: ``sweep.py`` as a process (Ray start included, ``--no-mlflow``) with the
default ``ray`` transport (every party its own actor) and with ``transport: local``
(parties in the trial's process), against the plain loop ``for spec in specs:
run_trial(spec)`` on one core, both as a process (imports included: what a user waits
for) and in-process (the issue's definition of the loop). ``sweep_over_loop`` divides by
the in-process loop, ``sweep_over_loop_process`` by the loop's process.
``overhead_per_training_s``: (sweep wall - its time to the first record) x slots / n,
minus the loop's seconds per training: what the engine adds to each training in a slot.
``--marginal`` (tiny): each repeat also sweeps 2n trainings; ``marginal_<transport>_s`` is
(2n's seconds after its first record - n's) / n, the cost of one more training with what
every sweep pays once at its end (the summary, Ray's shutdown) cancelled, and
``marginal_over_loop_<transport>`` that over the in-process loop's seconds a training.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.sweep_throughput import HEAVY
from trainables.spec import TrialSpec
from trainables.trial import run_trial

ROOT = Path(__file__).resolve().parents[1]
TINY: dict[str, Any] = {"dataset": "breast_cancer", "epochs": 2}
VFLAIR: dict[str, Any] = {"dataset": "breast_cancer", "epochs": 50}
LOOP = (
    "import sys, json\n"
    "from trainables.spec import TrialSpec\n"
    "from trainables.trial import run_trial\n"
    "base, n = json.loads(sys.argv[1]), int(sys.argv[2])\n"
    "for seed in range(n):\n"
    "    run_trial(TrialSpec.build(**base, seed=seed))\n"
)


def loop_in_process(base: dict[str, Any], n: int) -> float:
    start = time.perf_counter()
    for seed in range(n):
        run_trial(TrialSpec.build(**base, seed=seed))
    return time.perf_counter() - start


def loop_process(base: dict[str, Any], n: int) -> float:
    start = time.perf_counter()
    cmd = [sys.executable, "-c", LOOP, json.dumps(base), str(n)]
    subprocess.run(cmd, cwd=ROOT, check=True)
    return time.perf_counter() - start


def space_file(folder: Path, name: str, base: dict[str, Any], n: int, transport: str) -> Path:
    path = folder / f"{name}.yaml"
    space = {
        "name": name,
        "base": base,
        "grid": {"seed": list(range(n))},
        "resources": {"cpu_per_party": 0.5, "cpu_per_trial": 0},
        "run": {"transport": transport},
    }
    path.write_text(yaml.safe_dump(space))
    return path


def _role(pid: int, root: int) -> str:
    if pid == root:
        return "driver"
    try:
        name = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return "ray"
    if "ImplicitFunc" in name:
        return "trial"
    return "actors" if "PartyActor" in name else "ray"


def _cpu_by_role(root: int) -> dict[str, float]:
    """CPU-seconds (user + system) of ``root`` and its descendants now, by ``_role``."""
    tick, stats = os.sysconf("SC_CLK_TCK"), {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                text = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = text[text.rindex(")") + 2 :].split()
            stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    tree, grew = {root}, True
    while grew:
        new = {pid for pid, (ppid, _) in stats.items() if ppid in tree} - tree
        tree, grew = tree | new, bool(new)
    out: dict[str, float] = {}
    for pid in tree & set(stats):
        role = _role(pid, root)
        out[role] = out.get(role, 0.0) + stats[pid][1]
    return out


def sweep_process(space: Path, results: Path, cpus: int, root: Path = ROOT) -> dict[str, Any]:
    """Wall seconds of ``sweep.py``, seconds to its first record line and (on Linux) the
    CPU-seconds by role its processes had spent when that line came. ``root``: the
    checkout whose code runs (first on ``PYTHONPATH``, which Ray's workers inherit)."""
    cmd = [sys.executable, "sweep.py", "--space", str(space), "--results", str(results)]
    cmd += ["--no-mlflow", "--num-cpus", str(cpus)]
    start = time.perf_counter()
    first, cpu = None, None
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    if root != ROOT:
        env["PYTHONPATH"] = str(root)
    with subprocess.Popen(
        cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if first is None and line.startswith("[1/"):
                first = time.perf_counter() - start
                cpu = _cpu_by_role(proc.pid) if Path("/proc/self/stat").exists() else None
        code = proc.wait()
    wall = time.perf_counter() - start
    if code != 0:
        raise RuntimeError(f"sweep.py exited {code} on {space}")
    return {
        "wall": wall,
        "first_record": first if first is not None else wall,
        "cpu": cpu,
        "stacked": stacked_share(results),
    }


def stacked_share(results: Path) -> float | None:
    """The share of the training records that say ``extra.vectorized`` (None: none found)."""
    import pandas as pd

    files = sorted(results.rglob("*.parquet"))
    frames = [pd.read_parquet(f, columns=["attack", "extra"]) for f in files]
    frames = [f for f in frames if len(f)]
    if not frames:
        return None
    rows = pd.concat(frames)
    rows = rows[rows["attack"] == "none"]
    flags = rows["extra"].map(lambda e: bool(json.loads(e or "{}").get("vectorized")))
    return round(float(flags.mean()), 4) if len(flags) else None


def compare(
    name: str, base: dict[str, Any], n: int, cpus: int, repeats: int, marginal: bool = False
) -> dict[str, Any]:
    """Sweep (ray and local transports) against both loops, medians over ``repeats``;
    with ``marginal``, also ``2n`` trainings, for the cost of the n more."""
    runs: dict[str, list[float]] = {}
    stacked: dict[str, float | None] = {}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            for transport in ("ray", "local"):
                space = space_file(folder, f"{name}_{transport}", base, n, transport)
                out = sweep_process(space, folder / "results", cpus)
                runs.setdefault(f"sweep_{transport}_s", []).append(out["wall"])
                runs.setdefault(f"first_record_{transport}_s", []).append(out["first_record"])
                stacked[transport] = out["stacked"]
                if marginal:  # the same sweep with twice the trainings: after its first record
                    space = space_file(folder, f"{name}2_{transport}", base, 2 * n, transport)
                    double = sweep_process(space, folder / "results", cpus)
                    more = (double["wall"] - double["first_record"]) - (
                        out["wall"] - out["first_record"]
                    )
                    runs.setdefault(f"marginal_{transport}_s", []).append(more / n)
        runs.setdefault("loop_s", []).append(loop_in_process(base, n))
        runs.setdefault("loop_process_s", []).append(loop_process(base, n))
    med = {key: statistics.median(values) for key, values in runs.items()}
    out: dict[str, Any] = {
        "n": n, "base": base, **{k: round(v, 2) for k, v in med.items() if "marginal" not in k}
    }  # fmt: skip
    per_loop = med["loop_s"] / n
    for transport in ("ray", "local"):
        wall, first = med[f"sweep_{transport}_s"], med[f"first_record_{transport}_s"]
        out[f"sweep_over_loop_{transport}"] = round(wall / med["loop_s"], 3)
        out[f"sweep_over_loop_process_{transport}"] = round(wall / med["loop_process_s"], 3)
        overhead = (wall - first) * cpus / n - per_loop
        out[f"overhead_per_training_{transport}_s"] = round(overhead, 4)
        if marginal:
            out[f"marginal_{transport}_s"] = round(med[f"marginal_{transport}_s"], 5)
            out[f"marginal_over_loop_{transport}"] = round(
                med[f"marginal_{transport}_s"] / per_loop, 3
            )
    digits = {k: 5 if "marginal" in k else 2 for k in runs}
    out["runs"] = {k: [round(x, digits[k]) for x in v] for k, v in runs.items()}
    out["stacked_share"] = stacked  # of the last repeat's training records, per transport
    return out


def startup(cpus: int, repeats: int, root: Path = ROOT) -> dict[str, Any]:
    firsts, walls, cpus_by_role = [], [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            out = sweep_process(Path("search_spaces/smoke.yaml"), Path(tmp), cpus, root)
            firsts.append(out["first_record"])
            walls.append(out["wall"])
            if out["cpu"] is not None:
                cpus_by_role.append(out["cpu"])
    roles = sorted({role for c in cpus_by_role for role in c})
    cpu = {r: round(statistics.median(c.get(r, 0.0) for c in cpus_by_role), 2) for r in roles}
    if cpus_by_role:
        cpu["total"] = round(statistics.median(sum(c.values()) for c in cpus_by_role), 2)
    return {
        "first_record_s": round(statistics.median(firsts), 2),
        "wall_s": round(statistics.median(walls), 2),
        "runs": [round(x, 2) for x in firsts],
        "cpu_s_before_first_record": cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", type=int, default=500, help="tiny trainings (0: skip)")
    parser.add_argument("--vflair", type=int, default=100, help="50-epoch trainings (0: skip)")
    parser.add_argument("--heavy", type=int, default=0, help="heavy trainings (0: skip)")
    parser.add_argument("--cluster", type=int, default=0, help="tiny trainings on 4 nodes")
    parser.add_argument(
        "--defense",
        default=None,
        help="NAME:STRENGTH applied to every training of the tiny and vflair workloads "
        "(issue 44's: mid:1)",
    )
    parser.add_argument(
        "--marginal",
        action="store_true",
        help="tiny: also sweep 2n trainings; marginal_<transport>_s is what the n more cost "
        "after the first record, a training (fixed costs at the end cancel)",
    )
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--startup-against",
        type=Path,
        default=None,
        help="another checkout (e.g. a `git worktree` of an older commit): its start-up is "
        "measured too, one run of each in turn, so that both see the same machine",
    )
    args = parser.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    run_trial(TrialSpec.build(**{**TINY, "epochs": 1}))  # warm this process (imports, torch)
    out: dict[str, Any] = {"cpus": args.cpus, "repeats": args.repeats}
    if args.startup_against is None:
        out["startup"] = startup(args.cpus, args.repeats)
    else:  # interleaved: this machine's load drifts more between runs than the gap
        runs = [
            (startup(args.cpus, 1), startup(args.cpus, 1, args.startup_against.resolve()))
            for _ in range(args.repeats)
        ]
        for key, side in (("startup", 0), ("startup_against", 1)):
            out[key] = {
                m: statistics.median(r[side][m] for r in runs)
                for m in ("first_record_s", "wall_s")
            } | {"cpu_total_s": statistics.median(
                r[side]["cpu_s_before_first_record"].get("total", 0.0) for r in runs
            )}  # fmt: skip
        out["startup_against"]["checkout"] = str(args.startup_against)
    defended: dict[str, Any] = {}
    if args.defense:
        name, _, strength = args.defense.partition(":")
        defended = {"defense": name, "defense_param": float(strength) if strength else None}
        out["defense"] = args.defense
    if args.tiny:
        tiny = {**TINY, **defended}
        out["tiny"] = compare("tiny", tiny, args.tiny, args.cpus, args.repeats, args.marginal)
    if args.vflair:
        base = {**VFLAIR, **defended}
        out["vflair"] = compare("vflair", base, args.vflair, args.cpus, args.repeats)
    if args.heavy:
        out["heavy"] = compare("heavy", HEAVY, args.heavy, args.cpus, args.repeats)
    if args.cluster:
        from benchmarks.sweep_cluster import cluster_run

        out["cluster"] = cluster_run(args.cluster)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
