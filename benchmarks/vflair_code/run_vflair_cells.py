"""Run VFLAIR's OWN pipeline (``main_pipeline.py``'s ``__main__``) on vflsweep's digits rows,
for the cells of a plan that ``python -m benchmarks.vflair_cells`` writes (issue 67 item 3).

A plan is JSON: ``{"rows_npz": ..., "runs": [{"name", "seed", "cell", "role", "config",
"attacks"}, ...]}``; each run is one VFLAIR config (already mapped from one of our cells by
``benchmarks.vflair_cells.vflair_plan``). For each run this script does what
``main_pipeline.py`` ``__main__`` does (:338-425) for one seed: ``set_seed``,
``load_basic_configs``, ``load_attack_configs(-1)``, ``load_parties``, ``evaluate_no_attack``,
then ``evaluate_label_inference``, ``evaluate_feature_inference``,
``evaluate_untargeted_backdoor`` and ``evaluate_targeted_backdoor`` for the attacks the
config lists — VFLAIR's code end to end, each attack with its own re-training where VFLAIR
re-trains (AMC, GRN, ResSFL, MF, NSB, LRB; BLI, DLI and PMC use the no-attack training).

Everything of ``run_vflair.py`` applies (its stubs, the ``pred_transmit`` fix, LRB's target
label fixed to 0; see its docstring), plus, for digits (8x8 images, pixel values 0..16):

1. Rows: ``torchvision.datasets.MNIST`` serves our digits rows as mode-"F" PIL images of
   X/16 (float32 in [0, 1]); ``ToTensor`` passes a float image through, so VFLAIR's tensors
   are X/16 (its MNIST rows are X/255 in [0, 1]). The dataset keeps VFLAIR's name ``mnist``
   so that its MNIST code path (transforms, trigger, noise) runs.
2. Party split: ``LoadDataset.dataset_partition`` is called with ``half_dim`` 4 where VFLAIR
   hard-codes 14 for MNIST (party 0 = image rows 0-3, party 1 = rows 4-7, 32 pixels each).
3. LRB trigger: ``utils.basic_functions.data_poison`` sets pixels (13,27), (12,26), (11,27),
   (13,25) of a 28x28 image; re-compiled from VFLAIR's source with those positions shifted
   to the same corner of party 0's 4x8 half: (3,7), (2,6), (1,7), (3,5).
4. CPU: ``ModelCompletion.train`` (PMC, AMC) calls ``targets_x.cuda(non_blocking=True)``
   unconditionally (ModelCompletion.py:129), which raises on a CPU-only torch; with no CUDA,
   ``torch.Tensor.cuda`` is made the identity (the ``.to(self.device)`` after it is VFLAIR's).
5. PMC/AMC batches: ``ModelCompletion.attack`` builds its unlabeled loader without
   ``drop_last`` (ModelCompletion.py:300), so a short last batch (1397 unlabeled digits rows,
   batch 16: 5 rows) meeting a full labeled batch breaks MixMatch's ``interleave`` and the
   loss raises a size mismatch (13 vs 16). Re-compiled with ``drop_last=True`` on that
   loader, as MixMatch's own code has it (our MNIST rows happened to escape it: 7960 rows).
6. HEAD bug: ``evaluate_label_inference`` (AMC) and ``evaluate_feature_inference``
   (ResSFL) unpack ``main_acc, stopping_iter = vfl.train()``, but ``MainTaskVFL.train``
   returns four values (MainTaskVFL.py:527), so both raise ``ValueError`` at HEAD. Both are
   re-compiled from VFLAIR's source with the call written ``vfl.train()[:2]``.

GRN and ResSFL save their reconstructions to ``./exp_result/grn/`` and ``./exp_result/ressfl/``
(GenerativeRegressionNetwork.py:299, ResSFL.py:258), folders they never create: the runner
creates them in the work directory.

Observation only: ``main_pipeline.append_exp_res`` is wrapped to keep each result line
VFLAIR writes (with the wall time since the previous one); per run the wall and CPU seconds
(``time.process_time``, this process) are recorded.

    /work/vflair_side/venv/bin/python benchmarks/vflair_code/run_vflair_cells.py \\
        --vflair /work/vflair_src/src --plan PLAN.json --out OUT.json

Nothing imports this file; it runs in VFLAIR's side venv (README.md).
"""

from __future__ import annotations

import argparse
import builtins
import inspect
import json
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_vflair as rv  # the MNIST runner: stubs, patches, config writing

DIGITS_HALF_DIM = 4
TRIGGER_28 = ("0, 13, 27]", "0, 12, 26]", "0, 11, 27]", "0, 13, 25]")
TRIGGER_8 = ("0, 3, 7]", "0, 2, 6]", "0, 1, 7]", "0, 3, 5]")
DIGITS: dict[str, np.ndarray] = {}


class DigitsRows(rv.RowsMNIST):
    """``torchvision.datasets.MNIST`` stand-in serving our digits rows (float32 N x 8 x 8 in
    [0, 1]) as mode-"F" PIL images through the transform, label as int."""

    rows = DIGITS
    mode = "F"


def _recompile(module: Any, func: Any, replacements: list[tuple[str, str]]) -> Any:
    """``func`` re-compiled from VFLAIR's own source with each (old, new) replaced once or
    more (each ``old`` must occur)."""
    source = textwrap.dedent(inspect.getsource(func))
    for old, new in replacements:
        if old not in source:
            raise RuntimeError(f"{func.__name__}: {old!r} not in VFLAIR's source")
        source = source.replace(old, new)
    namespace: dict[str, Any] = {}
    exec(
        compile(source, inspect.getsourcefile(func) or func.__name__, "exec"),
        module.__dict__,
        namespace,
    )
    return namespace[func.__name__]


class Cells(rv.Vflair):
    """VFLAIR with the MNIST runner's patches and the digits adaptations above."""

    def __init__(self, src: Path, workdir: Path) -> None:
        super().__init__(src, workdir)
        for sub in ("grn", "ressfl"):
            (workdir / "exp_result" / sub).mkdir(parents=True, exist_ok=True)
        sys.modules["torchvision.datasets"].MNIST = DigitsRows
        import torch

        if not torch.cuda.is_available():
            torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
        ld = self.load_dataset_mod
        orig_partition = ld.dataset_partition

        def partition(args: Any, index: int, dst: Any, half_dim: Any) -> Any:
            return orig_partition(args, index, dst, DIGITS_HALF_DIM if half_dim == 14 else half_dim)

        ld.dataset_partition = partition
        bf = sys.modules["utils.basic_functions"]
        bf.data_poison = _recompile(
            bf, bf.data_poison, list(zip(TRIGGER_28, TRIGGER_8, strict=True))
        )
        mc = sys.modules["evaluates.attacks.ModelCompletion"]
        loader = "train_loader = DataLoader(train_dst, batch_size=batch_size, shuffle=True)"
        mc.ModelCompletion.attack = _recompile(
            mc, mc.ModelCompletion.attack, [(loader, loader[:-1] + ", drop_last=True)")]
        )
        mp = self.mp
        unpack = [
            ("main_acc, stopping_iter = vfl.train()", "main_acc, stopping_iter = vfl.train()[:2]")
        ]
        mp.evaluate_label_inference = _recompile(mp, mp.evaluate_label_inference, unpack)
        mp.evaluate_feature_inference = _recompile(mp, mp.evaluate_feature_inference, unpack)
        self.lines: list[dict[str, Any]] = []
        self._last = time.time()
        orig_append = mp.append_exp_res

        def append_exp_res(path: str, line: str) -> Any:
            now = time.time()
            if line.startswith("K|"):
                self.lines.append({"line": line, "wall_s_since_previous": now - self._last})
            self._last = now
            return orig_append(path, line)

        mp.append_exp_res = append_exp_res

    def _print_hook(self, *args: Any, **kwargs: Any) -> None:  # lighter than the MNIST one
        builtins.print(*args, **kwargs)

    def run(self, entry: dict[str, Any]) -> dict[str, Any]:
        """main_pipeline.py ``__main__`` (:338-425) for one config and seed."""
        mp = self.mp
        name = self.write_config_dict(entry["name"], entry["config"])
        self.reset()
        self.lines = []
        w0, c0 = time.time(), time.process_time()
        self._last = w0
        args = self.basic_args(name, int(entry["seed"]))
        args = mp.load_attack_configs(args.configs, args, -1)
        args = mp.load_parties(args)
        args.basic_vfl, args.main_acc_noattack = mp.evaluate_no_attack(args)
        if args.label_inference_list:
            mp.evaluate_label_inference(args)
        if args.feature_inference_list:
            mp.evaluate_feature_inference(args)
        if args.untargeted_backdoor_list:
            mp.evaluate_untargeted_backdoor(args)
        if args.targeted_backdoor_list:
            mp.evaluate_targeted_backdoor(args)
        return {
            "name": entry["name"],
            "cell": entry["cell"],
            "role": entry["role"],
            "attacks": entry["attacks"],
            "wall_s": time.time() - w0,
            "cpu_s": time.process_time() - c0,
            "results": [dict(parse_line(x["line"]), **x) for x in self.lines],
        }

    def write_config_dict(self, name: str, config: dict[str, Any]) -> str:
        target = self.workdir / "configs" / f"{name}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(config, indent=2))
        return name


def parse_line(line: str) -> dict[str, Any]:
    """VFLAIR's result line ``K|bs|...|main_task_acc|<metric>,2|1024|...`` as a dict: the
    attack, its main-task accuracy and metric(s) (GRN and ResSFL write rand_mse and mse)."""
    head, _, values = line.partition(",")
    names, vals = head.split("|"), values.split("|")
    out: dict[str, Any] = {"attack": vals[names.index("attack_name")]}
    i = names.index("main_task_acc")
    out["main_acc"] = float(vals[i])
    rest = [float(v) for v in vals[i + 1 :]]
    if len(rest) == 2 and names[-1] == "mse_reduction":
        out["rand_mse"], out["mse"] = rest
    elif len(rest) == 2:
        out["attack_acc"], out["attack_auc"] = rest
    else:
        out[names[-1]] = rest[0]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vflair", required=True, help="VFLAIR src/ directory")
    p.add_argument("--plan", required=True, help="JSON plan (benchmarks.vflair_cells)")
    p.add_argument("--out", required=True, help="JSON file written at the end")
    p.add_argument("--workdir", default="/work/vflair_side/run_cells")
    p.add_argument("--threads", type=int, default=1)
    opts = p.parse_args(argv)
    plan = json.loads(Path(opts.plan).read_text())
    with np.load(plan["rows_npz"]) as f:
        DIGITS.update({k: f[k] for k in f.files})
    import torch

    torch.set_num_threads(opts.threads)
    w0, c0 = time.time(), time.process_time()
    v = Cells(Path(opts.vflair).resolve(), Path(opts.workdir).resolve())
    setup = {"wall_s": time.time() - w0, "cpu_s": time.process_time() - c0}
    runs = []
    for entry in plan["runs"]:
        runs.append(v.run(entry))
        r = runs[-1]
        builtins.print(f"[cells] {r['name']}: {r['wall_s']:.1f} s wall", file=sys.stderr)
    out = {
        "vflair_commit": rv.VFLAIR_COMMIT,
        "torch": torch.__version__,
        "torch_threads": opts.threads,
        "stubbed_modules": sorted(set(v.finder.stubbed)),
        "import_and_setup": setup,
        "runs": rv._jsonable(runs),
        "wall_s": time.time() - w0,
        "cpu_s": time.process_time() - c0,
    }
    Path(opts.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
