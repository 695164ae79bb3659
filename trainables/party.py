"""Parties: plain Python, no Ray. The same objects run in-process or inside a PartyActor.

A ``Party`` holds only its own feature slice, its bottom model and its hook chain. The
``ActiveParty`` also holds the labels and the global (top) model. A passive party is
built from a ``PartyInit`` whose ``labels`` is None, and has no attribute that could hold
them: the threat model is enforced by construction, and tests inspect it.

A party does not train itself: every training, a lone one too, runs on the stacked
form of its parties (``vfl/stacked_party.py``), which builds each training's models and hooks
here, trains them as one stack, and writes the trained weights back into these objects,
which the attack harness and the released model then read.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from trainables.endpoint import Endpoint
from trainables.errors import ConfigError
from trainables.messages import BatchSchedule
from trainables.models import DefendedTop, build_bottom, build_top, vflair_init


@dataclass(frozen=True)
class Labels:
    """What only the active party may hold."""

    y_train: np.ndarray  # (n_train,) int64, aligned with the party's X_train rows
    y_test: np.ndarray  # (n_test,) int64
    y_val: np.ndarray | None = None  # (n_val,) int64: the validation rows' (``val_ratio``)


@dataclass(frozen=True)
class PartyConfig:
    """How a party builds and trains its models; the same for every party of a trial."""

    model: str
    hidden: tuple[int, ...] | None
    dataset: str
    n_classes: int
    n_parties: int
    partition: str
    optimizer: str
    lr: float
    batch_size: int
    seed: int
    local_steps: int = 1  # Q of FedBCD; 1 is FedSGD
    device: str = "cpu"
    # width of each bottom's output H_k; None: n_classes (VFLAIR's bottoms). A pretrained
    # bottom (FedHSSL fine-tuning) outputs its representation width instead
    emb_dim: int | None = None
    metric: str = "accuracy"  # test MP: "accuracy", or "auc" (binary tasks, FedHSSL)
    lr_decay: str = "none"  # "inv_sqrt", "vflair": the epoch's factor (``stacked.lr_scale``)
    shuffle: bool = True  # False: batches in row order
    weight_init: str = "torch"  # "vflair": the bottom starts as VFLAIR's class (``vflair_init``)
    # keep each epoch's trained weights (``Party.epoch_states``): an attack scored over
    # epochs (``Attack.over_epochs``: VFLAIR's epoch means) judges every epoch's model
    keep_epochs: bool = False

    @property
    def emb_width(self) -> int:
        """The width of every party's H_k (what the top and MID's bottlenecks take)."""
        return self.n_classes if self.emb_dim is None else self.emb_dim


@dataclass(frozen=True)
class PartyInit:
    """Everything needed to build one party, and nothing more. Sent to its actor as is."""

    party_id: int
    X_train: np.ndarray  # (n_train, d_k) float32, scaled, rows in the shared aligned order
    X_test: np.ndarray  # (n_test, d_k) float32
    config: PartyConfig
    labels: Labels | None = None  # set for the active party only
    columns: tuple[int, ...] = field(default=())  # which dataset columns this party holds
    record: bool = False  # keep a log of sent/received messages (attacks read it)
    # training-time attacks on this party: (name, params, the aux knowledge it is granted)
    install: tuple[tuple[str, dict[str, Any], object], ...] = ()
    # message hooks built at the party from a registry: (family, name, params), in stack
    # order; families: see ``HOOK_FAMILIES`` ("defense", "codec")
    hooks: tuple[tuple[str, str, dict[str, Any]], ...] = ()
    # a trained bottom to start from (FedHSSL's pretrained encoder); None: a fresh one from
    # ``config.model``. The party trains a copy: the init stays as it was
    bottom: nn.Module | None = None
    # (n_val, d_k) float32: the validation rows (``val_ratio``), in the same order at every
    # party; None: the trial has none
    X_val: np.ndarray | None = None

    @property
    def is_active(self) -> bool:
        return self.labels is not None

    def build(self) -> Party:
        """The party: its data, models and hooks (``vfl/stacked_party.py`` trains them)."""
        return ActiveParty(self) if self.is_active else Party(self)


def seed_cpu(seed: int) -> None:
    """``torch.manual_seed`` for the CPU generator only (what model init draws from).

    Why not ``torch.manual_seed``: it also queues a lazy seed for CUDA, XPU and MTIA, each
    with a formatted stack trace, ~1.7 ms a call here; a party build seeds once or twice
    and a pack builds hundreds. The CPU generator ends in the same state.
    """
    torch.default_generator.manual_seed(int(seed))


def as_tensor(payload: object, device: torch.device) -> torch.Tensor:
    """A received payload as a tensor; copies read-only buffers (Ray hands those out)."""
    arr = np.asarray(payload)
    if not arr.flags.writeable:
        arr = arr.copy()
    return torch.from_numpy(arr).to(device)


def resolve_device(device: str) -> torch.device:
    """``auto`` takes the GPU Ray made visible to this actor, if any."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device='cuda' but no CUDA device is visible here; use cpu or auto")
    return torch.device(device)


class Party(Endpoint):
    """A passive party: its own feature slice, its bottom model G_k (H_k = G_k(X_k)) and its
    hook chain; trained on its stacked form (``StackedParty``), which writes the weights back."""

    def __init__(self, init: PartyInit) -> None:
        cfg = init.config
        self.party_id = init.party_id
        self.config = cfg
        self.device = resolve_device(cfg.device)
        self.X_train = torch.from_numpy(np.array(init.X_train, dtype=np.float32)).to(self.device)
        self.X_test = torch.from_numpy(np.array(init.X_test, dtype=np.float32)).to(self.device)
        self.X_val = (
            None
            if init.X_val is None
            else torch.from_numpy(np.array(init.X_val, dtype=np.float32)).to(self.device)
        )
        if init.bottom is not None:
            self.bottom = copy.deepcopy(init.bottom).to(self.device)
        else:
            with torch.random.fork_rng(devices=[]):
                seed_cpu(cfg.seed * 1009 + init.party_id)
                self.bottom = build_bottom(
                    cfg.model, self.X_train.shape[1], cfg.n_classes, cfg.hidden, cfg.dataset
                )
                if cfg.weight_init == "vflair":
                    vflair_init(cfg.model, self.bottom)
                self.bottom.to(self.device)
        self.schedule = BatchSchedule(
            self.X_train.shape[0], cfg.batch_size, cfg.seed, shuffle=cfg.shuffle
        )
        # the weights after each epoch but the last (``keep_epochs``), as module states
        self.epoch_states: list[dict[str, Any]] = []
        super().__init__()  # the endpoint: an empty hook chain
        self.attach(init)

    @property
    def active_id(self) -> int:
        return self.config.n_parties - 1

    def trainable_parameters(self) -> list[nn.Parameter]:
        return list(self.bottom.parameters())


class ActiveParty(Party):
    """The label holder: its own bottom, the global model F and the labels."""

    def __init__(self, init: PartyInit) -> None:
        assert init.labels is not None
        cfg = init.config
        with torch.random.fork_rng(devices=[]):
            seed_cpu(cfg.seed * 1009 + 977)
            self.top = DefendedTop(
                build_top(cfg.partition, cfg.n_parties, cfg.n_classes, cfg.emb_dim)
            )
        self.defenses: list[Any] = []  # defenses attached here, in stack order
        super().__init__(init)
        self.top.to(self.device)
        self.y_train = torch.from_numpy(np.array(init.labels.y_train, dtype=np.int64)).to(
            self.device
        )
        self.y_test = torch.from_numpy(np.array(init.labels.y_test, dtype=np.int64)).to(self.device)
        y_val = init.labels.y_val
        self.y_val = (
            None if y_val is None else torch.from_numpy(y_val.astype(np.int64)).to(self.device)
        )
        self.last_loss = float("nan")  # its training's last loss (``StackedParty.parties_of``)

    def trainable_parameters(self) -> list[nn.Parameter]:
        return list(self.bottom.parameters()) + list(self.top.parameters())


class HasRows(Protocol):
    """A party's rows, or a stacked party's (K, n, d_k)."""

    X_train: torch.Tensor
    X_test: torch.Tensor
    X_val: torch.Tensor | None


def rows_of(party: HasRows, split: str) -> torch.Tensor:
    """A party's (n, d_k) rows of ``split``: ``test``, ``val`` or ``train``; one stacked
    party's (K, n, d_k) likewise (``StackedParty``)."""
    x = {"test": party.X_test, "val": party.X_val, "train": party.X_train}[split]
    if x is None:
        raise ValueError(f"no {split} rows here: the trial's val_ratio is 0")
    return x


def binary_auc(logits: torch.Tensor, y: torch.Tensor) -> float:
    """AUC of class-1 probabilities from (N, 2) logits against (N,) labels; NaN when the
    rows hold one class only (no ranking to score)."""
    from sklearn.metrics import roc_auc_score

    if len(torch.unique(y)) < 2:
        return float("nan")
    scores = torch.softmax(logits, dim=1)[:, 1]
    return float(roc_auc_score(y.cpu().numpy(), scores.cpu().numpy()))
