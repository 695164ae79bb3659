"""Ray-free FedHSSL pretraining parties and the aggregation server.

Why plain classes with a ``build()``-able init: ``open_parties`` hosts any init object with
``build()``; the same code then runs in-process or one party per actor. Pretraining is
label-free: no pretraining party holds a label (fine-tuning runs on ordinary
``trainables.party`` parties whose bottoms start from ``SSLParty.pretrained_encoder``).
Party ``K-1`` is the one that becomes active in fine-tuning; in cross-party SSL it sends
its representation to every passive party and hears from each. What leaves a party goes
through its hooks (defenses that act on representations, such as ISO, and a
``MessageLog`` when recording), attached in the one order every party uses
(``trainables/endpoint.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from trainables.endpoint import Endpoint
from trainables.messages import BatchRef, BatchSchedule, Message
from trainables.ssl.hssl import byol as _byol  # noqa: F401  (registers the methods)
from trainables.ssl.hssl import moco as _moco  # noqa: F401
from trainables.ssl.hssl import simsiam as _simsiam  # noqa: F401
from trainables.ssl.hssl.augment import ImageLayout, TabularLayout, make_view, with_mask_columns
from trainables.ssl.hssl.base import SSL_METHODS, SSLMethod, Tower, Widths

if TYPE_CHECKING:
    from trainables.protocols.base import HookEntry

SERVER = -1  # the aggregation server's id in messages: not a party


@dataclass(frozen=True)
class HSSLConfig:
    """How every party of a trial pretrains (the same for all parties)."""

    method: str  # simsiam | byol | moco
    towers: tuple[str, ...]  # fine-tuning encoder: ("local",), ("cross",), ("cross", "local")
    n_parties: int
    widths: Widths
    seed: int
    pretrain_batch: int = 512
    queue: int = 4096
    tau: float = 0.5


@dataclass(frozen=True)
class SSLPartyInit:
    """One pretraining party: its own rows and layout, no labels."""

    party_id: int
    config: HSSLConfig
    X_local: np.ndarray  # (n_local, d) scaled; the first n_aligned rows are the aligned ones
    n_aligned: int
    layout: TabularLayout | ImageLayout
    record: bool = False  # keep a log of the messages it sends and receives
    install: tuple[tuple[str, dict[str, object], object], ...] = ()  # none: the kind refuses them
    # message hooks as in ``PartyInit.hooks``: (family, name, params), in stack order
    hooks: tuple[HookEntry, ...] = ()

    def build(self) -> SSLParty:
        return SSLParty(self)


def make_method(cfg: HSSLConfig, salt: int) -> SSLMethod:
    if cfg.method == "moco":
        return SSL_METHODS.create(
            "moco", cfg.widths.proj_out, cfg.queue, cfg.tau, cfg.seed * 131 + salt
        )
    return SSL_METHODS.create(cfg.method)


class FTEncoder(nn.Module):
    """The fine-tuned encoder: concatenated representations of the chosen towers."""

    def __init__(self, towers: list[Tower]) -> None:
        super().__init__()
        self.parts = nn.ModuleList([nn.Sequential(t.bottom, t.top) for t in towers])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, d') -> (N, emb * n_towers)
        return torch.cat([p(x) for p in self.parts], dim=1)


class Wrapped(nn.Module):
    """An encoder on clean features: adds the (all-zero) mask-token columns first."""

    def __init__(self, encoder: nn.Module, layout: TabularLayout | ImageLayout) -> None:
        super().__init__()
        self.encoder = encoder
        self.layout = layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, d) -> (N, emb * n_towers)
        return self.encoder(with_mask_columns(x, self.layout))


class SSLParty(Endpoint):
    """A pretraining party: a cross-party and a local two-tower network on its own rows."""

    def __init__(self, init: SSLPartyInit) -> None:
        super().__init__()
        cfg = init.config
        self.party_id = init.party_id
        self.config = cfg
        self.layout = init.layout
        self.n_aligned = init.n_aligned
        self.X_local = torch.tensor(init.X_local, dtype=torch.float32)  # (n_local, d)
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
        self.attach(init)  # message log, then its hooks (``Endpoint``)
        self._z: tuple[BatchRef, np.ndarray] | None = None

    @staticmethod
    def _params(tower: Tower) -> list[nn.Parameter]:
        return [p for p in tower.parameters() if p.requires_grad]

    # -- messages -----------------------------------------------------------------------
    def send(self, msg: Message) -> Message:
        return self.send_out(msg)

    def receive(self, msg: Message) -> Message:
        return self.receive_in(msg)

    def wide(self, x: torch.Tensor) -> torch.Tensor:
        return with_mask_columns(x, self.layout)

    # -- step 1: cross-party SSL on aligned rows ------------------------------------------
    def _aligned_rows(self, ref: BatchRef) -> torch.Tensor:
        sched = BatchSchedule(self.n_aligned, self.config.pretrain_batch, self.config.seed)
        return self.X_local[torch.as_tensor(sched.rows(ref))]

    def cross_send(self, ref: BatchRef, dst: int) -> Message:
        """The target representation z~ (B, P) of this batch, to party ``dst`` (Eq. 5).

        Computed once per batch (the active party sends the same z~ to every passive
        party); each copy goes out through the hooks on its own, as a message to one peer.
        """
        if self._z is None or self._z[0] != ref:
            z = self.cross.target_z(self.wide(self._aligned_rows(ref)))  # (B, P)
            self._z = (ref, z.numpy())
        return self.send(Message.of("representation", self.party_id, dst, self._z[1], ref))

    def cross_update(self, ref: BatchRef, *inbox: Message) -> float:
        """One step of L_cross (Eq. 5) against the received representations; no gradient
        leaves: the received z are constants here."""
        x = self.wide(self._aligned_rows(ref))
        targets = [torch.as_tensor(np.array(self.receive(m).payload)) for m in inbox]
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
            loss, (p1, p2), (t1, t2) = self.local.two_view_loss(v1, v2)
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
        """This party's local top encoder + projector + predictor, to the server, through its
        hooks (ISO's ``lambda_p`` noises the active party's share)."""
        state = {
            f"{name}.{key}": value.detach().numpy().copy()
            for name, module in self.local.shared_modules().items()
            for key, value in module.state_dict().items()
        }
        nbytes = int(sum(a.nbytes for a in state.values()))
        return self.send(Message("model_share", self.party_id, SERVER, state, nbytes))

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

    def pretrained_encoder(self) -> nn.Module:
        """A copy of the encoder fine-tuning starts from, on clean features:
        (N, d) -> (N, emb * n_towers)."""
        towers = [getattr(self, t) for t in self.config.towers]
        return Wrapped(copy.deepcopy(FTEncoder(towers)), self.layout)


@dataclass(frozen=True)
class ServerInit:
    """The aggregation server of step 3: no data, no bottom model, no labels."""

    n_parties: int

    def build(self) -> AggregationServer:
        return AggregationServer(self.n_parties)


class AggregationServer(Endpoint):
    """Averages what the parties share (FedAvg, equal weights as in Algorithm 1) and
    addresses the average back to each of them."""

    def __init__(self, n_parties: int) -> None:
        super().__init__()  # a server with no hooks: nothing to apply or report
        self.n_parties = n_parties

    def aggregate(self, *shares: Message) -> list[Message]:
        """K ``model_share`` messages -> K ``model_avg`` messages (one per party)."""
        assert len(shares) == self.n_parties and all(s.dst == SERVER for s in shares)
        avg = mean_state([s.payload for s in shares])
        nbytes = int(sum(a.nbytes for a in avg.values()))
        return [Message("model_avg", SERVER, k, avg, nbytes) for k in range(self.n_parties)]


def mean_state(states: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Element-wise mean of state dicts with the same keys."""
    return {k: np.mean([s[k] for s in states], axis=0) for k in states[0]}
