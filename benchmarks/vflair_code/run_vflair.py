"""Run VFLAIR's OWN code (not a re-implementation) on vflsweep's MNIST rows, per seed.

What it runs (``--run``), each through VFLAIR's own pipeline functions in ``main_pipeline.py``:

* ``lrb``  - label-replacement backdoor ("ReplacementBackdoor"): ``evaluate_targeted_backdoor``
  -> ``MainTaskVFLwithBackdoor.train``; config ``mnist_test_attack_nodefense.json`` (30 epochs,
  lr 0.005, batch 1024, MLP2 392->10 bottoms, ClassificationModelHostHead top) but with the
  protocol switched to FedSGD (Q=1); the shipped file says FedBCD_p with Q=5.
* ``nsb``  - NoisySample (noise_lambda 2, noise_rate 0.01): ``evaluate_untargeted_backdoor``
  -> ``MainTaskVFLwithNoisySample.train``; same config and FedSGD switch.
* ``dcor`` - DistanceCorrelation defense (party [1]) at ``mnist_test_attack_dcor.json``
  (70 epochs, lr 0.01, FedSGD): ``evaluate_no_attack`` -> ``MainTaskVFL.train`` gives MP, then
  ``evaluate_label_inference`` runs BatchLabelReconstruction (lr 0.05, 10000 epochs).

VFLAIR commit: 964415766fff97a1ebeed2c3addd4fbaac29f8ef (github FLAIR-THU/VFLAIR HEAD,
"bug fixed: attack & defense").

Stubbed modules (inserted into ``sys.modules`` before VFLAIR is imported; every attribute is
an inert placeholder class). None is reached on the MNIST / MLP2 path, so none changes the
algorithm:

* ``tensorflow`` - only ``tf.compat.v1.enable_eager_execution()`` at import of the MainTask
  modules and TF code in MARVELL/LLM helpers that these runs never call.
* ``transformers``, ``peft``, ``datasets`` (Hugging Face) and VFLAIR's own
  ``models.llm_models`` package, ``utils.mmlu_utils`` (it downloads the GPT-2 BPE files from
  the internet at import time) and ``framework`` (the distributed LLM deployment, which needs
  a SQL database): all LLM-only, imported at module level by ``LoadModels``, ``LoadDataset``,
  ``config`` and the LLM party classes; the MNIST path builds ``MLP2`` /
  ``ClassificationModelHostHead`` from ``models/mlp.py`` and ``models/global_models.py``.
* ``torchvision`` - its CPU wheel does not load against the CPU torch here. The stub carries
  faithful ``transforms.ToTensor`` / ``Compose`` / ``Normalize`` (ToTensor = torchvision's
  ``to_tensor`` for a mode-"L" PIL image: uint8 HxW -> float32 1xHxW divided by 255; VFLAIR's
  MNIST ``transform_fn`` is ``Compose([ToTensor()])``, no Normalize, LoadDataset.py:56-58) and
  ``datasets.MNIST`` = ``RowsMNIST`` below, which serves OUR rows exactly like torchvision's
  MNIST ``__getitem__`` (PIL "L" image through the transform, int label). So VFLAIR's own
  ``LoadDataset`` code (``fetch_data_and_label``, ``generate_poison_data``/``data_poison``,
  ``noisy_sample``, ``dataset_partition``) builds every tensor from our rows.

Monkeypatches (at call boundaries; VFLAIR's files are not edited):

1. ``party.party.load_dataset_per_party_backdoor`` is wrapped so that, while it runs, the
   ``random`` module seen by ``LoadDataset`` returns the fixed target label (0) from
   ``randint`` (LoadDataset.py:921). The real ``random.randint`` is still called first, so
   VFLAIR's RNG stream (poison lists, target lists, model init) is exactly the one it would
   use; the label VFLAIR would have drawn is recorded as ``vflair_drawn_target``.
2. ``MainTaskVFLwithBackdoor.pred_transmit`` at HEAD raises ``UnboundLocalError`` on the
   first batch for every protocol except Quantization/Topk: since commit d141498
   (2023-11-12, "Compress") the passive branch sends ``pred_detach``, a name the method never
   binds (MainTaskVFLwithBackdoor.py:104,127). The method is re-compiled from VFLAIR's own
   source with that one token changed to ``pred_clone`` (the tensor holding the backdoor
   swap), which is what the code sent before d141498 (e.g. commit ea54ac9).
3. Observation only: the ``print`` name of the three MainTask modules is shadowed so the
   per-epoch line also records ``vfl.test_acc`` / ``vfl.backdoor_acc`` at full precision and,
   for ``lrb``, the backdoor accuracy on the poisoned test rows whose true label != target;
   ``train`` / ``evaluate_attack`` are wrapped to keep their return values.

Reproduce (from /work/main; the side venv has torch 2.13.0+cpu, numpy, pandas,
scikit-learn, matplotlib, pillow, tqdm, requests, loguru; see README.md):

    /work/vflair_side/venv/bin/python benchmarks/vflair_code/run_vflair.py \\
        --vflair /work/vflair_src/src --data-dir ../shared/datasets --run lrb \\
        --seeds 0 1 2 --out benchmarks/vflair_code/measured.json

(``--run nsb`` and ``--run dcor`` alike; ``dcor`` takes ``--dcor-lambdas`` and
``--bli-seeds``; ``lrb`` takes ``--batch-size N``, stored under ``lrb_batchN``.) This file is
a script: nothing imports it and nothing runs on import.
"""

from __future__ import annotations

import argparse
import builtins
import hashlib
import importlib.abc
import importlib.machinery
import inspect
import json
import os
import platform
import random
import sys
import textwrap
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
VFLAIR_COMMIT = "964415766fff97a1ebeed2c3addd4fbaac29f8ef"
TARGET_LABEL = 0
NODEFENSE_CONFIG = "passive_party_attack/multi_class/mnist_test_attack_nodefense"
DCOR_CONFIG = "passive_party_attack/multi_class/mnist_test_attack_dcor"
ATTACK_INDEX = {"lrb": 4, "nsb": 6, "bli": 0}  # positions in the configs' attack_list
# --defense NAME for --run lrb and nsb: (VFLAIR's MNIST config with that defense, its strength key)
DEFENSE_CONFIGS = {
    "gdp": ("passive_party_attack/multi_class/mnist_test_attack_dp", "dp_strength"),
    "ldp": ("passive_party_attack/multi_class/mnist_test_attack_ldp", "dp_strength"),
    "gs": ("passive_party_attack/multi_class/mnist_test_attack_gs", "gradient_sparse_rate"),
    "dcor": ("passive_party_attack/multi_class/mnist_test_attack_dcor", "lambda"),
    "mid": ("passive_party_attack/multi_class/mnist_test_attack_mid", "lambda"),
    "gper": ("passive_party_attack/multi_class/mnist_test_attack_gp", "perturb_epsilon"),
}
STUB_PREFIXES = (
    "tensorflow",
    "transformers",
    "peft",
    "datasets",
    "models.llm_models",
    "utils.mmlu_utils",
    "framework",
)

# --------------------------------------------------------------------------- stubs


class _StubMeta(type):
    """Metaclass of placeholder classes: any class attribute is another placeholder."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _new_stub(name)

    def __iter__(cls) -> Any:
        return iter(())


class _Stub(metaclass=_StubMeta):
    """Inert placeholder: constructible, callable (a decorator returns its argument)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _Stub()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub()

    def __iter__(self) -> Any:
        return iter(())


def _new_stub(name: str) -> type:
    return _StubMeta(name, (_Stub,), {})


class StubModule(types.ModuleType):
    """A module whose every public attribute is a placeholder class (cached per name)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _new_stub(name)
        setattr(self, name, value)
        return value


class StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a StubModule for every import of a name under one of ``prefixes``."""

    def __init__(self, prefixes: Sequence[str]) -> None:
        self.prefixes = tuple(prefixes)
        self.stubbed: list[str] = []

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if any(fullname == p or fullname.startswith(p + ".") for p in self.prefixes):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = StubModule(spec.name)
        module.__path__ = []
        self.stubbed.append(spec.name)
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


# ----------------------------------------------------------------- torchvision stand-in


class ToTensor:
    """torchvision.transforms.ToTensor for PIL images (torchvision ``F.to_tensor``)."""

    def __call__(self, pic: Any) -> Any:
        import torch

        if isinstance(pic, np.ndarray):
            arr = pic[:, :, None] if pic.ndim == 2 else pic
            img = torch.from_numpy(arr.transpose((2, 0, 1))).contiguous()
            return img.to(dtype=torch.get_default_dtype()).div(255)
        mode_to_dtype = {"I": np.int32, "I;16": np.int16, "F": np.float32}
        img = torch.from_numpy(np.array(pic, mode_to_dtype.get(pic.mode, np.uint8), copy=True))
        img = img.view(pic.size[1], pic.size[0], len(pic.getbands()))
        img = img.permute((2, 0, 1)).contiguous()
        if isinstance(img, torch.ByteTensor):
            return img.to(dtype=torch.get_default_dtype()).div(255)
        return img


class Compose:
    """torchvision.transforms.Compose."""

    def __init__(self, transforms: Sequence[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, img: Any) -> Any:
        for t in self.transforms:
            img = t(img)
        return img


class Normalize:
    """torchvision.transforms.Normalize (built at import by LoadDataset, unused for MNIST)."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        self.mean, self.std = list(mean), list(std)

    def __call__(self, tensor: Any) -> Any:
        import torch

        mean = torch.as_tensor(self.mean, dtype=tensor.dtype).view(-1, 1, 1)
        std = torch.as_tensor(self.std, dtype=tensor.dtype).view(-1, 1, 1)
        return (tensor - mean) / std


ROWS: dict[str, np.ndarray] = {}


class RowsMNIST:
    """Stand-in for ``torchvision.datasets.MNIST`` serving our rows (uint8 N x 28 x 28).

    ``__getitem__`` mirrors torchvision's MNIST: ``Image.fromarray(img, mode "L")``, then the
    transform, label as int. ``root`` and ``download`` are ignored (nothing is read or fetched).
    A subclass serves other rows (``rows``) as PIL images of another ``mode``.
    """

    rows: ClassVar[dict[str, np.ndarray]] = ROWS
    mode: ClassVar[str] = "L"

    def __init__(
        self,
        root: str,
        train: bool = True,
        transform: Callable[[Any], Any] | None = None,
        target_transform: Callable[[Any], Any] | None = None,
        download: bool = False,
    ) -> None:
        part = "train" if train else "test"
        self.data = self.rows[f"X_{part}"]
        self.targets = self.rows[f"y_{part}"]
        self.transform = transform
        self.target_transform = target_transform

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from PIL import Image

        row = self.data[index]
        img: Any = Image.fromarray(row) if self.mode == "L" else Image.fromarray(row, self.mode)
        assert img.mode == self.mode
        target: Any = int(self.targets[index])
        if self.transform is not None:
            img = self.transform(img)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return img, target


def install_stubs() -> StubFinder:
    """Insert the stub finder and a torchvision stand-in; must run before VFLAIR imports."""
    finder = StubFinder(STUB_PREFIXES)
    sys.meta_path.insert(0, finder)
    tv = StubModule("torchvision")
    tv.__path__ = []
    for sub in ("transforms", "datasets", "models"):
        mod = StubModule(f"torchvision.{sub}")
        mod.__path__ = []
        setattr(tv, sub, mod)
        sys.modules[f"torchvision.{sub}"] = mod
    sys.modules["torchvision"] = tv
    tv.transforms.ToTensor = ToTensor
    tv.transforms.Compose = Compose
    tv.transforms.Normalize = Normalize
    tv.datasets.MNIST = RowsMNIST
    finder.stubbed.extend(["torchvision", "torchvision.transforms", "torchvision.datasets"])
    finder.stubbed.append("torchvision.models")
    return finder


# ---------------------------------------------------------------------------- our rows


def load_rows(data_dir: str, export: Path) -> dict[str, Any]:
    """Our MNIST rows as uint8 images (the raw 0..255 pixels), exported to ``export``."""
    sys.path.insert(0, str(REPO_ROOT))
    from trainables.data import load_dataset

    ds = load_dataset("mnist", data_dir)
    out: dict[str, np.ndarray] = {}
    for part in ("train", "test"):
        X = np.asarray(getattr(ds, f"X_{part}"))
        if not (np.all(X == np.round(X)) and X.min() >= 0 and X.max() <= 255):
            raise ValueError("expected integer pixels 0..255")
        out[f"X_{part}"] = X.reshape(-1, 28, 28).astype(np.uint8)
        out[f"y_{part}"] = np.asarray(getattr(ds, f"y_{part}")).astype(np.int64)
    ROWS.update(out)
    export.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(export, **out)
    digest = hashlib.sha256()
    for key in sorted(out):
        digest.update(key.encode())
        digest.update(np.ascontiguousarray(out[key]).tobytes())
    return {
        "npz": str(export),
        "arrays_sha256": digest.hexdigest(),
        "shapes": {k: list(v.shape) for k, v in out.items()},
        "note": "X_* uint8 raw pixels; VFLAIR sees X/255 as float32 (ToTensor), no Normalize; "
        "party 0 (passive, attacker) gets image rows 0-13, party 1 (active) rows 14-27",
    }


# --------------------------------------------------------------------------- VFLAIR glue


class _FixedRandint:
    """``random`` as LoadDataset sees it, but randint returns the fixed target label."""

    def __init__(self, target: int, drawn: list[int]) -> None:
        self.target = target
        self.drawn = drawn

    def __getattr__(self, name: str) -> Any:
        return getattr(random, name)

    def randint(self, a: int, b: int) -> int:
        self.drawn.append(random.randint(a, b))  # keep VFLAIR's RNG stream unchanged
        return self.target


class Vflair:
    """VFLAIR imported from ``src`` with the stubs and patches; records per-epoch values."""

    def __init__(self, src: Path, workdir: Path) -> None:
        self.finder = install_stubs()
        sys.path.insert(0, str(src))
        workdir.mkdir(parents=True, exist_ok=True)
        os.chdir(workdir)  # VFLAIR reads ./configs/*.json and writes ./exp_result/ here
        self.src = src
        self.workdir = workdir
        import main_pipeline as mp

        self.mp = mp
        self.mod_backdoor = sys.modules["evaluates.MainTaskVFLwithBackdoor"]
        self.mod_noisy = sys.modules["evaluates.MainTaskVFLwithNoisySample"]
        self.mod_vfl = sys.modules["evaluates.MainTaskVFL"]
        self.load_dataset_mod = sys.modules["load.LoadDataset"]
        self.party_mod = sys.modules["party.party"]
        self.drawn_targets: list[int] = []
        self.current: Any = None
        self.epochs: list[dict[str, Any]] = []
        self.returns: dict[str, Any] = {}
        self._patch()

    # -- patches
    def _patch(self) -> None:
        orig_loader = self.party_mod.load_dataset_per_party_backdoor
        ld = self.load_dataset_mod

        def backdoor_loader(args: Any, index: int) -> Any:
            if args.target_label is None:
                ld.random = _FixedRandint(TARGET_LABEL, self.drawn_targets)
                try:
                    return orig_loader(args, index)
                finally:
                    ld.random = random
            return orig_loader(args, index)

        self.party_mod.load_dataset_per_party_backdoor = backdoor_loader

        cls = self.mod_backdoor.MainTaskVFLwithBackdoor
        source = textwrap.dedent(inspect.getsource(cls.pred_transmit))
        bad = "pred_clone = torch.autograd.Variable(pred_detach, requires_grad=True)"
        if source.count(bad) != 1:
            raise RuntimeError("pred_transmit is not the HEAD version this patch expects")
        source = source.replace(bad, bad.replace("pred_detach", "pred_clone"))
        namespace: dict[str, Any] = {}
        exec(compile(source, inspect.getsourcefile(cls) or "<pred_transmit>", "exec"),
             self.mod_backdoor.__dict__, namespace)  # fmt: skip
        cls.pred_transmit = namespace["pred_transmit"]

        for mod, cls_name in (
            (self.mod_backdoor, "MainTaskVFLwithBackdoor"),
            (self.mod_noisy, "MainTaskVFLwithNoisySample"),
            (self.mod_vfl, "MainTaskVFL"),
        ):
            klass = getattr(mod, cls_name)
            klass.train = self._wrap_train(klass.train, cls_name)
            mod.print = self._print_hook
        self.mod_vfl.MainTaskVFL.evaluate_attack = self._wrap_attack(
            self.mod_vfl.MainTaskVFL.evaluate_attack
        )

    def _wrap_train(self, orig: Callable[..., Any], name: str) -> Callable[..., Any]:
        def train(vfl: Any) -> Any:
            self.current = vfl
            t0 = time.time()
            result = orig(vfl)
            self.returns[f"{name}.train"] = {"value": result, "wall_s": time.time() - t0}
            return result

        return train

    def _wrap_attack(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        def evaluate_attack(vfl: Any) -> Any:
            t0 = time.time()
            result = orig(vfl)
            self.returns[f"{vfl.args.attack_name}.evaluate_attack"] = {
                "value": result,
                "wall_s": time.time() - t0,
            }
            return result

        return evaluate_attack

    def _print_hook(self, *args: Any, **kwargs: Any) -> None:
        builtins.print(*args, **kwargs)
        if args and isinstance(args[0], str) and args[0].startswith("Epoch "):
            vfl = self.current
            row: dict[str, Any] = {
                "epoch": len(self.epochs),
                "train_loss": float(vfl.loss),
                "train_acc_last_batch": float(vfl.train_acc),
                "test_acc": float(vfl.test_acc),
            }
            if hasattr(vfl, "backdoor_acc") and isinstance(vfl, self._backdoor_classes()):
                row["vflair_backdoor_acc"] = float(vfl.backdoor_acc)
                row.update(self._poison_row_scores(vfl))
            self.epochs.append(row)

    def _backdoor_classes(self) -> tuple[type, ...]:
        return (
            self.mod_backdoor.MainTaskVFLwithBackdoor,
            self.mod_noisy.MainTaskVFLwithNoisySample,
        )

    def _poison_row_scores(self, vfl: Any) -> dict[str, Any]:
        """Re-score the poisoned test rows as VFLAIR does (sanity), plus extra cuts."""
        import torch
        import torch.nn.functional as F

        k = vfl.k
        active = vfl.parties[k - 1]
        true = torch.argmax(active.test_poison_label, dim=-1)
        with torch.no_grad():
            preds = [
                vfl.parties[ik].local_model(vfl.parties[ik].test_poison_data) for ik in range(k)
            ]
            pred = torch.argmax(F.softmax(active.global_model(preds), dim=-1), dim=-1)
        n = int(true.numel())
        out: dict[str, Any] = {"poison_rows_pred_true_label_acc": int((pred == true).sum()) / n}
        if isinstance(vfl, self.mod_backdoor.MainTaskVFLwithBackdoor):
            target = int(vfl.args.target_label)
            hit = pred == target
            keep = true != target
            out["recomputed_backdoor_acc_all_rows"] = int(hit.sum()) / n
            out["backdoor_acc_nontarget_rows"] = int(hit[keep].sum()) / int(keep.sum())
            out["n_poison_test_rows"] = n
            out["n_poison_test_rows_nontarget"] = int(keep.sum())
        else:  # NoisySample: how the same rows score without the noise (party 0 clean)
            idx = list(vfl.args.test_poison_list)
            clean0 = torch.tensor(ROWS["X_test"][idx][:, None, :14, :], dtype=torch.float32) / 255
            with torch.no_grad():
                clean = [vfl.parties[0].local_model(clean0)] + [
                    vfl.parties[ik].local_model(vfl.parties[ik].test_poison_data)
                    for ik in range(1, k)
                ]
                cpred = torch.argmax(F.softmax(active.global_model(clean), dim=-1), dim=-1)
            out["same_rows_without_noise_acc"] = int((cpred == true).sum()) / n
        return out

    # -- configs
    def write_config(self, name: str, base: str, **changes: Any) -> str:
        with open(self.src / "configs" / f"{base}.json") as fh:
            cfg = json.load(fh)
        for path, value in changes.items():
            node = cfg
            keys = path.split("__")
            for key in keys[:-1]:
                node = node[key]
            node[keys[-1]] = value
        target = self.workdir / "configs" / f"{name}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(cfg, indent=2))
        return name

    def basic_args(self, config: str, seed: int) -> Any:
        """main_pipeline.py ``__main__`` lines 338-399 (seeding, configs, result paths)."""
        mp = self.mp
        args = argparse.Namespace(device="cpu", gpu=0, seed=seed, configs=config, save_model=False)
        args.current_seed = seed
        mp.set_seed(seed)
        args = mp.load_basic_configs(args.configs, args)
        args.need_auxiliary = 0
        args.dataset = args.dataset_split["dataset_name"]
        mode = args.apply_trainable_layer
        args.exp_res_dir = f"exp_result/{args.dataset}/Q{args.Q}/{mode}/"
        os.makedirs(args.exp_res_dir, exist_ok=True)
        filename = (
            f"{args.defense_name}_{args.defense_param},model={args.model_list['0']['type']}.txt"
        )
        args.exp_res_path = args.exp_res_dir + filename
        args.basic_vfl_withaux = None
        args.main_acc_noattack_withaux = None
        args.basic_vfl = None
        args.main_acc_noattack = None
        return args

    def reset(self) -> None:
        self.epochs = []
        self.returns = {}
        self.current = None
        self.drawn_targets = []


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _poison_lists(args: Any) -> dict[str, Any]:
    out = {}
    for key in ("train_poison_list", "test_poison_list", "train_target_list", "test_target_list"):
        value = getattr(args, key, None)
        if value is not None:
            out[key] = sorted(int(i) for i in value)
    return out


# --------------------------------------------------------------------------------- runs


def fedsgd_changes(epochs: int | None) -> dict[str, Any]:
    """Config changes for the no-defense runs: FedSGD (the file ships FedBCD_p, Q=5), and
    ``epochs`` when given."""
    changes: dict[str, Any] = {
        "communication": {"communication_protocol": "FedSGD", "iteration_per_aggregation": 1}
    }
    if epochs is not None:
        changes["epochs"] = epochs
    return changes


@dataclass(frozen=True)
class Overrides:
    """What a run changes in VFLAIR's config: None keeps the config's value; ``defense``
    (name, strength: ``DEFENSE_CONFIGS``) runs on VFLAIR's MNIST config of that defense."""

    epochs: int | None = None
    batch_size: int | None = None
    lr: float | None = None
    defense: tuple[str, float] | None = None


def overridden(stem: str, how: Overrides) -> tuple[str, str, dict[str, Any]]:
    """(config name, base config, changes): the no-defense config or ``how.defense``'s,
    FedSGD, with ``how``'s epochs, batch size and lr where given."""
    changes = fedsgd_changes(how.epochs)
    name, base = f"vflsweep_{stem}_fedsgd", NODEFENSE_CONFIG
    if how.batch_size is not None:
        # config "batch_size"; LoadConfigs.py:60-61 makes test_batch_size follow it
        changes["batch_size"] = how.batch_size
        name += f"_batch{how.batch_size}"
    if how.lr is not None:
        changes["lr"] = how.lr
        name += f"_lr{how.lr:g}"
    if how.defense is not None:
        base, key = DEFENSE_CONFIGS[how.defense[0]]
        changes[f"defense__parameters__{key}"] = how.defense[1]
        name += f"_{how.defense[0]}{how.defense[1]:g}"
    return name, base, changes


def run_lrb(v: Vflair, seed: int, how: Overrides) -> dict[str, Any]:
    """LRB on VFLAIR's config as ``how`` changes it (``overridden``)."""
    name, base, changes = overridden("lrb", how)
    config = v.write_config(name, base, **changes)
    v.reset()
    args = v.basic_args(config, seed)
    args.targeted_backdoor_list = ["ReplacementBackdoor"]
    args.targeted_backdoor_index = [ATTACK_INDEX["lrb"]]
    t0 = time.time()
    v.mp.evaluate_targeted_backdoor(args)  # main_pipeline.py:268-323
    wall = time.time() - t0
    mean_test, mean_backdoor = v.returns["MainTaskVFLwithBackdoor.train"]["value"]
    vfl = v.current
    clean_top = torch_rows("X_test")
    return {
        "seed": seed,
        "wall_s": wall,
        "target_label": int(args.target_label),
        "vflair_drawn_target": v.drawn_targets[0] if v.drawn_targets else None,
        "protocol": args.communication_protocol,
        "Q": args.Q,
        "epochs": args.main_epochs,
        "lr": args.main_lr,
        "batch_size": args.batch_size,
        "defense": getattr(args, "defense_name", None),
        "defense_param": getattr(args, "defense_param", None),
        "vflair_reported_main_acc_mean_over_epochs": mean_test,
        "vflair_reported_backdoor_acc_mean_over_epochs": mean_backdoor,
        "final_test_acc": v.epochs[-1]["test_acc"],
        "final_backdoor_acc": v.epochs[-1]["vflair_backdoor_acc"],
        "final_backdoor_acc_nontarget": v.epochs[-1]["backdoor_acc_nontarget_rows"],
        "mean_backdoor_acc_nontarget": float(
            np.mean([e["backdoor_acc_nontarget_rows"] for e in v.epochs])
        ),
        "n_train_rows_party0": len(vfl.parties[0].train_data),
        "test_rows_party0_equal_clean_rows": bool(
            np.array_equal(vfl.parties[0].test_data.numpy(), clean_top)
        ),
        "per_epoch": v.epochs,
        **_poison_lists(args),
    }


def run_nsb(v: Vflair, seed: int, how: Overrides) -> dict[str, Any]:
    """NSB on VFLAIR's config as ``how`` changes it (``overridden``)."""
    name, base, changes = overridden("nsb", how)
    config = v.write_config(name, base, **changes)
    v.reset()
    args = v.basic_args(config, seed)
    args.untargeted_backdoor_list = ["NoisySample"]
    args.untargeted_backdoor_index = [ATTACK_INDEX["nsb"]]
    t0 = time.time()
    v.mp.evaluate_untargeted_backdoor(args)  # main_pipeline.py:239-266
    wall = time.time() - t0
    main_acc, noise_acc = v.returns["MainTaskVFLwithNoisySample.train"]["value"]
    vfl = v.current
    clean_top = torch_rows("X_test")
    test0 = vfl.parties[0].test_data.numpy()
    idx = list(args.test_poison_list)
    others = np.setdiff1d(np.arange(len(test0)), idx)
    return {
        "seed": seed,
        "wall_s": wall,
        "protocol": args.communication_protocol,
        "Q": args.Q,
        "epochs": args.main_epochs,
        "lr": args.main_lr,
        "batch_size": args.batch_size,
        "defense": getattr(args, "defense_name", None),
        "defense_param": getattr(args, "defense_param", None),
        "noise_lambda": args.attack_configs["noise_lambda"],
        "noise_rate": args.attack_configs["noise_rate"],
        "vflair_reported_main_acc_mean_over_epochs": main_acc,
        "vflair_noisy_sample_acc_mean_over_epochs": noise_acc,
        "vflair_reported_attack_metric_acc_loss": main_acc - noise_acc,
        "final_test_acc": v.epochs[-1]["test_acc"],
        "final_noisy_sample_acc": v.epochs[-1]["vflair_backdoor_acc"],
        "final_same_rows_without_noise_acc": v.epochs[-1]["same_rows_without_noise_acc"],
        "n_train_rows_party0": len(vfl.parties[0].train_data),
        "test_rows_party0_noisy_in_place": bool(
            not np.array_equal(test0[idx], clean_top[idx])
            and np.array_equal(test0[others], clean_top[others])
        ),
        "per_epoch": v.epochs,
        **_poison_lists(args),
    }


def run_dcor(
    v: Vflair, seed: int, lam: float, epochs: int | None, with_bli: bool
) -> dict[str, Any]:
    changes: dict[str, Any] = {"defense__parameters__lambda": lam}
    if epochs is not None:
        changes["epochs"] = epochs
    config = v.write_config(f"vflsweep_dcor_{lam:g}", DCOR_CONFIG, **changes)
    v.reset()
    mp = v.mp
    args = v.basic_args(config, seed)
    args = mp.load_attack_configs(args.configs, args, -1)  # main_pipeline.py:401-402
    args = mp.load_parties(args)
    t0 = time.time()
    args.basic_vfl, args.main_acc_noattack = mp.evaluate_no_attack(args)  # :407, :44-65
    train_wall = time.time() - t0
    per_epoch = v.epochs
    out: dict[str, Any] = {
        "seed": seed,
        "lambda": lam,
        "defense_party": args.defense_configs["party"],
        "protocol": args.communication_protocol,
        "Q": args.Q,
        "epochs": args.main_epochs,
        "lr": args.main_lr,
        "batch_size": args.batch_size,
        "train_wall_s": train_wall,
        "vflair_reported_main_acc_final_epoch": args.main_acc_noattack,
        "final_test_acc": per_epoch[-1]["test_acc"],
        "per_epoch": per_epoch,
    }
    if with_bli:
        args.label_inference_list = ["BatchLabelReconstruction"]
        args.label_inference_index = [ATTACK_INDEX["bli"]]
        t1 = time.time()
        mp.evaluate_label_inference(args)  # main_pipeline.py:109-207, :409-410
        out["bli_wall_s"] = time.time() - t1
        bli = v.returns["BatchLabelReconstruction.evaluate_attack"]
        out["bli_recovery_rate"] = bli["value"]
        out["bli_attack_wall_s"] = bli["wall_s"]
        out["bli_attack_configs"] = args.attack_configs
        out["bli_batch_rows"] = int(args.basic_vfl.first_epoch_state["label"].shape[0])
    return out


def torch_rows(key: str) -> np.ndarray:
    """Party 0's half (rows 0-13) of our rows as VFLAIR's ToTensor makes them."""
    import torch

    x = torch.from_numpy(ROWS[key][:, None, :14, :].copy()).to(torch.float32).div(255)
    return x.numpy()


def summarize(runs: list[dict[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    out = {}
    for key in keys:
        vals = [float(r[key]) for r in runs if r.get(key) is not None]
        if vals:
            out[key] = {
                "mean": float(np.mean(vals)),
                "std_ddof1": float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0,
                "values": vals,
            }
    return out


# --------------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--vflair", required=True, help="VFLAIR src/ directory")
    p.add_argument("--data-dir", default=None, help="vflsweep data dir (holds mnist/)")
    p.add_argument("--run", required=True, choices=("lrb", "nsb", "dcor"))
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", required=True, help="JSON file; the run's entry is merged in")
    p.add_argument("--epochs", type=int, default=None, help="override (timing only)")
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="lrb, nsb: override the config's batch_size (default: the config's, 1024); "
        "the entry is then keyed e.g. lrb_batch128",
    )
    p.add_argument("--lr", type=float, default=None, help="lrb, nsb: override the config's lr")
    p.add_argument(
        "--defense",
        nargs=2,
        metavar=("NAME", "STRENGTH"),
        default=None,
        help=f"lrb, nsb: run under a defense, one of {sorted(DEFENSE_CONFIGS)}, on VFLAIR's "
        "MNIST config of it (FedSGD); the entry is keyed e.g. lrb_gdp0.0001",
    )
    p.add_argument("--dcor-lambdas", type=float, nargs="+", default=[0.3, 0.0001])
    p.add_argument("--bli-seeds", type=int, nargs="*", default=None, help="default: all")
    p.add_argument("--rows-npz", default="/work/vflair_side/mnist_rows.npz")
    p.add_argument("--workdir", default="/work/vflair_side/run")
    p.add_argument("--threads", type=int, default=1)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    if opts.run == "dcor" and (opts.batch_size, opts.lr, opts.defense) != (None, None, None):
        raise SystemExit("--batch-size, --lr and --defense are wired for --run lrb and nsb")
    defense = None
    if opts.defense is not None:
        if opts.defense[0] not in DEFENSE_CONFIGS:
            raise SystemExit(f"--defense {opts.defense[0]!r}: one of {sorted(DEFENSE_CONFIGS)}")
        defense = (opts.defense[0], float(opts.defense[1]))
    how = Overrides(opts.epochs, opts.batch_size, opts.lr, defense)
    out_path = Path(opts.out).resolve()
    rows_info = load_rows(opts.data_dir, Path(opts.rows_npz))
    import torch

    torch.set_num_threads(opts.threads)
    v = Vflair(Path(opts.vflair).resolve(), Path(opts.workdir).resolve())
    command = " ".join([sys.executable, *sys.argv])
    entry: dict[str, Any] = {"command": command, "cwd_at_start": os.environ.get("PWD", "")}
    if opts.run == "lrb":
        runs = [run_lrb(v, s, how) for s in opts.seeds]
        entry["seeds"] = runs
        entry["summary"] = summarize(
            runs,
            [
                "vflair_reported_main_acc_mean_over_epochs",
                "vflair_reported_backdoor_acc_mean_over_epochs",
                "mean_backdoor_acc_nontarget",
                "final_test_acc",
                "final_backdoor_acc",
                "final_backdoor_acc_nontarget",
                "wall_s",
            ],
        )
        key = "lrb"
    elif opts.run == "nsb":
        runs = [run_nsb(v, s, how) for s in opts.seeds]
        entry["seeds"] = runs
        entry["summary"] = summarize(
            runs,
            [
                "vflair_reported_main_acc_mean_over_epochs",
                "vflair_noisy_sample_acc_mean_over_epochs",
                "vflair_reported_attack_metric_acc_loss",
                "final_test_acc",
                "final_noisy_sample_acc",
                "final_same_rows_without_noise_acc",
                "wall_s",
            ],
        )
        key = "nsb"
    else:
        bli_seeds = opts.seeds if opts.bli_seeds is None else opts.bli_seeds
        entry["by_lambda"] = {}
        for lam in opts.dcor_lambdas:
            runs = [run_dcor(v, s, lam, opts.epochs, s in bli_seeds) for s in opts.seeds]
            entry["by_lambda"][f"{lam:g}"] = {
                "seeds": runs,
                "summary": summarize(
                    runs,
                    [
                        "vflair_reported_main_acc_final_epoch",
                        "bli_recovery_rate",
                        "train_wall_s",
                        "bli_attack_wall_s",
                    ],
                ),
            }
        key = "dcor"
    if defense is not None:
        key += f"_{defense[0]}{defense[1]:g}"
    if opts.batch_size is not None:
        key += f"_batch{opts.batch_size}"
    if opts.lr is not None:
        key += f"_lr{opts.lr:g}"
    if opts.epochs is not None:
        key += f"_epochs{opts.epochs}"
    result: dict[str, Any] = {}
    if out_path.is_file():
        result = json.loads(out_path.read_text())
    result.setdefault("meta", {}).update(
        {
            "vflair_commit": VFLAIR_COMMIT,
            "vflair_src": str(Path(opts.vflair).resolve()),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torch_threads": opts.threads,
            "stubbed_modules": sorted(set(v.finder.stubbed)),
            "rows": rows_info,
            "target_label_fixed": TARGET_LABEL,
        }
    )
    result[key] = _jsonable(entry)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=1) + "\n")
    builtins.print(f"wrote {out_path} [{key}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
