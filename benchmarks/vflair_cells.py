"""``python -m benchmarks.vflair_cells``: our engine against VFLAIR's own code on a sample of
``defenses.yaml``'s digits cells, both run in one go, wall and CPU seconds each (issue 67
item 3).

Why: the claim to check is "ours is at least 10x faster than VFLAIR's code on the same
cells". A cell is one defense at one strength (or none) and one seed on digits (aggVFL, 2
parties, FedSGD), with all the attacks ``defenses.yaml`` runs on digits.

What runs, one side after the other (the machine should be otherwise quiet):

(a) ours: ``vflsweep run`` of a space file written here: ``defenses.yaml`` restricted to
    digits, the sampled seeds and the sampled defense points (the defense axis always holds
    ``none``), all ten digits attacks; a fresh results folder and a fresh cost cache, MLflow
    on (the default), i.e. the whole command a user runs. Its records give per attack AP
    and MP.
(b) VFLAIR: ``benchmarks/vflair_code/run_vflair_cells.py`` in VFLAIR's venv as a subprocess,
    on the plan ``vflair_plan`` maps the same cells to (VFLAIR's own MNIST configs of each
    defense, adapted to digits only as the dataset requires; see that script and
    ``benchmarks/vflair_code/README.md``). VFLAIR has no implementation of our ``mc``
    (FedHSSL's model completion) nor of the ``iso`` defense: those are left out of its side
    and listed under ``vflair_lacks``.

Each side: ``wall_s`` (perf_counter around the subprocess) and ``cpu_s``, user + system of
the subprocess and all its descendants: the larger of the RUSAGE_CHILDREN delta (this
process is made a child subreaper so that orphans are reaped here) and a /proc sample of
every descendant (Ray's workers are killed at shutdown without being waited for, so
RUSAGE_CHILDREN alone misses most of our side's CPU; see ``timed``). ``ratio`` = VFLAIR /
ours for both. Per cell and attack: both sides' AP and MP, where the attack exists on both
sides (not expected to match: different models, settings and metric definitions; README).

``--epochs N`` (a named reduction, applied to both sides equally: our ``epochs`` key and
VFLAIR's config ``epochs``) is off by default. ``--sides ours`` / ``--sides vflair`` runs one
side only. Prints one JSON object; ``--out`` also writes it.
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SIDE_PY = "/work/vflair_side/venv/bin/python"
SIDE_SRC = "/work/vflair_src/src"
SIDE_RUNNER = ROOT / "benchmarks" / "vflair_code" / "run_vflair_cells.py"
ROWS_NPZ = "/work/vflair_side/digits_rows.npz"

# our attack -> (VFLAIR's attack, which VFLAIR config family carries it); None: VFLAIR has none
ATTACKS: dict[str, tuple[str, str] | None] = {
    "dli": ("DirectLabelScoring", "passive"),
    "bli": ("BatchLabelReconstruction", "passive"),
    "pmc": ("PassiveModelCompletion", "passive"),
    "amc": ("ActiveModelCompletion", "passive"),
    "mc": None,  # FedHSSL's model completion on pretrained encoders: not in VFLAIR
    "grn": ("GenerativeRegressionNetwork", "active"),
    "tbm": ("ResSFL", "active"),
    "lrb": ("ReplacementBackdoor", "passive"),
    "nsb": ("NoisySample", "passive"),
    "mf": ("MissingFeature", "passive"),
}
# our defense -> (VFLAIR's config stem, its defense name, the strength key); None: VFLAIR has none
DEFENSES: dict[str, tuple[str, str, str] | None] = {
    "gdp": ("dp", "GaussianDP", "dp_strength"),
    "ldp": ("ldp", "LaplaceDP", "dp_strength"),
    "gs": ("gs", "GradientSparsification", "gradient_sparse_rate"),
    "gper": ("gp", "GradPerturb", "perturb_epsilon"),
    "dcor": ("dcor", "DistanceCorrelation", "lambda"),
    "cae": ("cae", "CAE", "lambda"),
    "dcae": ("dcae", "DCAE", "lambda"),
    "mid": ("mid", "MID", "lambda"),
    "iso": None,  # FedHSSL's isotropic noise: not in VFLAIR
}
# VFLAIR's trained confusional autoencoders for 10 classes, per lambda (CAE and DCAE)
CAE_MODELS = {
    0.0: "autoencoder_10_0.0_1631093149",
    0.1: "autoencoder_10_0.1_1686717045",
    0.5: "autoencoder_10_0.5_1642396797",
    1.0: "autoencoder_10_1.0_1642396548",
}
# VFLAIR's own config families that have a config per defense (FR attacks: active family)
ACTIVE_CONFIGS = {"nodefense", "dp", "ldp", "dcor", "mid"}
PASSIVE = "passive_party_attack/multi_class/mnist_test_attack_{}"
ACTIVE = "active_party_attack/multi_class/mnist_test_attack_{}"
DIGITS_PARTY_DIM = 32  # 4 x 8 pixels per party (VFLAIR's MNIST: 14 x 28 = 392)
# the sample run for docs/benchmarks.md: seed 0, 10 cells over 8 defenses
DEFAULT_CELLS = (
    "none",
    "gdp:0.0001",
    "gdp:0.1",
    "ldp:0.01",
    "gs:99.0",
    "gper:1.0",
    "dcor:0.0001",
    "dcor:0.3",
    "mid:1.0",
    "cae:0.5",
)


def parse_cell(text: str) -> tuple[str, float | None]:
    """``none`` or ``defense:strength`` -> (defense, strength)."""
    if text == "none":
        return "none", None
    name, _, strength = text.partition(":")
    if name not in DEFENSES or not strength:
        raise ValueError(f"{text!r}: 'none' or DEFENSE:STRENGTH, DEFENSE in {sorted(DEFENSES)}")
    return name, float(strength)


def vflair_config(
    defense: str,
    strength: float | None,
    role: str,
    attacks: Sequence[str],
    read: Callable[[str], dict[str, Any]],
    src: str = SIDE_SRC,
    epochs: int | None = None,
) -> dict[str, Any]:
    """VFLAIR's config for one cell and one config family (``role`` passive: label-inference
    and backdoor attacks; active: feature reconstruction), from VFLAIR's own config files
    (``read(relative path without .json)``), adapted only as digits requires:

    - settings (epochs, lr, batch) and the defense block (party, extra parameters) are those
      of VFLAIR's config of that defense in that family; where the active family has none
      (gs, gper, cae, dcae) the active no-defense config carries the passive config's
      defense block;
    - the strength key is set to ``strength``; CAE/DCAE load VFLAIR's trained autoencoder
      of that lambda (absolute path under ``src``);
    - FedSGD (the passive family ships FedBCD_p, Q=5; defenses.yaml is FedSGD);
    - the attack list is the no-defense config's entries (with their parameters) for the
      attacks asked, in that config's order (VFLAIR's CAE, DCAE and GPer passive configs
      omit MF and NSB; ours run every attack on every cell);
    - the bottom models' ``input_dim`` is 32 (4 x 8 digits pixels) instead of 392.
    """
    family = PASSIVE if role == "passive" else ACTIVE
    base_none = read(family.format("nodefense"))
    if defense == "none":
        cfg = copy.deepcopy(base_none)
        cfg.pop("defense", None)
    else:
        mapped = DEFENSES[defense]
        if mapped is None:
            raise ValueError(f"VFLAIR has no {defense} defense")
        stem, name, key = mapped
        if role == "active" and stem not in ACTIVE_CONFIGS:
            cfg = copy.deepcopy(base_none)
            cfg["defense"] = copy.deepcopy(read(PASSIVE.format(stem))["defense"])
        else:
            cfg = copy.deepcopy(read(family.format(stem)))
        if cfg["defense"]["name"] != name:
            raise ValueError(f"{stem}: defense {cfg['defense']['name']}, expected {name}")
        params = cfg["defense"]["parameters"]
        params[key] = strength
        if defense in ("cae", "dcae"):
            if strength not in CAE_MODELS:
                raise ValueError(f"{defense}: VFLAIR ships autoencoders for {sorted(CAE_MODELS)}")
            params["model_path"] = (
                f"{src}/evaluates/defenses/trained_CAE_models/" + CAE_MODELS[strength]
            )
    cfg["communication"] = {"communication_protocol": "FedSGD", "iteration_per_aggregation": 1}
    if epochs is not None:
        cfg["epochs"] = epochs
    wanted = {m[0] for a in attacks if (m := ATTACKS.get(a)) is not None and m[1] == role}
    entries = [e for _, e in sorted(base_none["attack_list"].items(), key=lambda kv: int(kv[0]))]
    cfg["attack_list"] = {
        str(i): e for i, e in enumerate(x for x in entries if x["name"] in wanted)
    }
    for party in cfg["model_list"].values():
        if isinstance(party, dict) and party.get("input_dim") == 392:
            party["input_dim"] = DIGITS_PARTY_DIM
    return cfg


def vflair_plan(
    cells: Iterable[tuple[str, float | None]],
    seeds: Iterable[int],
    attacks: Sequence[str],
    read: Callable[[str], dict[str, Any]],
    src: str = SIDE_SRC,
    epochs: int | None = None,
) -> list[dict[str, Any]]:
    """One VFLAIR run per cell, seed and config family that carries one of ``attacks``."""
    runs = []
    for seed in seeds:
        for defense, strength in cells:
            tag = "none" if defense == "none" else f"{defense}{strength:g}"
            for role in ("passive", "active"):
                ours = [a for a in attacks if (m := ATTACKS.get(a)) and m[1] == role]
                if not ours:
                    continue
                cfg = vflair_config(defense, strength, role, ours, read, src, epochs)
                runs.append(
                    {
                        "name": f"vflsweep_digits_{tag}_{role}_seed{seed}",
                        "seed": seed,
                        "cell": {"defense": defense, "strength": strength, "seed": seed},
                        "role": role,
                        "attacks": ours,
                        "config": cfg,
                    }
                )
    return runs


def lacks(cells: Iterable[tuple[str, float | None]], attacks: Sequence[str]) -> dict[str, Any]:
    return {
        "attacks": [a for a in attacks if ATTACKS.get(a) is None],
        "defenses": sorted({d for d, _ in cells if d != "none" and DEFENSES.get(d) is None}),
    }


# ------------------------------------------------------------------------------ running


def _subreaper() -> None:
    """Make orphaned descendants (Ray's) our children, so their CPU enters RUSAGE_CHILDREN."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _reap(timeout: float = 30.0) -> None:
    """Wait for any leftover (reparented) children so that their CPU is counted."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.2)


TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _descendant_cpu(root: int) -> dict[int, float]:
    """CPU seconds (own user + system, from /proc) of every live descendant of ``root``."""
    parent: dict[int, int] = {}
    own: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        parent[pid] = int(fields[1])
        own[pid] = (int(fields[11]) + int(fields[12])) / TICK
    out = {}
    for pid, seconds in own.items():
        p, hops = parent.get(pid), 0
        while p is not None and p > 1 and hops < 64:
            if p == root:
                out[pid] = seconds
                break
            p, hops = parent.get(p), hops + 1
    return out


def timed(
    cmd: list[str], env: dict[str, str], log: Path, ok: tuple[int, ...] = (0,)
) -> dict[str, float]:
    """Run ``cmd`` to the end: its wall seconds and its and its descendants' CPU seconds, two
    ways, each a lower bound: ``cpu_rusage_s`` (RUSAGE_CHILDREN: the processes reaped up the
    tree; Ray's workers, killed at shutdown, are mostly not) and ``cpu_proc_s`` (/proc sampled
    every 0.25 s: the last value seen of each descendant, so a process's last 0.25 s and
    processes shorter than that are missed). ``cpu_s`` is the larger."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    me = os.getpid()
    seen: dict[int, float] = {}
    t0 = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            seen.update(_descendant_cpu(me))
            time.sleep(0.25)
    wall = time.perf_counter() - t0
    seen.update(_descendant_cpu(me))
    _reap()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    rusage = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    sampled = sum(seen.values())
    if proc.returncode not in ok:
        tail = log.read_text()[-3000:]
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{tail}")
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(max(rusage, sampled), 2),
        "cpu_rusage_s": round(rusage, 2),
        "cpu_proc_s": round(sampled, 2),
        "processes_seen": len(seen),
        "returncode": proc.returncode,
    }


def space_file(
    cells: list[tuple[str, float | None]], seeds: list[int], epochs: int | None, work: Path
) -> Path:
    """``defenses.yaml`` restricted to digits, ``seeds`` and the sampled defense points."""
    import yaml

    doc = yaml.safe_load((ROOT / "search_spaces" / "defenses.yaml").read_text())
    doc["name"] = "vflair_cells"
    doc["grid"] = {"dataset": ["digits"], "seed": list(seeds)}
    defenses: dict[str, list[float]] = {}
    for d, s in cells:
        if d != "none":
            defenses.setdefault(d, []).append(float(s))  # type: ignore[arg-type]
    doc["defenses"] = defenses
    doc["attacks"] = [a for a in doc["attacks"] if "digits" in a.get("datasets", ["digits"])]
    if epochs is not None:
        doc["base"]["epochs"] = epochs
    path = work / "vflair_cells.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def export_rows(path: str) -> dict[str, Any]:
    """Our digits rows and split, as VFLAIR's side reads them: X/16 float32 N x 8 x 8."""
    import hashlib

    import numpy as np

    from trainables.data import load_dataset

    ds = load_dataset("digits")
    out = {}
    for part in ("train", "test"):
        X = np.asarray(getattr(ds, f"X_{part}"), dtype=np.float64)
        out[f"X_{part}"] = (X / 16.0).reshape(-1, 8, 8).astype(np.float32)
        out[f"y_{part}"] = np.asarray(getattr(ds, f"y_{part}")).astype(np.int64)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **out)
    digest = hashlib.sha256()
    for key in sorted(out):
        digest.update(np.ascontiguousarray(out[key]).tobytes())
    return {
        "npz": path,
        "sha256": digest.hexdigest(),
        "rows": [len(out["y_train"]), len(out["y_test"])],
    }


def run_ours(
    cells: list[tuple[str, float | None]], seeds: list[int], epochs: int | None, work: Path
) -> tuple[dict[str, Any], Any]:
    from analysis.load import read_records
    from benchmarks.defenses_quick import cpu_of

    space = space_file(cells, seeds, epochs, work)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "VFLSWEEP_CACHE": str(work / "cache")}
    results = work / "results"
    cmd = [
        sys.executable,
        "-m",
        "sweep_engine.vflsweep",
        "run",
        str(space),
        "--results",
        str(results),
    ]
    out = timed(cmd, env, work / "ours.log", ok=(0, 1))  # 1: some record failed
    df = read_records(results / "vflair_cells", with_spec=False)
    out["records"] = len(df)
    out["failed_records"] = int((df["status"] != "ok").sum())
    out["records_cpu_s"] = cpu_of(df)  # what the records report (trainings' clean rows, attacks)
    out["command"] = " ".join(["vflsweep", *cmd[3:]])
    return out, df


def run_vflair(
    cells: list[tuple[str, float | None]],
    seeds: list[int],
    attacks: list[str],
    epochs: int | None,
    work: Path,
    side_py: str,
    src: str,
    threads: int,
) -> dict[str, Any]:
    def read(rel: str) -> dict[str, Any]:
        return json.loads((Path(src) / "configs" / f"{rel}.json").read_text())

    rows = export_rows(ROWS_NPZ)
    plan = {"rows_npz": ROWS_NPZ, "runs": vflair_plan(cells, seeds, attacks, read, src, epochs)}
    plan_path, out_path = work / "vflair_plan.json", work / "vflair_out.json"
    plan_path.write_text(json.dumps(plan, indent=1))
    cmd = [
        side_py,
        str(SIDE_RUNNER),
        "--vflair",
        src,
        "--plan",
        str(plan_path),
        "--out",
        str(out_path),
        "--threads",
        str(threads),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    out = timed(cmd, env, work / "vflair.log")
    out["rows"] = rows
    out["runs"] = json.loads(out_path.read_text())["runs"] if out_path.is_file() else []
    return out


def metrics(ours_df: Any, vflair_runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell and attack: both sides' AP and MP (VFLAIR: as its result line reports them;
    GRN/ResSFL AP = 1 - mse)."""
    by_name = {v[0]: k for k, v in ATTACKS.items() if v is not None}
    theirs: dict[tuple[str, Any, int, str], dict[str, Any]] = {}
    for run in vflair_runs:
        c = run["cell"]
        for r in run["results"]:
            ours_name = by_name.get(r["attack"])
            if ours_name is None:
                continue
            if "mse" in r:
                ap = 1.0 - r["mse"]
            else:
                ap = next(
                    v
                    for k, v in r.items()
                    if k in ("label_recovery_rate", "backdoor_acc", "acc_loss", "attack_acc")
                )
            key = (c["defense"], c["strength"], int(c["seed"]), ours_name)
            theirs[key] = {
                "ap": round(float(ap), 4),
                "mp": round(float(r["main_acc"]), 4),
                "vflair_attack": r["attack"],
                "wall_s": round(float(r["wall_s_since_previous"]), 2),
            }
    out = []
    if ours_df is not None:
        df = ours_df[ours_df["attack"].astype(str) != "none"]
        for _, row in df.iterrows():
            strength = None if row["defense"] == "none" else float(row["defense_param"])
            key = (str(row["defense"]), strength, int(row["seed"]), str(row["attack"]))
            entry = {
                "defense": key[0],
                "strength": strength,
                "seed": key[2],
                "attack": key[3],
                "ours": {"ap": _r(row.get("ap")), "mp": _r(row.get("mp"))},
            }
            entry["vflair"] = theirs.pop(key, None)
            out.append(entry)
    for key, value in theirs.items():
        out.append(
            {
                "defense": key[0],
                "strength": key[1],
                "seed": key[2],
                "attack": key[3],
                "ours": None,
                "vflair": value,
            }
        )
    return sorted(out, key=lambda e: (e["defense"], e["strength"] or 0.0, e["seed"], e["attack"]))


def _r(x: Any) -> float | None:
    try:
        return None if x is None or x != x else round(float(x), 4)
    except (TypeError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--cells",
        nargs="+",
        default=list(DEFAULT_CELLS),
        help="'none' or DEFENSE:STRENGTH each (default: the 10 documented)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--attacks", nargs="+", default=list(ATTACKS), choices=list(ATTACKS))
    p.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="named reduction: this many epochs on both sides (default: each side's own)",
    )
    p.add_argument("--sides", default="ours,vflair", help="ours,vflair (default both)")
    p.add_argument("--vflair-python", default=SIDE_PY)
    p.add_argument("--vflair-src", default=SIDE_SRC)
    p.add_argument("--threads", type=int, default=1, help="VFLAIR's torch threads")
    p.add_argument("--workdir", default=None, help="keep logs, plan, records here")
    p.add_argument("--out", default=None, help="also write the JSON object here")
    opts = p.parse_args(argv)
    cells = [parse_cell(c) for c in opts.cells]
    sides = opts.sides.split(",")
    _subreaper()
    out: dict[str, Any] = {
        "benchmark": "vflair_cells",
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
        "cells": opts.cells,
        "seeds": opts.seeds,
        "attacks": opts.attacks,
        "epochs": opts.epochs,
        "vflair_lacks": lacks(cells, opts.attacks),
    }
    work_ctx = tempfile.TemporaryDirectory(prefix="vflair-cells-") if opts.workdir is None else None
    work = Path(work_ctx.name if work_ctx else opts.workdir)
    work.mkdir(parents=True, exist_ok=True)
    vcells = [c for c in cells if c[0] == "none" or DEFENSES.get(c[0]) is not None]
    ours_df = None
    vruns: list[dict[str, Any]] = []
    if "ours" in sides:
        out["ours"], ours_df = run_ours(cells, opts.seeds, opts.epochs, work)
        print(f"ours: {out['ours']}", file=sys.stderr, flush=True)
    if "vflair" in sides:
        v = run_vflair(
            vcells,
            opts.seeds,
            opts.attacks,
            opts.epochs,
            work,
            opts.vflair_python,
            opts.vflair_src,
            opts.threads,
        )
        vruns = v.pop("runs")
        v["per_run"] = [
            {"name": r["name"], "wall_s": round(r["wall_s"], 2), "cpu_s": round(r["cpu_s"], 2)}
            for r in vruns
        ]
        out["vflair"] = v
        print(f"vflair: wall {v['wall_s']} s, cpu {v['cpu_s']} s", file=sys.stderr, flush=True)
    if "ours" in out and "vflair" in out:
        out["ratio"] = {k: round(out["vflair"][k] / out["ours"][k], 2) for k in ("wall_s", "cpu_s")}
    out["per_cell_attack"] = metrics(ours_df, vruns)
    out["loadavg_end"] = os.getloadavg()
    text = json.dumps(out)
    if opts.out:
        Path(opts.out).write_text(json.dumps(out, indent=1) + "\n")
    print(text)
    if work_ctx is not None:
        work_ctx.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
