"""CAE: confusional autoencoder (Zou et al. 2022; VFLAIR).

Before training, the active party fits an autoencoder over one-hot labels (C classes):
an encoder E: e_y -> y~ (a soft "fake" label, softmax over C) and a decoder
D: y~ -> y^ (softmax over C), minimizing

    CE(D(E(e_y)), y)  +  E(e_y)[y]  -  lambda * H(E(e_y))

(reconstruct the label; put little mass on the true class; with confusion strength
lambda, spread the fake label over many classes). The VFL model then trains on y~
(soft cross-entropy), so the gradients the passive parties receive — and any label a
passive attacker reads from them — follow the disguised labels; predictions are decoded
by D at evaluation (the active party's ``top`` applies it). Trained in the run, from the
trial seed, in well under a second; no pretrained file.

Our loss is a bounded version of Zou et al.'s (their "contra" term -CE(y~, y) is
unbounded); lambda = 0 still disguises (mass moves off the true class), so CAE has no
neutral strength, as in VFLAIR's "CAE 0.0".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, cast

import torch
from torch import nn

from trainables.defenses.base import Defense, DefenseInfo
from trainables.defenses.stacked import Index, StackedHook

if TYPE_CHECKING:
    from trainables.roles import ActiveHost, HookHost


def _mlp(c: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(c, hidden), nn.ReLU(), nn.Linear(hidden, c), nn.Softmax(dim=1))


def train_autoencoder(
    n_classes: int, lam: float, seed: int, steps: int = 400, hidden: int = 0
) -> tuple[nn.Module, nn.Module]:
    """Fit (E, D) on random one-hot labels; both map (N, C) probabilities to (N, C)."""
    hidden = hidden or 6 * n_classes
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        enc, dec = _mlp(n_classes, hidden), _mlp(n_classes, hidden)
        opt = torch.optim.Adam([*enc.parameters(), *dec.parameters()], lr=5e-3)
        for _ in range(steps):
            y = torch.randint(n_classes, (128,))
            fake = enc(nn.functional.one_hot(y, n_classes).float())  # (N, C)
            recon = dec(fake)
            loss = nn.functional.nll_loss(torch.log(recon.clamp_min(1e-8)), y)
            loss = loss + fake[torch.arange(len(y)), y].mean() - lam * entropy(fake).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    for p in [*enc.parameters(), *dec.parameters()]:
        p.requires_grad_(False)
    return enc.eval(), dec.eval()


def entropy(p: torch.Tensor) -> torch.Tensor:
    """Row entropies of (N, C) probabilities."""
    return -(p * torch.log(p.clamp_min(1e-8))).sum(dim=1)


class LogDecoder(nn.Module):
    """Logits (N, C) -> log D(softmax(logits)): the model's released, decoded output."""

    def __init__(self, decoder: nn.Module) -> None:
        super().__init__()
        self.decoder = decoder

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.log(self.decoder(torch.softmax(logits, dim=1)).clamp_min(1e-8))


class StackedCAE(StackedHook):
    """K trainings' disguised labels and decoded outputs: each training's own autoencoder
    (fit at its party from its own seed) on its slice; no parameter of them trains."""

    messages = False
    model = True

    def soft_targets(self, y: torch.Tensor, index: Index = None) -> torch.Tensor | None:
        return torch.stack([m.soft_targets(y[j]) for j, m in enumerate(self.at(index))])

    def decode(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.stack([m.decoder(logits[j]) for j, m in enumerate(self.members)])


class ConfusionalAutoencoder(Defense):
    name = "cae"
    stacked = StackedCAE
    defaults: ClassVar[dict[str, object]] = {"steps": 400}
    info = DefenseInfo(
        party="active",
        grid=(0.0, 0.1, 0.5, 1.0),
        neutral=None,
        quantity="weight lambda of the fake labels' entropy in the autoencoder loss",
    )

    def attach(self, party: HookHost) -> None:
        super().attach(party)
        seed = int(torch.randint(2**31, (1,), generator=self.generator))
        self.encoder, decoder = train_autoencoder(
            party.config.n_classes, self.strength, seed, int(self.params["steps"])
        )
        self.encoder.to(party.device)
        self.decoder = LogDecoder(decoder).to(party.device)
        cast("ActiveHost", party).top.set_decoder(self.decoder)  # CAE: at the active party

    def soft_targets(self, y: torch.Tensor) -> torch.Tensor | None:
        """(B,) labels -> (B, C) disguised soft labels."""
        c = cast("nn.Linear", self.encoder.get_submodule("0")).in_features  # E's first layer
        self.count("soft_targets")
        with torch.no_grad():
            soft: torch.Tensor = self.encoder(nn.functional.one_hot(y, c).float())
        return soft


DEFENSE = ConfusionalAutoencoder
