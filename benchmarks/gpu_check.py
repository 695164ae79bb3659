"""``python -m benchmarks.gpu_check``: the prepared check for when a GPU machine is lent.

Never needed by the tests. On a machine with CUDA it runs, and prints as one JSON line:

- ``pack``: one vectorized pack of ``--k`` breast_cancer and digits trainings (MLP-2,
  batch 1024, Adam, ``--epochs``) in this process on ``cuda`` and on ``cpu``: trainings
  per second each way, peak GPU memory (``torch.cuda.max_memory_allocated``) and whether
  every training's MP agrees between the devices to ``MP_TOL`` (float summation order
  differs between the devices, so a test row on a decision boundary may flip);
- ``smoke``: ``sweep.py --space search_spaces/smoke.yaml`` with ``device: cuda`` and
  ``gpu_per_party: 0.25`` (both parties of a trial share the GPU), its wall seconds and
  exit code;
- ``attacks``: the model completions (PMC, MC) and BLI at the defaults (the heavy
  attacks, ``benchmarks.roofline``) after one digits training (VFLAIR's settings,
  ``--attack-epochs``) on ``cuda`` and on ``cpu`` from the same seed: per device the
  training's and each attack's wall seconds and AP, and each AP's gap between the
  devices and whether it is within ``MP_TOL``. The attacks read the trained parties
  through the harness, which copies every view to the CPU (``harness.make_view``): this
  checks that they run on a CUDA training's parties and score the same, not a CUDA
  kernel of theirs (they have none).

Without CUDA it prints ``{"cuda": false}`` and exits 0, so it can be run blind;
``--cpu`` runs the attack check on the CPU alone (the code path, here, without a GPU).
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

import torch
import yaml

from trainables.attacks.harness import run_attacks
from trainables.data import load_dataset
from trainables.jobs import Job
from trainables.kinds.nn import NNKind
from trainables.spec import TrialSpec
from trainables.transport.placement import LOCAL
from trainables.vfl.training import prepare_parties, train_local_parties

ROOT = Path(__file__).resolve().parents[1]
MP_TOL = 0.01  # one test row in a hundred
HEAVY = ("pmc", "mc", "bli")  # the model completions and BLI, at their defaults


def pack(dataset: str, k: int, epochs: int, device: str) -> dict[str, Any]:
    ds = load_dataset(dataset)
    jobs = [
        Job(TrialSpec.build(dataset=dataset, epochs=epochs, seed=s, device=device))
        for s in range(k)
    ]
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    got = dict(NNKind().run_many(jobs, ds, LOCAL))
    seconds = time.perf_counter() - start
    out: dict[str, Any] = {
        "seconds": round(seconds, 3),
        "trainings_per_s": round(k / seconds, 1),
        "mps": [got[i][0].mp for i in range(k)],  # type: ignore[index,union-attr]
    }
    if device == "cuda":
        out["peak_gpu_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return out


def smoke(results: Path) -> dict[str, Any]:
    space = yaml.safe_load((ROOT / "search_spaces" / "smoke.yaml").read_text())
    space["base"]["device"] = "cuda"
    space["resources"]["gpu_per_party"] = 0.25
    path = results / "smoke_cuda.yaml"
    path.write_text(yaml.safe_dump(space))
    cmd = [sys.executable, "sweep.py", "--space", str(path), "--results", str(results)]
    start = time.perf_counter()
    done = subprocess.run(
        [*cmd, "--no-mlflow"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    return {
        "wall_s": round(time.perf_counter() - start, 1),
        "exit_code": done.returncode,
        "tail": done.stdout[-400:] if done.returncode else "",
    }


def attacked(device: str, epochs: int) -> dict[str, Any]:
    """One digits training on ``device`` (seed 0), then PMC, MC and BLI on its parties:
    wall seconds of the training and of each attack (the harness's), and each AP."""
    ds = load_dataset("digits")
    spec = TrialSpec.build(dataset="digits", seed=0, epochs=epochs, device=device)
    start = time.perf_counter()
    prepared = prepare_parties(spec, ds, [(a, {}) for a in HEAVY])
    parties: list[Any] = train_local_parties(prepared, epochs)[1]
    out: dict[str, Any] = {"train_s": round(time.perf_counter() - start, 2)}
    for name in HEAVY:
        (got,) = run_attacks(parties, [(name, {})], 0)
        out[name] = {"seconds": round(got.seconds, 2), "ap": round(got.ap, 4)}
    return out


def attacks_check(devices: tuple[str, ...], epochs: int) -> dict[str, Any]:
    """``attacked`` on each device; with two, whether each attack's AP agrees."""
    out: dict[str, Any] = {d: attacked(d, epochs) for d in devices}
    if len(devices) == 2:
        a, b = (out[d] for d in devices)
        out["ap_gap"] = {n: round(abs(a[n]["ap"] - b[n]["ap"]), 4) for n in HEAVY}
        out["ap_agree"] = {n: gap <= MP_TOL for n, gap in out["ap_gap"].items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--attack-epochs", type=int, default=30, help="VFLAIR's digits")
    parser.add_argument("--cpu", action="store_true", help="the attack check on the CPU only")
    args = parser.parse_args()
    if args.cpu:
        checked = attacks_check(("cpu",), args.attack_epochs)
        print(json.dumps({"cuda": torch.cuda.is_available(), "cpu_only": True, "attacks": checked}))
        return
    if not torch.cuda.is_available():
        print(json.dumps({"cuda": False}))
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    out: dict[str, Any] = {"cuda": True, "gpu": torch.cuda.get_device_name(0), "k": args.k}
    for dataset in ("breast_cancer", "digits"):
        pack(dataset, 2, 1, "cuda")  # warm CUDA and the kernels
        gpu, cpu = (pack(dataset, args.k, args.epochs, d) for d in ("cuda", "cpu"))
        gaps = [abs(a - b) for a, b in zip(gpu.pop("mps"), cpu.pop("mps"), strict=True)]
        out[dataset] = {"cuda": gpu, "cpu": cpu, "mp_max_gap": max(gaps)}
        out[dataset]["mp_agree"] = max(gaps) <= MP_TOL
    out["attacks"] = attacks_check(("cuda", "cpu"), args.attack_epochs)
    with tempfile.TemporaryDirectory() as tmp:
        out["smoke"] = smoke(Path(tmp))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
