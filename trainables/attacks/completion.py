"""Model completion (Fu et al., USENIX Security 2022), shared by PMC, AMC and MC.

The attacker puts a new, randomly initialized head on its trained bottom model (features
-> C outputs) and trains this "completion model" on the few labeled rows it knows; the
completed model then labels rows from the attacker's own features alone.

Choices (measured on digits, 2-party aggVFL FedSGD, seeds 0-19):
- ``method="mixmatch"`` (default): Fu et al.'s MixMatch as in their reference code: guess
  the labels of a batch of the attacker's unlabeled training rows with the model itself,
  sharpen by T, MixUp labeled and unlabeled rows with lambda ~ Beta(alpha, alpha) kept
  >= 0.5, loss = CE(mixed labeled) + lambda_u * ramp * MSE(mixed unlabeled); EMA weights
  predict. One Gaussian-jittered view per row (K=1, as their code), no label averaging.
  ``method="supervised"``: cross-entropy on the jittered labeled rows only (~0.02 lower).
- ``bottom_lr_scale=0`` (default): the bottom stays frozen and only the head learns, so
  the completion measures what VFL training put into the bottom (fine-tuning it on 40
  labels, as Fu et al. do, left AMC's edge over PMC smaller, on 7/10 seeds only).
- ``head="linear"`` (VFLAIR: "a randomly initialized linear layer"); ``"bn_relu"`` is Fu
  et al.'s BottomModelPlus (BatchNorm, ReLU, Linear).
- An "epoch" is ``steps_per_epoch`` batches drawn with replacement: 1024, VFLAIR's
  ``val_iteration`` (and Fu et al.'s). Preset ``fast`` (``FAST``): 80, 13x less compute,
  0.01-0.06 lower AP (digits, seeds 0-2: PMC median 0.700 vs 0.714; benchmarks.attacks).
- Convergence stop (``stop_patience``; off by default, as the papers train every epoch):
  after each epoch the EMA model labels the attacker's unlabeled rows, and training ends
  once at most ``stop_tol`` of those labels changed for ``stop_patience`` epochs in a row
  (they keep changing ~1-3% per epoch from EMA jitter). Preset ``converge`` (patience 2)
  stops after ~4-7 of 25 epochs; digits, seeds 0-2 (``benchmarks.attack_speed
  --compare``), AP default vs converge: PMC 0.725±0.029 vs 0.720±0.025, MC 0.755±0.015
  vs 0.748±0.032, AMC 0.730±0.031 vs 0.712±0.023; under CAE 0.5, PMC 0.767±0.036 vs
  0.773±0.021 at 0.37 instead of 1.97 CPU seconds (fast path; the generic loop: 20.0).
The algorithm is ``_train_autograd``. Speed: at the defaults (linear head, frozen bottom,
MixMatch) ``completion_fast.py`` runs the same steps without autograd (same random
draws, same formulas; the weights agree to float rounding), ~10x fewer CPU seconds, K
completions of one shape as one (``complete_models``); any other head, a trained bottom
or ``method="supervised"`` take the generic loop, which gathers its tensors once (EMA
over foreach ops, Adam foreach, modes set once).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from trainables.attacks import completion_fast
from trainables.attacks.completion_fast import Convergence
from trainables.errors import ConfigError

# VFLAIR's settings for MNIST/CIFAR (25 epochs, lr 2e-3, batch 16, val_iteration 1024) and
# Fu et al.'s MixMatch (T, alpha, lambda_u); noise, EMA decay (theirs: 0.999), the rest ours.
COMPLETION_DEFAULTS: dict[str, object] = {
    "epochs": 25,
    "lr": 2e-3,
    "batch_size": 16,
    "steps_per_epoch": 1024,
    "method": "mixmatch",
    "head": "linear",
    "bottom_lr_scale": 0.0,
    "noise": 0.05,
    "T": 0.8,
    "alpha": 0.75,
    "lambda_u": 50.0,
    "ema_decay": 0.99,
    "stop_patience": 0,  # 0: every epoch (the papers'); k: stop after k quiet epochs
    "stop_tol": 0.04,  # a quiet epoch changed at most this share of the unlabeled labels
}
FAST: dict[str, object] = {"steps_per_epoch": 80}  # preset ``fast`` of PMC, AMC and MC
CONVERGE: dict[str, object] = {"stop_patience": 2}  # preset ``converge``: convergence stop
METHODS = ("supervised", "mixmatch")
HEADS = ("linear", "bn_relu", "mlp")


def check_params(p: dict[str, Any]) -> dict[str, Any]:
    """``p`` if its method and head are known; a ConfigError naming the allowed ones."""
    if p.get("method", "mixmatch") not in METHODS or p.get("head", "linear") not in HEADS:
        raise ConfigError(
            f"model completion: method={p.get('method')!r} (allowed: {', '.join(METHODS)}), "
            f"head={p.get('head')!r} (allowed: {', '.join(HEADS)})"
        )
    return p


class CompletionModel(nn.Module):
    """The attacker's bottom (N, d) -> (N, width) plus a new head -> (N, n_classes)."""

    steps: int = 0  # the updates its training ran (fewer than asked if it converged)

    def __init__(self, bottom: nn.Module, width: int, n_classes: int, head: str) -> None:
        super().__init__()
        self.bottom = bottom
        if head == "linear":
            layers: list[nn.Module] = [nn.Linear(width, n_classes)]
        elif head == "bn_relu":
            layers = [nn.BatchNorm1d(width), nn.ReLU(), nn.Linear(width, n_classes)]
        else:  # "mlp"
            layers = [
                nn.BatchNorm1d(width),
                nn.Linear(width, 64),
                nn.ReLU(),
                nn.Linear(64, n_classes),
            ]
        self.head = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.bottom(x))


def complete_model(
    bottom: nn.Module,
    X_labeled: np.ndarray,
    y_labeled: np.ndarray,
    X_unlabeled: np.ndarray,
    n_classes: int,
    params: dict[str, Any],
    seed: int,
) -> nn.Module:
    """The trained completion model (eval mode); ``bottom`` itself is not changed."""
    job = (bottom, X_labeled, y_labeled, X_unlabeled, seed)
    return complete_models([job], n_classes, params)[0]


# one completion's inputs: bottom, X_labeled, y_labeled, X_unlabeled, seed
Completion = tuple[nn.Module, np.ndarray, np.ndarray, np.ndarray, int]


def complete_models(
    jobs: list[Completion], n_classes: int, params: dict[str, Any]
) -> list[nn.Module]:
    """The trained completion model of each job (eval mode). Where the fast path computes
    the generic loop's steps (``completion_fast.applies``: the defaults) and the jobs
    share one shape, their heads train as one (``completion_fast.train_fast``: K = 1 is a
    lone completion; a converged head is frozen while the rest go on), each on its own
    draws, so each model is the one it would be alone. Otherwise each runs the generic
    loop (``_train_autograd``). Both start from the same head (same global draws) and
    the same generators."""
    p = check_params({**COMPLETION_DEFAULTS, **params})
    shapes: dict[tuple[tuple[int, ...], tuple[int, ...]], list[int]] = {}  # (d_l, d_u) -> jobs
    for i, (_, xl, _, xu, _) in enumerate(jobs):
        shapes.setdefault((np.shape(xl)[1:], np.shape(xu)[1:]), []).append(i)
    if len(shapes) > 1:  # one stack per shape
        out: dict[int, nn.Module] = {}
        for same in shapes.values():
            got = complete_models([jobs[i] for i in same], n_classes, params)
            out.update(zip(same, got, strict=True))
        return [out[i] for i in range(len(jobs))]
    fast = all(completion_fast.applies(p, len(xu)) for *_, xu, _ in jobs)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is faster, and fair on a shared CPU
    try:
        models, datas, gens, rngs, done = [], [], [], [], []
        for bottom, X_labeled, y_labeled, X_unlabeled, seed in jobs:
            gen, rng = torch.Generator().manual_seed(seed), np.random.default_rng(seed)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)  # the head's draws (and any the generic loop makes)
                model, data = _model_and_data(
                    bottom, X_labeled, y_labeled, X_unlabeled, n_classes, p
                )
                if not fast:
                    done.append(_train_autograd(model, data, gen, rng, p))
            models.append(model)
            datas.append(data)
            gens.append(gen)
            rngs.append(rng)
        if not fast:
            return done
        emas, stops = [], []
        for model, (_, _, unlabeled) in zip(models, datas, strict=True):
            model.bottom.requires_grad_(False)
            emas.append(copy.deepcopy(model).requires_grad_(False))
            patience, tol = int(p["stop_patience"]), float(p["stop_tol"])
            stops.append(Convergence(emas[-1], unlabeled, patience, tol))
        steps = completion_fast.train_fast(models, datas, p, gens, rngs, stops)
        for ema, n in zip(emas, steps, strict=True):
            ema.steps = n
        return [ema.eval() for ema in emas]
    finally:
        torch.set_num_threads(threads)


def _model_and_data(
    bottom: nn.Module,
    X_labeled: np.ndarray,
    y_labeled: np.ndarray,
    X_unlabeled: np.ndarray,
    n_classes: int,
    p: dict[str, Any],
) -> tuple[CompletionModel, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The completion model (a copy of ``bottom``, a new head: global draws) and its data:
    xl (n_l, d), yl (n_l, C) one-hot, xu (n_u, d)."""
    xl = torch.as_tensor(X_labeled, dtype=torch.float32)  # (n_l, d)
    xu = torch.as_tensor(X_unlabeled, dtype=torch.float32)  # (n_u, d)
    yl = F.one_hot(torch.as_tensor(y_labeled, dtype=torch.int64), n_classes).float()  # (n_l, C)
    bottom = copy.deepcopy(bottom).eval()
    with torch.no_grad():
        width = int(bottom(xl[:1]).shape[1])
    return CompletionModel(bottom, width, n_classes, str(p["head"])), (xl, yl, xu)


def _train_autograd(
    model: CompletionModel,
    data: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    gen: torch.Generator,
    rng: np.random.Generator,
    p: dict[str, Any],
) -> nn.Module:
    """The generic loop (any head, a trainable bottom, supervised): autograd and
    torch.optim.Adam; ``data``: xl (n_l, d), yl (n_l, C) one-hot, xu (n_u, d)."""
    xl, yl, xu = data
    lr, bottom_lr = float(p["lr"]), float(p["lr"]) * float(p["bottom_lr_scale"])
    groups = [{"params": list(model.head.parameters()), "lr": lr}]
    if bottom_lr > 0:
        groups.append({"params": list(model.bottom.parameters()), "lr": bottom_lr})
    else:
        model.bottom.requires_grad_(False)
    opt = torch.optim.Adam(groups, foreach=True)
    ema = copy.deepcopy(model).requires_grad_(False)
    mixmatch = p["method"] == "mixmatch" and len(xu) > 0
    bs, total = int(p["batch_size"]), max(1, int(p["epochs"]) * int(p["steps_per_epoch"]))
    noise, lambda_u, inv_t = float(p["noise"]), float(p["lambda_u"]), 1.0 / float(p["T"])
    alpha = float(p["alpha"])
    update_ema = _ema_updater(ema, model, float(p["ema_decay"]) if mixmatch else 0.0)
    # modes once: nothing in the loop changes them (the EMA copy is a separate module)
    model.head.train()
    model.bottom.train(bottom_lr > 0)
    stop = Convergence(ema, xu if len(xu) else xl, int(p["stop_patience"]), float(p["stop_tol"]))
    epoch, done = int(p["steps_per_epoch"]), 0
    feat = tuple(xl.shape[1:])
    block, first = None, 0  # the draws of the steps from ``first`` on (the fast path's blocks)
    for step in range(total):
        if block is None or step - first == len(block.il):
            first, n = step, completion_fast.block_steps(step, total, epoch, bs, feat)
            n_u = len(xu) if mixmatch else 0
            block = completion_fast.draw_block(gen, rng, n, bs, len(xl), n_u, feat, noise, alpha)
        s = step - first
        il = block.il[s]
        x_l, t_l = xl[il] + noise * block.eps_l[s], yl[il]  # (B, d), (B, C)
        if not mixmatch:
            loss = _soft_ce(model(x_l), t_l)
        else:
            x_u = xu[block.iu[s]] + noise * block.eps_u[s]  # (B, d)
            with torch.no_grad():
                sharp = torch.softmax(model(x_u), dim=1) ** inv_t
                t_u = sharp / sharp.sum(dim=1, keepdim=True)  # guessed labels (B, C)
            lam = float(block.lam[s])  # max(lam, 1 - lam), lam ~ Beta(alpha, alpha)
            x_all, t_all = torch.cat([x_l, x_u]), torch.cat([t_l, t_u])  # (2B, d), (2B, C)
            perm = block.perm[s]
            out = model(lam * x_all + (1 - lam) * x_all[perm])  # one batch: shared BN stats
            t_mix = lam * t_all + (1 - lam) * t_all[perm]
            l_u = ((torch.softmax(out[bs:], dim=1) - t_mix[bs:]) ** 2).mean()
            loss = _soft_ce(out[:bs], t_mix[:bs]) + lambda_u * (step / total) * l_u
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        update_ema()
        done = step + 1
        if stop.patience and done % epoch == 0 and stop.converged():
            break
    ema.steps = done
    return ema.eval()


def _soft_ce(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return -(F.log_softmax(logits, dim=1) * targets).sum(dim=1).mean()


def _ema_updater(ema: nn.Module, model: nn.Module, decay: float) -> Callable[[], None]:
    """A step ema <- decay * ema + (1 - decay) * model (decay 0 copies the model); buffers
    copied. The tensor lists are gathered once: walking the modules every step cost more
    than the arithmetic. Foreach ops run the same per-tensor kernels: same bits."""
    e_params: list[torch.Tensor] = list(ema.parameters())
    m_params: list[torch.Tensor] = list(model.parameters())
    e_bufs, m_bufs = list(ema.buffers()), list(model.buffers())
    assert len(e_params) == len(m_params) and len(e_bufs) == len(m_bufs)

    @torch.no_grad()
    def update() -> None:
        torch._foreach_mul_(e_params, decay)
        torch._foreach_add_(e_params, m_params, alpha=1.0 - decay)
        if e_bufs:
            torch._foreach_copy_(e_bufs, m_bufs)

    return update


@torch.no_grad()
def predict(model: nn.Module, X: np.ndarray) -> np.ndarray:
    """Predicted classes (N,) of the rows of X (N, d)."""
    model.eval()
    return model(torch.as_tensor(X, dtype=torch.float32)).argmax(dim=1).numpy()
