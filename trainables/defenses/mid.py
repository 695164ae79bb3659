"""MID: mutual-information regularization by a variational bottleneck (Zou et al. 2023).

The active party passes each passive embedding H_k (B, C) through its own bottleneck
before the global model: an encoder gives (mu, s) (B, d) each, sigma = softplus(s - 0.5),
z = mu + sigma * eps in training (z = mu at evaluation), and a decoder maps z back to
(B, C). The loss gains lambda * KL(N(mu, sigma) || N(0, I)) (mean over rows, summed over
the passive parties), which bounds the information about the labels that the bottleneck
lets through — and so what flows back to H_k as gradient. lambda = 0 keeps the
bottleneck but drops the KL (VFLAIR's "MID 0.0"), so MID has no neutral strength.

Option ``form``: ``standard`` (default) is the above, the paper's bottleneck (``hidden``,
``code``). ``vflair`` is VFLAIR's ``MID_model`` (``models/mid_model_rapper.py``): the
encoder one layer C -> 2C with a ReLU (so mu >= 0 and s >= 0), the code C wide, the
decoder C -> 5C -> C with a ReLU after each layer (the passive logits it passes on are
>= 0), sigma = softplus(s - ``std_shift``) with VFLAIR's shift (5 on mnist, cifar and
nuswide, else 0.5: ``LoadModels.py``), and eps drawn at evaluation too (it has no eval
branch). Its parameters train with their own Adam at ``lr`` (VFLAIR's MNIST configs:
1e-4) for the first epoch only: VFLAIR's LR decay then resets every optimizer of the
active party to the main schedule (``global_LR_decay``). And they train on the
prediction's gradient alone (VFLAIR's ``global_backward``: dL/dpred back through the
bottleneck; here the KL reads a frozen copy of the encoder, ``StackedMID.transform``):
the KL term moves the passive embeddings (its gradient is in what the passive party is
sent) but never the bottleneck itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch
from torch import nn

from trainables.defenses.base import Defense, DefenseInfo
from trainables.defenses.stacked import Index, StackedHook, scatter
from trainables.errors import ConfigError
from trainables.stacked import StackedMLP, StackedOptimizer

if TYPE_CHECKING:
    from trainables.roles import ActiveHost, HookHost
    from trainables.vfl.stacked_party import StackedParty


FORMS = ("standard", "vflair")
VFLAIR_SHIFT_DATASETS = ("mnist", "cifar", "nuswide")  # VFLAIR's std shift 5 (else 0.5)


class Bottleneck(nn.Module):
    """(B, C) -> (B, C) through a sampled (B, d) code: the trained bottleneck as the released
    model applies it (``DefendedTop``); trained in its stacked form (``StackedMID``).
    ``vflair``: VFLAIR's layout (the module docstring), ReLU-ended, sampled always."""

    def __init__(
        self, dim: int, hidden: int, code: int, generator: torch.Generator,
        vflair: bool = False, shift: float = 0.5,
    ) -> None:  # fmt: skip
        super().__init__()
        if vflair:  # VFLAIR's MID_model at bottleneck_scale 1: C -> 2C, C -> 5C -> C
            code, hidden = dim, 5 * dim
            self.encoder = nn.Sequential(nn.Linear(dim, 2 * code), nn.ReLU())
            self.decoder = nn.Sequential(
                nn.Linear(code, hidden), nn.ReLU(), nn.Linear(hidden, dim), nn.ReLU()
            )
        else:
            self.encoder = nn.Sequential(
                nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 2 * code)
            )
            self.decoder = nn.Sequential(nn.Linear(code, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.code = code
        self.generator = generator
        self.vflair = vflair
        self.shift = shift

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        mu, s = self.encoder(h).split(self.code, dim=1)  # (B, d) each
        sigma = nn.functional.softplus(s - self.shift)
        if self.training or self.vflair:
            eps = torch.randn(mu.shape, generator=self.generator).to(mu)
            mu = mu + sigma * eps
        decoded: torch.Tensor = self.decoder(mu)
        return decoded


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


class StackedMID(StackedHook):
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
        first = blocks[0][0]
        self.vflair, self.shift = first.vflair, first.shift  # one form per stack (its key)
        self.lr = members[0].params["lr"]
        self.own: list[torch.Tensor] = []  # what its own optimizer steps (``lr`` set)
        if self.lr is not None:
            self.own, self.params = self.params, []

    def install(self, stack: StackedParty) -> None:
        """With ``lr`` set, its parameters step with their own Adam (``OwnRate``)."""
        if self.own:
            stack.params = [*stack.params, *self.own]  # the backward reaches them
            stack.optimizer = OwnRate(stack, self.own, float(self.lr))

    def transform(
        self, h_passive: list[torch.Tensor], training: bool, index: Index = None
    ) -> list[torch.Tensor]:
        out, self.kl = [], []
        members = self.at(index)
        for encoder, decoder, h in zip(self.encoders, self.decoders, h_passive, strict=True):
            mu_s = encoder.forward(h, index)  # (K, B, 2d)
            if self.vflair:  # its encoder and decoder end in a ReLU (StackedMLP's do not)
                mu_s = torch.relu(mu_s)
            mu, s = mu_s.split(self.code, dim=2)  # (K, B, d) each
            sigma = nn.functional.softplus(s - self.shift)
            z = mu
            if training or self.vflair:
                shape = mu.shape[1:]
                eps = torch.stack([torch.randn(shape, generator=m.generator) for m in members])
                z = mu + sigma * eps.to(mu)
            if self.vflair and training:  # the KL's gradient reaches H, not the bottleneck
                mu, s = torch.relu(encoder.forward(h, index, frozen=True)).split(self.code, dim=2)
                sigma = nn.functional.softplus(s - self.shift)
            self.kl.append(kl_to_prior(mu, sigma).sum(dim=2).mean(dim=1))  # (K,)
            out.append(self._relu(decoder.forward(z, index)))  # (K, B, C)
        return out

    def _relu(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) if self.vflair else x

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


class OwnRate:
    """The active stack's optimizer, and an Adam of MID's own over ``own`` (VFLAIR's
    ``global_model_optimizer``): at ``lr`` in epoch 0, at the main rates (with the
    schedule's factor) after it, as VFLAIR's LR decay resets it to them."""

    def __init__(self, stack: StackedParty, own: list[torch.Tensor], lr: float) -> None:
        self.inner = stack.optimizer
        self.stack = stack
        self.lr = lr
        self.own = StackedOptimizer("adam", own, [lr] * len(stack.members))

    @property
    def params(self) -> list[torch.Tensor]:
        return [*self.inner.params, *self.own.params]

    @property
    def param_groups(self) -> list[dict[str, list[torch.Tensor]]]:
        return [*self.inner.param_groups, *self.own.param_groups]

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none)
        self.own.zero_grad(set_to_none)

    def step(self, closure: object = None) -> None:
        self.inner.step()
        main = self.stack.stepper
        first = self.stack._epoch == 0
        self.own.lrs = [self.lr] * len(main.lrs) if first else list(main.lrs)
        self.own.uniform = len(set(self.own.lrs)) == 1
        self.own.scale = 1.0 if first else main.scale
        self.own.step()


class MutualInformationDefense(Defense):
    name = "mid"
    stacked = StackedMID
    # ``hidden``, ``code``: the standard form's widths (vflair's are fixed: 5C and C).
    # ``std_shift``: None -> the form's (standard 0.5; vflair VFLAIR's for the dataset).
    # ``lr``: None -> the main optimizer; set, its own Adam (``OwnRate``, either form)
    defaults: ClassVar[dict[str, object]] = {
        "hidden": 64, "code": 16, "form": "standard", "std_shift": None, "lr": None,
    }  # fmt: skip
    info = DefenseInfo(
        party="active",
        grid=(0.0, 1e-8, 1e-6, 1e-4, 0.01, 0.1, 1.0, 100.0, 1e4),
        neutral=None,
        quantity="weight lambda of the bottleneck's KL term in the loss",
    )

    def validate(self) -> None:
        self.choice("form", FORMS)
        for key in ("std_shift", "lr"):
            value = self.params[key]
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise ConfigError(f"defense 'mid': {key}={value!r}; allowed: a number or null")
        if self.params["lr"] is not None and not float(self.params["lr"]) > 0:
            raise ConfigError(f"defense 'mid': lr={self.params['lr']!r}; allowed: > 0")

    def shift(self, dataset: str) -> float:
        """sigma = softplus(s - shift): the given ``std_shift``, else the form's."""
        if self.params["std_shift"] is not None:
            return float(self.params["std_shift"])
        vflair = self.params["form"] == "vflair"
        return 5.0 if vflair and any(n in dataset for n in VFLAIR_SHIFT_DATASETS) else 0.5

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
                    vflair=self.params["form"] == "vflair",
                    shift=self.shift(cfg.dataset),
                )
                for _ in range(cfg.n_parties - 1)
            ]
        self.module = PassiveBottlenecks(blocks).to(party.device)
        active = cast("ActiveHost", party)  # MID is applied at the active party only
        active.top.add_transform(self.module)  # the released model applies it


DEFENSE = MutualInformationDefense
