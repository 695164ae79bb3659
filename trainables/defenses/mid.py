"""MID: mutual-information regularization by a variational bottleneck (Zou et al. 2023).

The active party passes each passive embedding H_k (B, C) through its own bottleneck
before the global model: an encoder gives (mu, s) (B, d) each, sigma = softplus(s - 0.5),
z = mu + sigma * eps in training (z = mu at evaluation), and a decoder maps z back to
(B, C). The loss gains lambda * KL(N(mu, sigma) || N(0, I)) (mean over rows, summed over
the passive parties), which bounds the information about the labels that the bottleneck
lets through — and so what flows back to H_k as gradient. lambda = 0 keeps the
bottleneck but drops the KL (VFLAIR's "MID 0.0"), so MID has no neutral strength.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch
from torch import nn

from trainables.defenses.base import Defense, DefenseInfo
from trainables.defenses.stacked import Index, StackedDefense, scatter
from trainables.stacked import StackedMLP

if TYPE_CHECKING:
    from trainables.roles import ActiveHost, HookHost


class Bottleneck(nn.Module):
    """(B, C) -> (B, C) through a sampled (B, d) code: the trained bottleneck as the released
    model applies it (``DefendedTop``); trained in its stacked form (``StackedMID``)."""

    def __init__(self, dim: int, hidden: int, code: int, generator: torch.Generator) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 2 * code))
        self.decoder = nn.Sequential(nn.Linear(code, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.code = code
        self.generator = generator

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        mu, s = self.encoder(h).split(self.code, dim=1)  # (B, d) each
        sigma = nn.functional.softplus(s - 0.5)
        if self.training:
            eps = torch.randn(mu.shape, generator=self.generator).to(mu)
            return self.decoder(mu + sigma * eps)
        return self.decoder(mu)


class PassiveBottlenecks(nn.Module):
    """One bottleneck per passive party: [H_0..H_{K-2}] -> [Z_0..Z_{K-2}]."""

    def __init__(self, blocks: list[Bottleneck]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, hs: list[torch.Tensor]) -> list[torch.Tensor]:
        return [block(h) for block, h in zip(self.blocks, hs, strict=True)]


def kl_to_prior(mu: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """KL(N(mu, sigma^2) || N(0, 1)) per element: (..., d) -> (..., d)."""
    return 0.5 * (mu.pow(2) + sigma.pow(2) - 2 * torch.log(sigma.clamp_min(1e-8)) - 1)


class StackedMID(StackedDefense):
    """K trainings' bottlenecks: per passive party, the K encoders and the K decoders as
    stacked MLPs; each training draws its noise from its own defense's stream, in the
    order its own bottlenecks would."""

    messages = False
    model = True

    def __init__(self, members: Sequence[Any], device: torch.device) -> None:
        super().__init__(members, device)
        blocks = [list(m.module.blocks) for m in members]  # K x (P-1) Bottleneck
        self.code = blocks[0][0].code
        passive = range(len(blocks[0]))
        self.encoders = [StackedMLP([b[i].encoder for b in blocks], device) for i in passive]
        self.decoders = [StackedMLP([b[i].decoder for b in blocks], device) for i in passive]
        self.params = [p for mlp in (*self.encoders, *self.decoders) for p in mlp.params]
        self.kl: list[torch.Tensor] = []  # per passive party, (K,): the last forward's KL

    def transform(
        self, h_passive: list[torch.Tensor], training: bool, index: Index = None
    ) -> list[torch.Tensor]:
        out, self.kl = [], []
        members = self.at(index)
        for encoder, decoder, h in zip(self.encoders, self.decoders, h_passive, strict=True):
            mu, s = encoder.forward(h, index).split(self.code, dim=2)  # (K, B, d) each
            sigma = nn.functional.softplus(s - 0.5)
            z = mu
            if training:
                shape = mu.shape[1:]
                eps = torch.stack([torch.randn(shape, generator=m.generator) for m in members])
                z = mu + sigma * eps.to(mu)
            self.kl.append(kl_to_prior(mu, sigma).sum(dim=2).mean(dim=1))  # (K,)
            out.append(decoder.forward(z, index))  # (K, B, C)
        return out

    def loss_terms(
        self, h_passive: list[torch.Tensor], y: torch.Tensor, index: Index = None
    ) -> torch.Tensor | None:
        """lambda * KL of the last forward's codes, summed over the passive parties; called
        once per training objective, whose logits went through the bottlenecks: that is
        one application even at lambda 0."""
        if not h_passive:
            return None
        members = self.at(index)
        for m in members:
            m.count("bottleneck")
        acting = self.acting(members)
        if not acting:
            return None
        kl = torch.stack(self.kl).sum(dim=0)[acting]  # (len(acting),)
        strengths = self.strengths([members[j] for j in acting])
        return scatter(strengths * kl, acting, len(members))

    def write_back(self, slots: Sequence[int]) -> None:
        blocks = [list(m.module.blocks) for m in self.members]
        every = range(len(self.members))
        for i, (encoder, decoder) in enumerate(zip(self.encoders, self.decoders, strict=True)):
            encoder.write_back([b[i].encoder for b in blocks], every)
            decoder.write_back([b[i].decoder for b in blocks], every)


class MutualInformationDefense(Defense):
    name = "mid"
    stacked = StackedMID
    defaults: ClassVar[dict[str, Any]] = {"hidden": 64, "code": 16}
    info = DefenseInfo(
        party="active",
        grid=(0.0, 1e-8, 1e-6, 1e-4, 0.01, 0.1, 1.0, 100.0, 1e4),
        neutral=None,
        quantity="weight lambda of the bottleneck's KL term in the loss",
    )

    def attach(self, party: HookHost) -> None:
        super().attach(party)
        cfg = party.config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(2**31, (1,), generator=self.generator)))
            blocks = [
                Bottleneck(
                    cfg.emb_width,
                    int(self.params["hidden"]),
                    int(self.params["code"]),
                    self.generator,
                )
                for _ in range(cfg.n_parties - 1)
            ]
        self.module = PassiveBottlenecks(blocks).to(party.device)
        active = cast("ActiveHost", party)  # MID is applied at the active party only
        active.top.add_transform(self.module)  # the released model applies it


DEFENSE = MutualInformationDefense
