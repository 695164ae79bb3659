"""K same-shape models as one: stacked parameters, one batched forward, one optimizer step.

Why: a small VFL training (MLP-2 on breast_cancer) spends ~3.5 ms a round in Python,
autograd and optimizer overhead and almost nothing in arithmetic. K trainings of one
shape stacked on a leading axis pay that overhead once per round for all K
(``vfl/vectorized.py``). Each training's numbers stay its own: its slice of every
parameter is updated from its slice of the gradient only (the K losses are summed, and
d(sum)/d(slice k) is training k's own gradient), so a stacked training equals the one
trained alone up to float summation order (``baddbmm`` instead of ``addmm``).

Plain functions and two small classes, no Ray, no parties: ``vfl/vectorized.py`` uses
them at every party of a vectorized pack.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import torch
from torch import nn

# Adam's defaults, as ``torch.optim.Adam`` has them (the single-model path uses those)
BETAS = (0.9, 0.999)
EPS = 1e-8


def stackable_module(module: nn.Module) -> bool:
    """Whether ``module`` is an MLP ``stack_linears`` can stack: Linear / ReLU only."""
    if isinstance(module, nn.Linear):
        return True
    if isinstance(module, nn.Sequential):
        return all(isinstance(m, (nn.Linear, nn.ReLU)) for m in module)
    return False


def _linears(module: nn.Module) -> list[nn.Linear]:
    return (
        [module]
        if isinstance(module, nn.Linear)
        else [m for m in cast("nn.Sequential", module) if isinstance(m, nn.Linear)]
    )


class StackedMLP:
    """K copies of one Linear-ReLU stack: per layer W (K, out, in) and b (K, out).

    ``forward``: x (K, B, in) -> (K, B, out), ReLU between layers, none after the last
    (the layout ``models.mlp`` builds). ``write_back`` copies slice k into model k, so the
    attack harness reads the trained models as it reads one-at-a-time models.
    """

    def __init__(self, modules: Sequence[nn.Module], device: torch.device) -> None:
        layers = [_linears(m) for m in modules]
        self.params: list[torch.Tensor] = []
        for depth in range(len(layers[0])):
            for attr in ("weight", "bias"):
                stacked = torch.stack([getattr(ls[depth], attr).detach() for ls in layers])
                self.params.append(stacked.to(device).requires_grad_())

    @property
    def depth(self) -> int:
        return len(self.params) // 2

    def forward(
        self,
        x: torch.Tensor,
        index: torch.Tensor | None = None,
        training: bool = True,
        frozen: bool = False,
    ) -> torch.Tensor:
        """``index`` (K',): only those trainings' models, x (K', B, in) (CELU-VFL's cached
        steps, whose trainings drew batches of different sizes). ``training``: unused (a
        Linear-ReLU stack has no mode); ``ModuleStack`` takes it. ``frozen``: the weights
        as constants (the gradient reaches ``x`` only: VFLAIR's MID's KL)."""
        for i in range(self.depth):
            w, b = self.params[2 * i], self.params[2 * i + 1]  # (K, out, in), (K, out)
            if frozen:
                w, b = w.detach(), b.detach()
            if index is not None:
                w, b = w[index], b[index]
            x = torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))  # (K, B, out)
            if i < self.depth - 1:
                x = torch.relu(x)
        return x

    @torch.no_grad()
    def write_back(self, modules: Sequence[nn.Module], slots: Sequence[int]) -> None:
        """Slice j of every parameter into ``modules[slots[j]]``."""
        for j, slot in enumerate(slots):
            for depth, linear in enumerate(_linears(modules[slot])):
                linear.weight.copy_(self.params[2 * depth][j])
                linear.bias.copy_(self.params[2 * depth + 1][j])


class ModuleStack:
    """One training's bottom of any architecture as a stack of K = 1: what cannot stack
    (a bottom that is not a Linear-ReLU stack, or a pretrained encoder) runs through the
    same stacked party code (``vfl/stacked_party.py``) as the MLPs do.

    ``params`` are the module's own parameters (no leading axis: the optimizer steps them
    in place, so ``write_back`` has nothing to copy). ``forward``: x (1, B, in) ->
    (1, B, out), the module in train mode, or eval mode where ``training`` is False
    (dropout, batch norm). Why its own random stream (``seed``): a module that draws
    (dropout) would otherwise draw from the process's generator, whose state depends on
    what ran before it, and the same seed would not give the same record. The one place
    that says a model cannot stack: ``stackable_module``.
    """

    def __init__(self, modules: Sequence[nn.Module], device: torch.device, seed: int = 0) -> None:
        if len(modules) != 1:
            raise ValueError(
                f"a bottom that is not a Linear-ReLU stack stacks alone, not {len(modules)}"
            )
        self.module = modules[0].to(device)
        self.params: list[torch.Tensor] = list(self.module.parameters())
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(int(seed))
            self.rng = torch.get_rng_state()

    def forward(
        self, x: torch.Tensor, index: torch.Tensor | None = None, training: bool = True
    ) -> torch.Tensor:
        self.module.train(training)
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self.rng)
            out = self.module(x[0]).unsqueeze(0)  # (1, B, in) -> (1, B, out)
            self.rng = torch.get_rng_state()
        return out

    def write_back(self, modules: Sequence[nn.Module], slots: Sequence[int]) -> None:
        """Nothing to copy: the module trained in place."""


def stack_modules(
    modules: Sequence[nn.Module], device: torch.device, seed: int = 0
) -> StackedMLP | ModuleStack:
    """K models as one: a ``StackedMLP`` where every one is a Linear-ReLU stack, else the
    one model itself (``ModuleStack``, K = 1, drawing from a stream seeded by ``seed``)."""
    if all(stackable_module(m) for m in modules):
        return StackedMLP(modules, device)
    return ModuleStack(modules, device, seed)


class StackedOptimizer:
    """SGD or Adam over stacked parameters with one learning rate per training.

    With one learning rate for the whole stack the update is ``torch.optim``'s own
    single-tensor arithmetic, element for element (so each slice moves exactly as the
    model trained alone would, given the same gradient); with several, the rate is a
    (K, 1, ...) tensor and the last multiply-add is split in two (float rounding apart).
    """

    def __init__(self, name: str, params: Sequence[torch.Tensor], lrs: Sequence[float]) -> None:
        if name not in ("sgd", "adam"):
            raise ValueError(f"no stacked optimizer {name!r}: sgd, adam")
        self.name = name
        self.params = list(params)
        self.lrs = [float(lr) for lr in lrs]
        self.uniform = len(set(self.lrs)) == 1
        self.steps = 0
        self.scale = 1.0  # every rate times this (a schedule's epoch factor: ``lr_scale``)
        self.state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in self.params]

    @torch.no_grad()
    def keep(self, index: Sequence[int]) -> None:
        """Go on with the trainings at ``index`` only (successive halving): their moments
        and rates; the parameters themselves are cut by their owner (``StackedParty.keep``)."""
        idx = torch.tensor(list(index), device=self.params[0].device)
        self.state = [(avg[idx], avg_sq[idx]) for avg, avg_sq in self.state]
        self.lrs = [self.lrs[j] for j in index]
        self.uniform = len(set(self.lrs)) == 1

    def _lr(self, p: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        lr = torch.tensor(self.lrs, dtype=p.dtype, device=p.device) * (scale * self.scale)
        return lr.view(-1, *([1] * (p.dim() - 1)))  # (K, 1, ...)

    @property
    def param_groups(self) -> list[dict[str, list[torch.Tensor]]]:
        """One group of every stacked parameter (what an optimizer wrapper reads: AMC)."""
        return [{"params": self.params}]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, closure: object = None) -> None:
        self.steps += 1
        for p, (avg, avg_sq) in zip(self.params, self.state, strict=True):
            if p.grad is None:
                continue
            grad = p.grad
            if self.name == "sgd":
                if self.uniform:
                    p.add_(grad, alpha=-(self.lrs[0] * self.scale))
                else:
                    p.sub_(self._lr(p) * grad)
                continue
            beta1, beta2 = BETAS
            avg.lerp_(grad, 1 - beta1)
            avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            correction1 = 1 - beta1**self.steps
            correction2_sqrt = (1 - beta2**self.steps) ** 0.5
            denom = (avg_sq.sqrt() / correction2_sqrt).add_(EPS)
            if self.uniform:
                p.addcdiv_(avg, denom, value=-(self.lrs[0] * self.scale / correction1))
            else:
                p.sub_(self._lr(p, 1 / correction1) * (avg / denom))


def lr_scale(decay: str, epoch: int) -> float:
    """The factor on every learning rate in ``epoch`` (0-based): 1 (``none``),
    1 / sqrt(epoch + 1) (``inv_sqrt``), or VFLAIR's trainer's (``vflair``).

    Why ``vflair`` is its own: VFLAIR calls ``LR_Decay(i_epoch)`` *after* epoch
    ``i_epoch``, setting lr / sqrt(i_epoch + 1) for the next one, so epochs 0 and 1 both
    train at lr and epoch e >= 1 at lr / sqrt(e) (``MainTaskVFL*.train``)."""
    if decay == "none":
        return 1.0
    if decay == "vflair":
        return 1.0 / math.sqrt(max(epoch, 1))
    return 1.0 / math.sqrt(epoch + 1)


def agg_top(embeddings: Sequence[torch.Tensor]) -> torch.Tensor:
    """aggVFL's top on stacks: P x (K, B, C) -> (K, B, C), summed in party order."""
    return torch.stack(list(embeddings), dim=0).sum(dim=0)


class StackedSplitTop:
    """splitVFL's top on stacks: concat(H_1..H_P) (K, B, P*C) -> (K, B, C), one layer."""

    def __init__(self, fcs: Sequence[nn.Linear], device: torch.device) -> None:
        self.mlp = StackedMLP(fcs, device)

    @property
    def params(self) -> list[torch.Tensor]:
        return self.mlp.params

    def __call__(
        self, embeddings: Sequence[torch.Tensor], index: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.mlp.forward(torch.cat(list(embeddings), dim=2), index)
