"""Bottom models (one per party) and the global top model (at the active party).

VFLAIR's main-task models (ALGORITHMS.md): LR, MLP-2 (I-32-C), MLP-3 (I-200-100-C),
MLP-4 (I-64-128-64-C on adult, I-100-50-20-C on credit). Each bottom maps a party's
features to C logits, so aggVFL can sum them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from trainables.errors import ConfigError
from trainables.registry import FactoryRegistry

BOTTOMS: FactoryRegistry[nn.Module] = FactoryRegistry("model")  # bottom builders

# Default hidden widths per (model, dataset); "*" applies to any dataset.
DEFAULT_HIDDEN: dict[str, dict[str, tuple[int, ...]]] = {
    "lr": {"*": ()},
    "mlp2": {"*": (32,)},
    "mlp3": {"*": (200, 100)},
    "mlp4": {"*": (64, 128, 64), "credit": (100, 50, 20)},
}


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int) -> nn.Sequential:
    """Linear-ReLU stack: (N, in_dim) -> (N, out_dim); no activation on the output."""
    layers: list[nn.Module] = []
    width = in_dim
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)


def _fixed_depth(name: str, depth: int) -> None:
    def build(in_dim: int, out_dim: int, hidden: Sequence[int]) -> nn.Module:
        if len(hidden) != depth - 1:
            raise ConfigError(
                f"model {name!r} needs {depth - 1} hidden widths, got hidden={tuple(hidden)}"
            )
        return mlp(in_dim, hidden, out_dim)

    BOTTOMS.register(name, build)


for _name, _depth in (("lr", 1), ("mlp2", 2), ("mlp3", 3), ("mlp4", 4)):
    _fixed_depth(_name, _depth)


def default_hidden(model: str, dataset: str) -> tuple[int, ...]:
    BOTTOMS.get(model)  # unknown model -> ConfigError with the known names
    table = DEFAULT_HIDDEN.get(model, {"*": ()})
    return table.get(dataset, table["*"])


def vflair_init(model: str, bottom: nn.Module) -> None:
    """Re-initialise ``bottom`` in place as VFLAIR's class of ``model`` starts (its
    ``models/mlp.py``), drawing from the default CPU generator.

    Why: VFLAIR's ``MLP2`` sets its first layer Xavier-uniform with a zero bias; ours (and
    VFLAIR's other MLPs) keep PyTorch's default, U(±1/√fan_in) for weights and biases.
    On MNIST's 392 → 32 layer Xavier's bound, √(6 / (392 + 32)) = 0.119, is 2.4× the
    default's 0.051, which changes how strongly a bottom answers inputs far from its
    data (NSB's noisy rows). Other models start as PyTorch starts them on both sides.
    """
    if model != "mlp2":
        return
    first = next(m for m in bottom.modules() if isinstance(m, nn.Linear))
    with torch.no_grad():
        nn.init.xavier_uniform_(first.weight)
        nn.init.zeros_(first.bias)


def build_bottom(
    model: str, in_dim: int, out_dim: int, hidden: Sequence[int] | None, dataset: str
) -> nn.Module:
    widths = default_hidden(model, dataset) if hidden is None else tuple(hidden)
    return BOTTOMS.create(model, in_dim, out_dim, widths)


class AggTop(nn.Module):
    """aggVFL's global model: the sum of the parties' logits (softmax lives in the loss)."""

    trainable = False

    def forward(self, embeddings: Sequence[torch.Tensor]) -> torch.Tensor:
        # K x (N, C) -> (N, C)
        return torch.stack(list(embeddings), dim=0).sum(dim=0)


class SplitTop(nn.Module):
    """splitVFL's global model: one trainable fully connected layer over concat(H_1..H_K)."""

    trainable = True

    def __init__(self, n_parties: int, emb_dim: int, n_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(n_parties * emb_dim, n_classes)

    def forward(self, embeddings: Sequence[torch.Tensor]) -> torch.Tensor:
        # K x (N, C) -> (N, K*C) -> (N, C)
        return self.fc(torch.cat(list(embeddings), dim=1))


def build_top(
    partition: str, n_parties: int, n_classes: int, emb_dim: int | None = None
) -> nn.Module:
    """The global model; ``emb_dim``: width of each H_k when it is not ``n_classes`` (split
    only: FedHSSL's linear head over concat(H_1..H_K) of pretrained representations)."""
    if partition == "agg":
        if emb_dim is not None and emb_dim != n_classes:
            raise ConfigError(f"aggVFL sums logits: emb_dim={emb_dim} must be n_classes")
        return AggTop()
    if partition == "split":
        return SplitTop(n_parties, n_classes if emb_dim is None else emb_dim, n_classes)
    raise ConfigError(f"partition={partition!r} is not one of: agg, split")


class DefendedTop(nn.Module):
    """The global model as the active party applies it, with its defenses' model hooks.

    ``logits`` (training): passive embeddings through the defenses' transforms (MID's
    bottlenecks), then the top. ``forward`` (evaluation, attacks, the released model):
    the same, then the output decoder if a defense set one (CAE's D), so everything that
    judges or queries the model sees what the defended system really outputs.
    """

    def __init__(self, top: nn.Module) -> None:
        super().__init__()
        self.base = top
        self.transforms = nn.ModuleList()  # each: [H_0..H_{K-2}] -> same shapes
        self.decoder: nn.Module | None = None

    @property
    def trainable(self) -> bool:
        return bool(getattr(self.base, "trainable", False)) or len(self.transforms) > 0

    def add_transform(self, module: nn.Module) -> None:
        self.transforms.append(module)

    def set_decoder(self, module: nn.Module) -> None:
        if self.decoder is not None:
            raise ConfigError("two defenses both decode the model's output; stack only one")
        self.decoder = module

    def logits(self, embeddings: Sequence[torch.Tensor]) -> torch.Tensor:
        """K x (N, C) -> (N, C): the raw scores the training loss is computed on."""
        passive, own = list(embeddings[:-1]), embeddings[-1]
        for transform in self.transforms:
            passive = transform(passive)
        return self.base([*passive, own])

    def forward(self, embeddings: Sequence[torch.Tensor]) -> torch.Tensor:
        out = self.logits(embeddings)
        return out if self.decoder is None else self.decoder(out)
