"""Parties: plain Python, no Ray. The same objects run in-process or inside a PartyActor.

A ``Party`` holds only its own feature slice, its bottom model and optimizer. The
``ActiveParty`` also holds the labels and the global (top) model. A passive party is
built from a ``PartyInit`` whose ``labels`` is None, and has no attribute that could hold
them: the threat model is enforced by construction, and tests inspect it.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from trainables.endpoint import Endpoint
from trainables.errors import ConfigError
from trainables.messages import BatchRef, BatchSchedule, Message
from trainables.models import DefendedTop, build_bottom, build_top


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
    install: tuple[tuple[str, dict[str, Any], Any], ...] = ()
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

    def build(self, optimizer: bool = True) -> Party:
        """The party; ``optimizer=False`` leaves its optimizer to be built at first use (a
        stacked pack's members never step their own: ``vfl/vec_stack.py``)."""
        party = ActiveParty(self) if self.is_active else Party(self)
        if optimizer:
            party.optimizer  # noqa: B018  built now, off any training clock
        return party


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


def _make_optimizer(name: str, params: Sequence[nn.Parameter], lr: float) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.SGD(params, lr=lr)


class Party(Endpoint):
    """A passive party: bottom model G_k over its own features; sends H_k, receives dL/dH_k."""

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
                ).to(self.device)
        self.schedule = BatchSchedule(self.X_train.shape[0], cfg.batch_size, cfg.seed)
        super().__init__()  # the endpoint: an empty hook stack
        self._pending: tuple[BatchRef, torch.Tensor] | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._optimizer_params = self.trainable_parameters()  # what it steps, as built
        self._param_groups: list[list[nn.Parameter]] = []  # added by hooks (MID's bottlenecks)
        self.attach(init)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The party's optimizer, built at first use over the parameters it had when built.

        Why lazily: building a torch optimizer first imports ``torch._dynamo`` (~1.1 CPU-s
        in a fresh process), and a stacked pack's members never step their own
        (``PartyInit.build(optimizer=False)``); an actor or trainable that only trains
        stacks never pays it."""
        if self._optimizer is None:
            cfg = self.config
            self._optimizer = _make_optimizer(cfg.optimizer, self._optimizer_params, cfg.lr)
            for group in self._param_groups:
                self._optimizer.add_param_group({"params": group})
        return self._optimizer

    @optimizer.setter
    def optimizer(self, value: torch.optim.Optimizer) -> None:  # a wrapper (AMC) replaces it
        self._optimizer = value

    def add_parameters(self, params: list[nn.Parameter]) -> None:
        """A hook's own trained parameters (MID's bottlenecks) as one more group of the
        party's optimizer, without building it now (a stacked pack's members never do)."""
        if self._optimizer is not None:
            self._optimizer.add_param_group({"params": params})
        else:
            self._param_groups.append(params)

    @property
    def active_id(self) -> int:
        return self.config.n_parties - 1

    def trainable_parameters(self) -> list[nn.Parameter]:
        return list(self.bottom.parameters())

    def forward(self, ref: BatchRef) -> Message:
        """H_k = G_k(X_k[batch]) : (B, C), kept with its graph until the gradient comes back."""
        self.bottom.train()
        rows = torch.from_numpy(self.schedule.rows(ref)).to(self.device)
        h = self.bottom(self.X_train[rows])
        self._pending = (ref, h)
        out = Message.of("embedding", self.party_id, self.active_id, h.detach().cpu().numpy(), ref)
        return self.send_out(out)

    def backward(self, msg: Message) -> None:
        """Apply dL/dH_k: one step, then Q-1 more reusing the same (stale) gradient (FedBCD).

        A hook with ``after_backward`` (CELU-VFL's workset) then gets the exchange (rows,
        H_k as sent, dL/dH_k) and takes its own local steps on cached exchanges.
        """
        msg = self.receive_in(msg)
        if self._pending is None or self._pending[0] != msg.batch:
            raise RuntimeError(f"party {self.party_id}: gradient for {msg.batch} unexpected")
        ref, h = self._pending
        self._pending = None
        grad = as_tensor(msg.payload, self.device)
        rows = torch.from_numpy(self.schedule.rows(ref)).to(self.device)
        h_sent = h.detach()
        self.bottom.train()  # an evaluation (embed) may have run since the forward
        for step in range(self.config.local_steps):
            if step > 0:
                h = self.bottom(self.X_train[rows])
            self.optimizer.zero_grad(set_to_none=True)
            h.backward(grad)
            self.optimizer.step()
        for hook in self.hooks:
            after = getattr(hook, "after_backward", None)
            if after is not None:
                after(self, rows, h_sent, grad)

    def step(self, grad: Message | None, ref: BatchRef | None) -> Message | None:
        """One round in one call: apply round t's gradient, return round t+1's embedding.

        This keeps FedSGD's semantics (the update precedes the next forward) while a
        remote party costs one round trip per round.
        """
        if grad is not None:
            self.backward(grad)
        return None if ref is None else self.forward(ref)

    @torch.no_grad()
    def embed(self, split: str = "test") -> Message:
        """H_k for every row of ``split`` (``test``, ``val`` or ``train``; evaluation, no
        graph kept)."""
        self.bottom.eval()
        x = rows_of(self, split)
        h = self.bottom(x).cpu().numpy()
        return self.send_out(Message.of(f"{split}_embedding", self.party_id, self.active_id, h))


class ActiveParty(Party):
    """The label holder: its own bottom, the global model F, the loss, and the gradients."""

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
        self.loss_fn = nn.CrossEntropyLoss()
        self.last_loss = float("nan")
        self._stash: tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]] | None = None

    def trainable_parameters(self) -> list[nn.Parameter]:
        return list(self.bottom.parameters()) + list(self.top.parameters())

    def passive_gradients(self, ref: BatchRef, embeddings: Sequence[Message]) -> list[Message]:
        """Loss on the batch and dL/dH_k for each passive party, before any local update.

        Only the top model's backward runs here, so the gradients can leave at once and the
        passive parties work while ``update`` trains this party's own models. Defenses act
        on the loss (``objective``), on the gradients (``gradients`` hook) and on the
        messages (``on_send``).
        """
        if self._pending is None or self._pending[0] != ref:
            self.forward(ref)
        assert self._pending is not None
        _, h_own = self._pending
        self._pending = None
        self.top.train()
        h_passive = [
            as_tensor(self.receive_in(m).payload, self.device).requires_grad_() for m in embeddings
        ]  # (K-1) x (B, C)
        rows = torch.from_numpy(self.schedule.rows(ref)).to(self.device)
        y = self.y_train[rows]
        logits = self.top.logits([*h_passive, h_own])  # (B, C)
        loss = self.objective(logits, y, h_passive)
        grads = list(torch.autograd.grad(loss, h_passive, retain_graph=True)) if h_passive else []
        for defense in self.defenses:
            grads = defense.gradients(grads, logits, h_passive, y)
        self._stash = (rows, loss, [h.detach() for h in h_passive])
        return [
            self.send_out(Message.of("gradient", self.party_id, m.src, g.cpu().numpy(), ref))
            for m, g in zip(embeddings, grads, strict=True)
        ]

    def objective(
        self, logits: torch.Tensor, y: torch.Tensor, h_passive: Sequence[torch.Tensor]
    ) -> torch.Tensor:
        """Cross-entropy on the labels (or a defense's soft targets) plus defenses' terms."""
        soft = next(
            (t for d in self.defenses if (t := d.soft_targets(y)) is not None), None
        )  # (B, C) or None
        if soft is None:
            loss = self.loss_fn(logits, y)
        else:
            loss = -(soft * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
        for defense in self.defenses:
            term = defense.loss_term(list(h_passive), y)
            if term is not None:
                loss = loss + term
        return loss

    def update(self) -> None:
        """Update own bottom and top: the step on this batch's loss, then Q-1 FedBCD steps
        with fresh own embeddings and the stale passive ones."""
        rows, loss, h_passive = self._stash
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        for step in range(self.config.local_steps):
            if step > 0:
                logits = self.top.logits([*h_passive, self.bottom(self.X_train[rows])])
                loss = self.objective(logits, self.y_train[rows], h_passive)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward(inputs=params)
            self.optimizer.step()
        self.last_loss = float(loss.detach())
        self._stash = None

    @torch.no_grad()
    def evaluate(self, test_embeddings: Sequence[Message], split: str = "test") -> float:
        """Main-task performance on the ``split`` rows (``test``, or ``val``: the validation
        rows) from every party's embeddings of them: accuracy, or AUC where
        ``config.metric`` says so."""
        self.bottom.eval()
        self.top.eval()
        h_passive = [as_tensor(self.receive_in(m).payload, self.device) for m in test_embeddings]
        logits = self.top([*h_passive, self.bottom(rows_of(self, split))])
        y = self.y_val if split == "val" else self.y_test
        assert y is not None, "val rows are evaluated only where the trial has them"
        if self.config.metric == "auc":
            return binary_auc(logits, y)
        return float((logits.argmax(dim=1) == y).double().mean())


def rows_of(party: Any, split: str) -> torch.Tensor:
    """A party's (n, d_k) rows of ``split``: ``test``, ``val`` or ``train``; one stacked
    party's (K, n, d_k) likewise (``VecStack``)."""
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
