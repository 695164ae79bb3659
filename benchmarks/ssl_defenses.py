"""``python -m benchmarks.ssl_defenses``: a reduced slice of ``search_spaces/ssl_defenses.yaml``.

The shipped space asks the mission's question (defenses x SSL variants x aligned ratio x
attacks on adult and mnist, 2 seeds); on a laptop it runs for hours. This command runs a
slice of it through ``sweep.py`` and ``python -m analysis --compare
ssl_variant=splitnn:hssl_simsiam`` and prints one JSON object: the best defense per SSL
variant (C-DCS rank 1 per scenario, with its MP and C-DCS), the undefended MP per variant
and the DCS-gap summary of FedHSSL against plain split learning.

The slice keeps the space's variants, defenses and attacks and shrinks the rest: the
datasets, ratios and seeds given, ``--pretrain-epochs`` global SSL iterations (paper:
10-40), ``--epochs`` fine-tuning epochs, and the completion attacks (PMC, MC) at their
``fast`` preset (80 steps per epoch instead of VFLAIR's 1,024). The JSON says which ran.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from analysis.cli import main as analysis_main
from sweep_engine.cli import main as sweep_main

SPACE = Path(__file__).resolve().parents[1] / "search_spaces" / "ssl_defenses.yaml"
FAST = ("pmc", "mc", "amc")
HSSL_OPTIONS = ("pretrain_epochs",)


def reduced_space(args: argparse.Namespace) -> dict[str, Any]:
    """The shipped space with the slice's datasets, ratios, seeds, epochs and presets."""
    space = yaml.safe_load(SPACE.read_text())
    space["name"] = "ssl_defenses_slice"
    space["base"]["epochs"] = args.epochs
    grid = space["grid"]
    grid["dataset"] = args.datasets.split(",")
    grid["aligned_ratio"] = [float(r) for r in args.ratios.split(",")]
    grid["seed"] = [int(s) for s in args.seeds.split(",")]
    pre = {"pretrain_epochs": args.pretrain_epochs}
    grid["ssl_variant"] = [
        {"ssl_variant": v, "model_params": pre} if v != "fedcvt" else {"ssl_variant": v}
        for v in grid["ssl_variant"]
    ]
    space["attacks"] = [
        {"name": a, "preset": "fast"} if a in FAST and args.fast else a for a in space["attacks"]
    ]
    space["run"] = {"transport": args.transport, "reuse_actors": args.transport == "ray"}
    return space


def _csv(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def run(results: Path, args: argparse.Namespace) -> dict[str, object]:
    space_file = results / "ssl_defenses_slice.yaml"
    results.mkdir(parents=True, exist_ok=True)
    space_file.write_text(yaml.safe_dump(reduced_space(args), sort_keys=False))
    clock = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):  # progress lines; stdout is the JSON
        code = sweep_main(["--space", str(space_file), "--results", str(results), "--no-mlflow"])
    sweep_s = time.perf_counter() - clock
    if code != 0:
        raise SystemExit(f"sweep.py exited {code}")
    sweep_dir = results / "ssl_defenses_slice"
    with contextlib.redirect_stdout(io.StringIO()):
        code = analysis_main([str(sweep_dir), "--no-mlflow", "--no-plots",
                              "--compare", "ssl_variant=splitnn:hssl_simsiam"])  # fmt: skip
    if code != 0:
        raise SystemExit(f"python -m analysis exited {code}")
    report = sweep_dir / "report"
    ranking = _csv(report / "ranking.csv")
    best = [r for r in ranking if r.get("rank") in ("1", "1.0")]
    return {
        "space": "ssl_defenses (slice)",
        "slice": {k: getattr(args, k) for k in ("datasets", "ratios", "seeds", "epochs",
                                                 "pretrain_epochs", "fast", "transport")},
        "best_defense_per_variant": best,
        "ranking": ranking,
        "dcs_gap_ssl_variant_summary": _csv(
            report / "dcs_gap_ssl_variant_splitnn_vs_hssl_simsiam_summary.csv"
        ),
        "sweep_seconds": round(sweep_s, 1),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="adult")
    p.add_argument("--ratios", default="0.2,0.4")
    p.add_argument("--seeds", default="0")
    p.add_argument("--epochs", type=int, default=10, help="fine-tuning epochs (space: 30)")
    p.add_argument("--pretrain-epochs", type=int, default=2, help="global SSL iterations")
    p.add_argument("--no-fast", dest="fast", action="store_false",
                   help="completion attacks at VFLAIR's 1,024 steps per epoch")  # fmt: skip
    p.add_argument("--transport", default="local", help="local or ray")
    p.add_argument("--keep", default=None, help="results folder to keep (default: temp)")
    args = p.parse_args()
    if args.keep:
        print(json.dumps(run(Path(args.keep), args), default=str))
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run(Path(tmp), args), default=str))


if __name__ == "__main__":
    main()
