"""FedSSL-DP: DP-SGD on G's labeled updates (Opacus) and the sequential budget (Alg. 2).

Why Opacus for both halves: per-sample gradients, clipping and Gaussian noise are Opacus'
``GradSampleModule`` + ``DPOptimizer`` on G; the privacy spent is Opacus'
``RDPAccountant`` over the full history of G's DP steps (noise multiplier, sample rate,
steps). Nothing here re-derives a bound.

The budget rule (Alg. 2, lines 2-7): support agents update in sequence; before agent i
touches its labeled rows the server asks whether its block of DP steps still fits under
ε. The paper checks ε_tot *after* spending (``if ε_tot > ε: break``), which can overshoot
by one block; Lemma 1 (ε_tot ≤ ε) needs the check ahead, so ``PrivacyLedger.admit``
composes the block into a copy of the history first and refuses it if ε would exceed the
budget. The first refusal ends labeled access for the rest of the trial. The ledger
composes every agent's steps together (as the paper's single ε_tot does), which is
conservative: an agent's rows are only sampled in its own steps.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch
from opacus.accountants import RDPAccountant
from opacus.grad_sample import GradSampleModule
from opacus.optimizers import DPOptimizer
from torch import nn

Step = tuple[float, float, int]  # (noise multiplier, sample rate, steps): one history entry


def rdp_epsilon(history: list[Step], delta: float) -> float:
    """ε at ``delta`` of the composed subsampled-Gaussian steps, by Opacus' RDP accountant."""
    if not history:
        return 0.0
    accountant = RDPAccountant()
    accountant.history = [(float(s), float(q), int(n)) for s, q, n in history]
    with warnings.catch_warnings():  # Opacus warns when the best order is at the edge
        warnings.simplefilter("ignore")
        return float(accountant.get_epsilon(delta))


def merged(history: list[Step]) -> list[Step]:
    """Entries with the same (σ, q) summed: RDP composes additively in steps, so the
    accountant gives the same ε; the record stays short however many rounds ran."""
    steps: dict[tuple[float, float], int] = {}
    for s, q, n in history:
        steps[(s, q)] = steps.get((s, q), 0) + n
    return [(s, q, n) for (s, q), n in sorted(steps.items())]


@dataclass
class PrivacyLedger:
    """The server's running account of G's DP steps on labeled rows."""

    budget: float
    delta: float
    history: list[Step] = field(default_factory=list)
    stopped_at: int | None = None  # the round whose first refused block ended labeled access

    def admit(self, noise: float, rate: float, steps: int, round_: int) -> bool:
        """Spend the block if ε after it stays within budget; else stop labeled access."""
        if self.stopped_at is not None:
            return False
        trial = [*self.history, (noise, rate, steps)]
        if rdp_epsilon(trial, self.delta) > self.budget:
            self.stopped_at = round_
            return False
        self.history = trial
        return True

    @property
    def spent(self) -> float:
        return rdp_epsilon(self.history, self.delta)


class PrivateG:
    """G wrapped for one round of DP-SGD: per-sample grads (hooks), clip, noise, step.

    Losses fed to ``step`` must be *sums* of per-sample losses (``GradSampleModule`` with
    ``loss_reduction='sum'``); the ``DPOptimizer`` divides the noisy sum by the expected
    batch size q·n (Opacus' mean reduction), the DP-SGD average of Abadi et al.
    """

    def __init__(
        self, g: nn.Module, optimizer: torch.optim.Optimizer, noise: float, clip: float,
        expected_batch: int, generator: torch.Generator,
    ) -> None:  # fmt: skip
        self.module = GradSampleModule(g, loss_reduction="sum")
        self.optimizer = DPOptimizer(
            optimizer, noise_multiplier=noise, max_grad_norm=clip,
            expected_batch_size=max(1, expected_batch), loss_reduction="mean",
            generator=generator,
        )  # fmt: skip
        self.steps = 0

    def step(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1

    def close(self) -> nn.Module:
        """Remove the hooks and grad samples; the plain G (same parameters) again."""
        return self.module.to_standard_module()
