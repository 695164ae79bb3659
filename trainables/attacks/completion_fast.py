"""The model completion at its defaults, without autograd: a linear head on a frozen bottom,
trained with MixMatch, Adam and an EMA copy (``completion.py`` holds the algorithm).

Why: the generic loop (``completion._train_autograd``) is dispatch-bound: ~70 small torch ops,
autograd and Adam per step of 16 rows, ~0.8 ms a step, 25 x 1024 steps, and PMC, MC and
AMC were 94% of the defense benchmark's compute (issue 17). At the defaults
(``head="linear"``, ``bottom_lr_scale=0``, ``method="mixmatch"``) the same steps need far
less work:
- the bottom is frozen, so its outputs on the jittered and the mixed rows depend only on
  the random draws: one ``no_grad`` forward per block of steps computes them all;
- what remains per step is a (3B, w+1) @ (w+1, C) product, softmax, and the head's
  gradient in closed form (soft CE on the mixed labeled rows, lambda_u * ramp * MSE of
  the softmax on the mixed unlabeled rows, through the softmax's Jacobian by hand), with
  Adam (torch's defaults and formulas) and the EMA on one array theta = [W | b] (C, w+1),
  in numpy float32: ~35 ops of ~1 us instead of ~70 torch ops, autograd and optimizer.
K completions of one shape train as one (``train_fast``: the K heads stacked; K = 1 is
one completion, the same code). Random numbers: a completion draws by blocks of steps
(``block_steps``: at most 256, never across an epoch's end), each kind of draw of a block in
one call (``draw_block``); the generic loop draws by the same blocks, so both paths see the
same numbers, and no draw depends on the head. Until issue 67 the draws were one call per
step (5 generator calls a step, ~0.6 s of a 2.6 s completion): the numbers changed then,
the algorithm did not. The float operations differ (order of sums, numpy's exp), so the
weights agree with the generic path's to float rounding, not bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from torch import nn


class Convergence:
    """Convergence stop of the completion (an option; the papers train every epoch).

    Once per epoch the EMA model labels the attacker's own unlabeled training rows (no
    ground truth: it is what the attacker can watch); training stops once, for
    ``patience`` epochs in a row, at most ``tol`` of those labels changed.
    """

    def __init__(self, ema: nn.Module, x: torch.Tensor, patience: int, tol: float) -> None:
        self.ema, self.x, self.patience, self.tol = ema, x, patience, tol  # x: (n, d)
        self.labels: torch.Tensor | None = None  # (n,) at the last check
        self.quiet = 0

    @torch.no_grad()
    def converged(self) -> bool:
        was = self.ema.training
        labels = self.ema.eval()(self.x).argmax(dim=1)  # (n,)
        self.ema.train(was)
        changed = 1.0 if self.labels is None else float((labels != self.labels).float().mean())
        self.labels = labels
        self.quiet = self.quiet + 1 if changed <= self.tol else 0
        return self.quiet >= self.patience


BETAS, EPS = (0.9, 0.999), 1e-8  # torch.optim.Adam's defaults, as the generic path uses
BLOCK_STEPS = 256  # steps whose bottom outputs are computed in one forward
BLOCK_ELEMENTS = 1 << 22  # at most ~16 MB of float32 inputs per block (images: fewer steps)


def applies(p: dict[str, Any], n_unlabeled: int) -> bool:
    """Whether ``train_fast`` computes what the generic loop would for params ``p``: a
    linear head, a frozen bottom, MixMatch with unlabeled rows to guess."""
    return (
        p["head"] == "linear"
        and float(p["bottom_lr_scale"]) == 0.0
        and p["method"] == "mixmatch"
        and n_unlabeled > 0
    )


@dataclass
class Block:
    """The draws of ``S`` consecutive steps (B: batch size), for both paths."""

    il: torch.Tensor  # (S, B) labeled rows
    eps_l: torch.Tensor  # (S, B, *feat) their jitter (zeros without noise)
    iu: torch.Tensor  # (S, B) unlabeled rows
    eps_u: torch.Tensor  # (S, B, *feat)
    lam: np.ndarray  # (S,) float64, max(lam, 1 - lam)
    perm: torch.Tensor  # (S, 2B) the MixUp partner of each of the 2B rows


def block_steps(done: int, total: int, epoch: int, bs: int, feat: tuple[int, ...]) -> int:
    """How many steps the block starting after ``done`` of ``total`` runs: at most
    ``BLOCK_STEPS`` and ``BLOCK_ELEMENTS`` inputs (3B rows of ``feat`` a step), never
    across an epoch's end (the convergence check). The generic loop draws by the same
    blocks, so the draws of a completion do not depend on which path trains it, nor on
    what it is stacked with."""
    per_step = 3 * bs * max(1, int(np.prod(feat)))
    left_in_epoch = epoch - done % epoch if epoch > 0 else total - done
    return min(BLOCK_STEPS, max(1, BLOCK_ELEMENTS // per_step), left_in_epoch, total - done)


def draw_block(
    gen: torch.Generator,
    rng: np.random.Generator,
    steps: int,
    bs: int,
    n_l: int,
    n_u: int,
    feat: tuple[int, ...],
    noise: float,
    alpha: float,
) -> Block:
    """The draws of ``steps`` steps, each kind in one call (a call per step cost more than
    a step's arithmetic: issue 67): labeled rows, their jitter, unlabeled rows, their
    jitter, the MixUp partners (a permutation per step, by sorting float64 uniforms:
    ties have probability ~2^-43 a step) from ``gen``; lam from ``rng``. ``n_u = 0``
    (no MixMatch: supervised) draws the labeled rows and their jitter only."""
    zeros = torch.zeros(steps, bs, *feat)
    il = torch.randint(n_l, (steps, bs), generator=gen)  # (S, B)
    eps_l = torch.randn((steps, bs, *feat), generator=gen) if noise > 0 else zeros
    if n_u == 0:
        none = torch.zeros(steps, 0, dtype=torch.int64)
        return Block(il, eps_l, none, zeros[:, :0], np.ones(steps), none)
    iu = torch.randint(n_u, (steps, bs), generator=gen)  # (S, B)
    eps_u = torch.randn((steps, bs, *feat), generator=gen) if noise > 0 else zeros
    keys = torch.rand((steps, 2 * bs), generator=gen, dtype=torch.float64)
    perm = torch.argsort(keys, dim=1, stable=True)  # (S, 2B)
    lam = rng.beta(alpha, alpha, size=steps)  # (S,)
    return Block(il, eps_l, iu, eps_u, np.maximum(lam, 1.0 - lam), perm)


@dataclass
class Inputs:
    """What the steps of a block read (w: bottom width, C: classes)."""

    feats: np.ndarray  # (S, 3B, w+1): [guess rows; mixed labeled; mixed unlabeled], then 1
    t0: np.ndarray  # (S, 2B, C): the mixed targets' part from the labeled rows' labels
    mix_u: np.ndarray  # (S, 2B, B): weights of the guessed labels in the mixed targets


@torch.no_grad()
def block_inputs(
    bottom: nn.Module,
    xl: torch.Tensor,
    yl: torch.Tensor,
    xu: torch.Tensor,
    b: Block,
    noise: float,
) -> Inputs:
    """The bottom's outputs and the target mixing of a block, as the generic loop forms
    its inputs (x + noise * eps, then lam * x + (1 - lam) * x[perm], in float32)."""
    steps, bs = b.il.shape
    x_l = xl[b.il] + noise * b.eps_l  # (S, B, *feat)
    x_u = xu[b.iu] + noise * b.eps_u  # (S, B, *feat)
    x_all = torch.cat([x_l, x_u], dim=1)  # (S, 2B, *feat)
    shape = (steps, 1) + (1,) * (x_all.dim() - 2)
    lam = torch.as_tensor(b.lam, dtype=torch.float32).view(shape)
    rest = torch.as_tensor(1.0 - b.lam, dtype=torch.float32).view(shape)
    flat = (b.perm + 2 * bs * torch.arange(steps).unsqueeze(1)).flatten()  # (S * 2B,)
    partner = x_all.flatten(0, 1).index_select(0, flat).view_as(x_all)  # x_all[s, perm[s]]
    mixed = lam * x_all + rest * partner  # (S, 2B, *feat)
    x = torch.cat([x_u, mixed], dim=1).flatten(0, 1)  # (S * 3B, *feat)
    out = bottom(x).reshape(steps, 3 * bs, -1)  # (S, 3B, w)
    feats = torch.cat([out, torch.ones(steps, 3 * bs, 1)], dim=2)  # (S, 3B, w+1)
    # t_mix = lam * t_all + (1 - lam) * t_all[perm], t_all = [labels; guesses] (2B, C):
    # t0 holds the labels' part, mix_u (2B, B) the guesses' weights (lam on a guess row's
    # own guess, 1 - lam on its partner's where that is a guess row)
    lam32, rest32 = b.lam.astype(np.float32)[:, None], (1.0 - b.lam).astype(np.float32)[:, None]
    perm = b.perm.numpy()  # (S, 2B)
    t_l = yl.numpy()[b.il.numpy()]  # (S, B, C)
    padded = np.concatenate([t_l, np.zeros_like(t_l)], axis=1)  # (S, 2B, C)
    t0 = lam32[:, :, None] * padded  # (S, 2B, C)
    t0 += rest32[:, :, None] * np.take_along_axis(padded, perm[:, :, None], axis=1)
    mix_u = np.zeros((steps, 2 * bs, bs), np.float32)
    mix_u[:, np.arange(bs, 2 * bs), np.arange(bs)] = lam32
    at, row = np.nonzero(perm >= bs)
    mix_u[at, row, perm[at, row] - bs] += rest32[at, 0]
    return Inputs(feats.numpy(), t0, mix_u)


class AdamEma:
    """torch.optim.Adam (defaults, foreach formulas: lerp, sqrt / sqrt(bc2) + eps,
    addcdiv) and the EMA ema <- decay * ema + (1 - decay) * theta, on one array."""

    def __init__(self, theta: np.ndarray, lr: float, decay: float) -> None:
        self.theta, self.ema = theta, theta.copy()  # (C, w+1) float32
        self.m, self.v = np.zeros_like(theta), np.zeros_like(theta)
        self.buf = np.empty_like(theta)
        self.lr, self.decay, self.t = lr, decay, 0

    def step(self, grad: np.ndarray, some: np.ndarray | None = None) -> None:
        """One step of every head, or of the heads at ``some`` only (the rest frozen:
        converged); ``grad`` is theirs."""
        if some is None:
            self._step(self.theta, self.ema, self.m, self.v, self.buf, grad)
            return
        parts = [a[some] for a in (self.theta, self.ema, self.m, self.v)]
        self._step(parts[0], parts[1], parts[2], parts[3], np.empty_like(parts[0]), grad)
        for a, part in zip((self.theta, self.ema, self.m, self.v), parts, strict=True):
            a[some] = part

    def _step(
        self,
        theta: np.ndarray,
        ema: np.ndarray,
        m: np.ndarray,
        v: np.ndarray,
        buf: np.ndarray,
        grad: np.ndarray,
    ) -> None:
        b1, b2 = BETAS
        self.t += 1  # every head that steps has stepped as often (a frozen one no more)
        np.subtract(grad, m, out=buf)
        buf *= 1.0 - b1
        m += buf  # lerp(m, g, 1 - b1)
        v *= b2
        np.multiply(grad, grad, out=buf)
        buf *= 1.0 - b2
        v += buf
        np.sqrt(v, out=buf)
        buf *= 1.0 / (1.0 - b2**self.t) ** 0.5
        buf += EPS
        np.divide(m, buf, out=buf)
        buf *= self.lr / (1.0 - b1**self.t)
        theta -= buf
        ema *= self.decay
        np.multiply(theta, 1.0 - self.decay, out=buf)
        ema += buf


def head_grads(
    theta: np.ndarray, feats: np.ndarray, t0: np.ndarray, mix_u: np.ndarray, wu: float, t: float
) -> np.ndarray:
    """d loss / d theta (K, C, w+1) of one step of K heads: theta (K, C, w+1), feats
    (K, 3B, w+1), t0 (K, 2B, C), mix_u (K, 2B, B), ``wu`` = lambda_u * step / total,
    ``t`` = 1 / T. The same operations per slice (matmul loops over K, reductions run
    along the same last axis), so a head's numbers do not depend on K.

    loss = CE(softmax(o_l), t_l) + wu * mean((softmax(o_u) - t_u)^2) on the mixed rows o
    (B each); the guessed labels are constants (computed under no_grad in the generic loop).
    """
    bs = mix_u.shape[2]
    o = feats @ theta.transpose(0, 2, 1)  # (K, 3B, C) logits: guess, mixed l, mixed u
    o -= o.max(axis=2, keepdims=True)
    np.exp(o, out=o)
    o /= o.sum(axis=2, keepdims=True)
    sharp = o[:, :bs] ** t
    guess = sharp / sharp.sum(axis=2, keepdims=True)  # (K, B, C)
    d = o[:, bs:] - (t0 + mix_u @ guess)  # (K, 2B, C)
    d[:, :bs] *= 1.0 / bs  # soft CE: d/do = (p - t) / B (targets sum to 1)
    g = d[:, bs:]
    g *= 2.0 * wu / (g.size // g.shape[0])  # d MSE / d softmax
    g -= (g * o[:, 2 * bs :]).sum(axis=2, keepdims=True)
    g *= o[:, 2 * bs :]  # through the softmax: p * (g - <g, p>)
    return d.transpose(0, 2, 1) @ feats[:, bs:]  # (K, C, w+1)


def train_fast(
    models: Sequence[nn.Module],
    datas: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
    p: dict[str, Any],
    gens: Sequence[torch.Generator],
    rngs: Sequence[np.random.Generator],
    stops: Sequence[Convergence],
) -> list[int]:
    """Trains the K ``models``' heads (linear, on frozen bottoms) as one and writes each
    one's EMA weights into its ``stops[k].ema`` (a copy of the model), as the generic loop
    does; K = 1 is one completion; returns each one's updates run. Each draws from its own
    generators (the generic loop's, fresh) and forms its own block inputs; the head steps
    and Adam run on the K heads stacked, so the ~35 small numpy calls of a step are made
    once for all K. With a convergence stop, a head whose ``Convergence`` says so at an
    epoch end is frozen (its weights, EMA and step count kept) while the others go on.
    ``datas``: xl (n_l, *feat), yl (n_l, C) one-hot, xu (n_u, *feat), one shape for all K.
    Needs ``applies(p, len(xu))``."""
    thetas = [
        torch.cat([_linear(m).weight, _linear(m).bias.unsqueeze(1)], dim=1).detach().numpy()
        for m in models
    ]
    opt = AdamEma(np.stack(thetas), float(p["lr"]), float(p["ema_decay"]))  # (K, C, w+1)
    bs, epoch = int(p["batch_size"]), int(p["steps_per_epoch"])
    total = max(1, int(p["epochs"]) * epoch)
    noise, lambda_u, inv_t = float(p["noise"]), float(p["lambda_u"]), 1.0 / float(p["T"])
    feat = tuple(datas[0][0].shape[1:])
    going = list(range(len(models)))  # the heads not yet converged
    steps_of = [0] * len(models)  # updates each head ran
    done = 0
    while done < total and going:
        steps = block_steps(done, total, epoch, bs, feat)
        inps = []
        for k in going:
            (xl, yl, xu), gen, rng = datas[k], gens[k], rngs[k]
            b = draw_block(gen, rng, steps, bs, len(xl), len(xu), feat, noise, float(p["alpha"]))
            inps.append(block_inputs(_bottom(models[k]).eval(), xl, yl, xu, b, noise))
        feats = np.stack([i.feats for i in inps], axis=1)  # (S, K', 3B, w+1)
        t0 = np.stack([i.t0 for i in inps], axis=1)  # (S, K', 2B, C)
        mix_u = np.stack([i.mix_u for i in inps], axis=1)  # (S, K', 2B, B)
        some = None if len(going) == len(models) else np.array(going)
        theta = opt.theta if some is None else opt.theta[some]
        for s in range(steps):
            wu = lambda_u * ((done + s) / total)
            grad = head_grads(theta, feats[s], t0[s], mix_u[s], wu, inv_t)
            opt.step(grad, some)
            theta = opt.theta if some is None else opt.theta[some]
        done += steps
        for k in going:
            steps_of[k] = done
        if stops[0].patience and epoch > 0 and done % epoch == 0:
            for k in going:
                _load(stops[k].ema, opt.ema[k])
            going = [k for k in going if not stops[k].converged()]
    for k, (model, stop) in enumerate(zip(models, stops, strict=True)):
        _load(model, opt.theta[k])
        _load(stop.ema, opt.ema[k])
    return steps_of


def _linear(model: nn.Module) -> nn.Linear:
    """A ``CompletionModel``'s linear head, ``model.head[0]`` (the fast path's only kind)."""
    return cast("nn.Linear", model.get_submodule("head.0"))


def _bottom(model: nn.Module) -> nn.Module:
    return model.get_submodule("bottom")


def _load(model: nn.Module, theta: np.ndarray) -> None:
    """Writes theta = [W | b] (C, w+1) into the model's linear head."""
    linear = _linear(model)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(theta[:, :-1]))
        linear.bias.copy_(torch.from_numpy(theta[:, -1]))
