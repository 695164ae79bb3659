"""Ray-free FedHSSL parties: pretraining (cross-party SSL, guided local SSL, PMA shares)
and split-VFL fine-tuning, exchanging ``Message``s only.

Why plain classes with an ``SSLPartyInit.build()``: the generic ``PartyActor`` hosts any
init object with ``build()``; the same party code then runs in-process (tests) or one
party per Ray actor (``pretrain.Wire``). Party ``K-1`` is active: only it holds labels
(``HSSLLabels``) and the fine-tuning head. What leaves a party goes through its hooks
(defenses such as ISO, and a ``MessageLog`` when recording), as in ``trainables.party``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from trainables.hooks import MessageLog
from trainables.messages import BatchRef, BatchSchedule, Message
from trainables.party import receive_through, send_through
from trainables.ssl.hssl import byol as _byol  # noqa: F401  (registers the methods)
from trainables.ssl.hssl import moco as _moco  # noqa: F401
from trainables.ssl.hssl import simsiam as _simsiam  # noqa: F401
from trainables.ssl.hssl.augment import ImageLayout, TabularLayout, make_view, with_mask_columns
from trainables.ssl.hssl.base import SSL_METHODS, SSLMethod, Tower, Widths

SERVER = -1  # the aggregation server's id: not a party


@dataclass(frozen=True)
class HSSLConfig:
    """How every party of a trial pretrains and fine-tunes (the same for all parties)."""

    method: str  # simsiam | byol | moco
    towers: tuple[str, ...]  # fine-tuning encoder: ("local",), ("cross",), ("cross", "local")
    n_parties: int
    n_classes: int
    widths: Widths
    seed: int
    gamma: float = 0.5
    pretrain_batch: int = 512
    ft_batch: int = 512
    queue: int = 4096
    tau: float = 0.5


@dataclass(frozen=True)
class HSSLLabels:
    """What only the active party holds: labels of the labeled aligned rows and the test."""

    y_labeled: np.ndarray  # (n_labeled,) int64, in the order of ``labeled``
    y_test: np.ndarray  # (n_test,) int64


@dataclass(frozen=True)
class SSLPartyInit:
    party_id: int
    config: HSSLConfig
    X_local: np.ndarray  # (n_local, d) scaled; the first n_aligned rows are the aligned ones
    n_aligned: int
    X_test: np.ndarray  # (n_test, d)
    layout: TabularLayout | ImageLayout
    labeled: np.ndarray  # (n_labeled,) positions of the labeled rows among the aligned ones
    labels: HSSLLabels | None = None
    defenses: tuple[tuple[str, dict[str, Any]], ...] = ()
    record: bool = False

    def build(self) -> SSLParty:
        return SSLActiveParty(self) if self.labels is not None else SSLParty(self)


def make_method(cfg: HSSLConfig, salt: int) -> SSLMethod:
    if cfg.method == "moco":
        return SSL_METHODS.create(  # type: ignore[return-value]
            "moco", cfg.widths.proj_out, cfg.queue, cfg.tau, cfg.seed * 131 + salt
        )
    return SSL_METHODS.create(cfg.method)  # type: ignore[return-value]


class FTEncoder(nn.Module):
    """The fine-tuned encoder: concatenated representations of the chosen towers."""

    def __init__(self, towers: list[Tower]) -> None:
        super().__init__()
        self.parts = nn.ModuleList([nn.Sequential(t.bottom, t.top) for t in towers])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, d') -> (N, emb * n_towers)
        return torch.cat([p(x) for p in self.parts], dim=1)


class SSLParty:
    """A passive party (and the base of the active one)."""

    def __init__(self, init: SSLPartyInit) -> None:
        from trainables.defenses import DEFENSES

        cfg = init.config
        self.party_id = init.party_id
        self.config = cfg
        self.layout = init.layout
        self.n_aligned = init.n_aligned
        self.labeled = np.asarray(init.labeled)
        self.X_local = torch.tensor(init.X_local, dtype=torch.float32)  # (n_local, d)
        self.X_test = torch.tensor(init.X_test, dtype=torch.float32)
        self.gen = torch.Generator().manual_seed(cfg.seed * 7 + 1000 * (init.party_id + 1))
        in_dim = self.X_local.shape[1] + (
            init.layout.n_extra if isinstance(init.layout, TabularLayout) else 0
        )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed * 1009 + 17 * init.party_id)
            self.cross = Tower(in_dim, cfg.widths, make_method(cfg, 2 * init.party_id))
            self.local = Tower(in_dim, cfg.widths, make_method(cfg, 2 * init.party_id + 1))
        self.opt_cross = torch.optim.Adam(self._params(self.cross), lr=1e-3)
        self.opt_local = torch.optim.Adam(self._params(self.local), lr=1e-3)
        self.hooks: list[Any] = [DEFENSES.create(name, **params) for name, params in init.defenses]
        if init.record:
            self.hooks.append(MessageLog())
        self.ft_encoder: nn.Module | None = None
        self._h: torch.Tensor | None = None

    @staticmethod
    def _params(tower: Tower) -> list[nn.Parameter]:
        return [p for p in tower.parameters() if p.requires_grad]

    # -- messages -----------------------------------------------------------------------
    def send(self, msg: Message) -> Message:
        return send_through(self.hooks, self, msg)

    def receive(self, msg: Message) -> Message:
        return receive_through(self.hooks, self, msg)

    def defense_applied(self) -> list[dict[str, Any]]:
        """How often each defense here changed a message (``trainables.defenses.applied``)."""
        from trainables.defenses.applied import party_reports

        return party_reports(self.hooks)

    def log(self) -> MessageLog | None:
        return next((h for h in self.hooks if isinstance(h, MessageLog)), None)

    def wide(self, x: torch.Tensor) -> torch.Tensor:
        return with_mask_columns(x, self.layout)

    # -- step 1: cross-party SSL on aligned rows ------------------------------------------
    def _aligned_rows(self, ref: BatchRef) -> torch.Tensor:
        sched = BatchSchedule(self.n_aligned, self.config.pretrain_batch, self.config.seed)
        return self.X_local[torch.as_tensor(sched.rows(ref))]

    def cross_send(self, ref: BatchRef) -> list[Message]:
        """The target representation z~ (B, P) of this batch, to the peer(s) of Eq. (5)."""
        z = self.cross.target_z(self.wide(self._aligned_rows(ref))).numpy()
        active = self.config.n_parties - 1
        dsts = range(active) if self.party_id == active else [active]
        return [self.send(Message.of("representation", self.party_id, d, z, ref)) for d in dsts]

    def cross_update(self, ref: BatchRef, inbox: list[Message]) -> float:
        """One step of L_cross (Eq. 5) against the received representations; no gradient
        leaves: the received z are constants here."""
        x = self.wide(self._aligned_rows(ref))
        targets = [torch.as_tensor(np.asarray(self.receive(m).payload)) for m in inbox]
        _, p = self.cross(x)
        loss = torch.stack([self.cross.method.loss(p, t) for t in targets]).mean()
        self.opt_cross.zero_grad(set_to_none=True)
        loss.backward()
        self.opt_cross.step()
        self.cross.update_target()
        for t in targets:
            self.cross.method.observe(t)
        return float(loss.detach())

    # -- step 2: (guided) local SSL on all local rows --------------------------------------
    def local_epoch(self, epoch: int, gamma: float) -> float:
        """One epoch of Eq. (6) (gamma 0: plain local SSL, FedLocal) over the local rows."""
        n = len(self.X_local)
        sched = BatchSchedule(n, self.config.pretrain_batch, self.config.seed + 31 * self.party_id)
        method = self.local.method
        losses = []
        for ref in sched.refs(epoch):
            x = self.X_local[torch.as_tensor(sched.rows(ref))]
            v1, v2 = make_view(x, self.layout, self.gen), make_view(x, self.layout, self.gen)
            (_, p1), (_, p2) = self.local(v1), self.local(v2)
            t1, t2 = self.local.target_z(v1), self.local.target_z(v2)
            loss = 0.5 * (method.loss(p1, t2) + method.loss(p2, t1))
            if gamma > 0:
                with torch.no_grad():
                    c1 = self.cross.projector(self.cross.represent(v1))
                    c2 = self.cross.projector(self.cross.represent(v2))
                loss = loss + gamma * (method.loss(p1, c1) + method.loss(p2, c2))
            self.opt_local.zero_grad(set_to_none=True)
            loss.backward()
            self.opt_local.step()
            self.local.update_target()
            method.observe(torch.cat([t1, t2]))
            losses.append(float(loss.detach()))
        return float(np.mean(losses))

    # -- step 3: partial model aggregation (the server averages, parties load) -----------
    def shared_state(self) -> Message:
        """This party's local top encoder + predictor, to the server."""
        state = {
            f"{name}.{key}": value.detach().numpy().copy()
            for name, module in self.local.shared_modules().items()
            for key, value in module.state_dict().items()
        }
        nbytes = int(sum(a.nbytes for a in state.values()))
        return Message("model_share", self.party_id, SERVER, state, nbytes)

    def load_shared(self, msg: Message) -> bool:
        for name, module in self.local.shared_modules().items():
            prefix = f"{name}."
            part = {k[len(prefix) :]: torch.as_tensor(v) for k, v in msg.payload.items()
                    if k.startswith(prefix)}  # fmt: skip
            if part:
                module.load_state_dict(part)
        return True

    def weights(self) -> dict[str, np.ndarray]:
        """Every pretraining parameter by name (tests: determinism, PMA)."""
        out = {}
        for tower_name in ("cross", "local"):
            tower = getattr(self, tower_name)
            for key, value in tower.state_dict().items():
                out[f"{tower_name}.{key}"] = value.detach().numpy().copy()
        return out

    # -- fine-tuning ------------------------------------------------------------------
    def pretrained_encoder(self) -> nn.Module:
        """A copy of the encoder fine-tuning starts from (MC on the pretrained model)."""
        return _Wrapped(copy.deepcopy(FTEncoder([getattr(self, t) for t in self.config.towers])),
                        self.layout)  # fmt: skip

    def finetuned_encoder(self) -> nn.Module:
        assert self.ft_encoder is not None, "fine-tune first"
        return _Wrapped(copy.deepcopy(self.ft_encoder), self.layout)

    def ft_reset(self, lr: float, rows: np.ndarray, salt: int) -> bool:
        """Start fine-tuning from the pretrained encoder on ``rows`` (positions among the
        aligned rows), with Adam at ``lr``."""
        self.ft_rows = np.asarray(rows)
        self.ft_encoder = FTEncoder([getattr(self, t) for t in self.config.towers])
        self.ft_encoder = copy.deepcopy(self.ft_encoder)
        self.ft_sched = BatchSchedule(len(self.ft_rows), self.config.ft_batch,
                                      self.config.seed * 97 + salt)  # fmt: skip
        self.ft_opt = torch.optim.Adam(self._ft_params(lr, salt), lr=lr)
        return True

    def _ft_params(self, lr: float, salt: int) -> list[nn.Parameter]:
        return list(self.ft_encoder.parameters())  # type: ignore[union-attr]

    def _ft_x(self, ref: BatchRef) -> torch.Tensor:
        rows = self.ft_rows[self.ft_sched.rows(ref)]
        return self.wide(self.X_local[torch.as_tensor(rows)])

    def ft_forward(self, ref: BatchRef) -> Message:
        """H_k (B, E) of this batch, up to the active party; the graph stays here."""
        assert self.ft_encoder is not None
        self._h = self.ft_encoder(self._ft_x(ref))
        msg = Message.of("embedding", self.party_id, self.config.n_parties - 1,
                         self._h.detach().numpy(), ref)  # fmt: skip
        return self.send(msg)

    def ft_backward(self, msg: Message) -> bool:
        """Apply dL/dH_k received from the active party."""
        assert self._h is not None
        grad = torch.as_tensor(np.asarray(self.receive(msg).payload))
        self.ft_opt.zero_grad(set_to_none=True)
        self._h.backward(grad)
        self.ft_opt.step()
        self._h = None
        return True

    @torch.no_grad()
    def ft_embed(self, split: str, rows: np.ndarray | None = None) -> Message:
        """Representations of the test rows, or of ``rows`` among the aligned rows (val)."""
        assert self.ft_encoder is not None
        x = self.X_test if split == "test" else self.X_local[torch.as_tensor(rows)]
        h = self.ft_encoder(self.wide(x)).numpy()
        msg = Message.of(f"{split}_embedding", self.party_id, self.config.n_parties - 1, h)
        return self.send(msg)


class _Wrapped(nn.Module):
    """An encoder on clean features: adds the (all-zero) mask-token columns first."""

    def __init__(self, encoder: nn.Module, layout: TabularLayout | ImageLayout) -> None:
        super().__init__()
        self.encoder = encoder
        self.layout = layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(with_mask_columns(x, self.layout))


class SSLActiveParty(SSLParty):
    """Party K-1: also holds the labels and the classifier g over concat(H_1..H_K)."""

    def __init__(self, init: SSLPartyInit) -> None:
        super().__init__(init)
        assert init.labels is not None
        self.y_labeled = torch.tensor(init.labels.y_labeled, dtype=torch.int64)
        self.y_test = torch.tensor(init.labels.y_test, dtype=torch.int64)
        self.head: nn.Module | None = None

    def _ft_params(self, lr: float, salt: int) -> list[nn.Parameter]:
        cfg = self.config
        width = cfg.widths.emb * len(cfg.towers) * cfg.n_parties
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed * 7919 + salt)
            self.head = nn.Linear(width, cfg.n_classes)
        return [*super()._ft_params(lr, salt), *self.head.parameters()]

    def ft_step(self, ref: BatchRef, inbox: list[Message]) -> list[Message]:
        """Loss on concat(H_passives, H_own); returns dL/dH_k for each passive party."""
        assert self.ft_encoder is not None and self.head is not None
        hs = [torch.as_tensor(np.asarray(self.receive(m).payload)).requires_grad_(True)
              for m in inbox]  # fmt: skip
        own = self.ft_encoder(self._ft_x(ref))
        y = self.y_labeled[torch.as_tensor(self.ft_pos[self.ft_sched.rows(ref)])]
        loss = F.cross_entropy(self.head(torch.cat([*hs, own], dim=1)), y)
        self.ft_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.ft_opt.step()
        return [self.send(Message.of("gradient", self.party_id, k, h.grad.numpy(), ref))  # type: ignore[union-attr]
                for k, h in enumerate(hs)]  # fmt: skip

    def ft_reset(self, lr: float, rows: np.ndarray, salt: int) -> bool:
        # positions of ``rows`` within the labeled rows (to look up their labels)
        where = {int(r): i for i, r in enumerate(self.labeled)}
        self.ft_pos = np.asarray([where[int(r)] for r in rows], dtype=np.int64)
        return super().ft_reset(lr, rows, salt)

    @torch.no_grad()
    def ft_score(self, split: str, inbox: list[Message], rows: np.ndarray | None = None) -> float:
        """MP on the test rows, or on ``rows`` (labeled validation rows): AUC for binary
        tasks, accuracy otherwise."""
        assert self.ft_encoder is not None and self.head is not None
        hs = [torch.as_tensor(np.asarray(self.receive(m).payload)) for m in inbox]
        x = self.X_test if split == "test" else self.X_local[torch.as_tensor(rows)]
        if split == "test":
            y = self.y_test
        else:
            where = {int(r): i for i, r in enumerate(self.labeled)}
            y = self.y_labeled[torch.as_tensor([where[int(r)] for r in rows])]  # type: ignore[union-attr]
        logits = self.head(torch.cat([*hs, self.ft_encoder(self.wide(x))], dim=1))
        return metric(logits, y, self.config.n_classes)


def metric(logits: torch.Tensor, y: torch.Tensor, n_classes: int) -> float:
    """AUC (binary) or accuracy (multi-class) of (N, C) logits against (N,) labels."""
    if n_classes == 2:
        from sklearn.metrics import roc_auc_score

        if len(torch.unique(y)) < 2:
            return float("nan")
        return float(roc_auc_score(y.numpy(), torch.softmax(logits, dim=1)[:, 1].numpy()))
    return float((logits.argmax(dim=1) == y).float().mean())
