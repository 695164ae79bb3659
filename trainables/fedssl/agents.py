"""FedSSL's parties: support agents, query agents and the server, each Ray-free.

Why frozen inits with ``build()``: ``open_parties`` builds each party where it runs (in
this process or in its own actor) from exactly what its init carries. A support agent's
init carries its labeled rows and their labels only; a query agent's its unlabeled rows
only; the server's no rows at all: the initial model vector and the DP budget. Agents
never see one another: every model vector goes through the driver's transport.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as nnf

from trainables.endpoint import Endpoint
from trainables.fedssl.dp import PrivacyLedger, PrivateG
from trainables.fedssl.local import (
    Ctx,
    gmix_step,
    greg_step,
    lmix_step,
    pseudo_labels,
    supervised_step,
)
from trainables.fedssl.models import build_models, flatten, load_flat
from trainables.fedssl.options import GENERATIVE, FedSSLOptions
from trainables.messages import Message


@dataclass(frozen=True)
class AgentConfig:
    """What every party of one trial shares (no rows)."""

    variant: str
    opts: FedSSLOptions
    d: int
    n_classes: int
    image_shape: tuple[int, int] | None
    lr: float
    optimizer: str  # spec.optimizer: sgd (FedAvg's) or adam
    batch_size: int
    seed: int
    server_id: int


class Agent(Endpoint):
    """An agent: the three models (F only for the baselines) and its rows."""

    def __init__(self, party_id: int, x: np.ndarray, config: AgentConfig) -> None:
        super().__init__()  # no hooks: FedSSL's DP is the agents' own (``dp.py``)
        self.party_id = party_id
        self.config = config
        self.x = torch.from_numpy(np.array(x, dtype=np.float32))  # (n, d) own rows only
        with torch.random.fork_rng():  # overwritten by every round's global model
            self.models = build_models(
                config.d, config.n_classes, config.opts.z_dim, config.variant in GENERATIVE
            )
        self.rounds_trained: list[int] = []
        self.dp_steps = 0

    @property
    def n_rows(self) -> int:
        return len(self.x)

    def _ctx(self, round_: int) -> Ctx:
        o, c = self.config.opts, self.config
        state = np.random.SeedSequence([c.seed, self.party_id, round_]).generate_state(1)
        gen = torch.Generator().manual_seed(int(state[0]))
        rng = np.random.default_rng([c.seed, self.party_id, round_, 7])
        return Ctx(
            c.n_classes, o.z_dim, o.alpha, o.sharpen, o.augment_k, o.threshold,
            o.mix_input == "real", c.image_shape, gen, rng,
        )  # fmt: skip

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Fresh each round (FedAvg averages weights, not optimizer state): ``spec.optimizer``
        (Adam, β1 = 0.5 for D and G as in GAN training, or SGD with momentum 0.9)."""
        lr, params = self.config.lr, {k: m.parameters() for k, m in self.models.items()}
        if self.config.optimizer == "sgd":
            return {k: torch.optim.SGD(ps, lr=lr, momentum=0.9) for k, ps in params.items()}
        return {
            k: torch.optim.Adam(ps, lr=lr, betas=(0.9 if k == "F" else 0.5, 0.999))
            for k, ps in params.items()
        }

    def _batch(self, ctx: Ctx) -> torch.Tensor:
        """Row positions of one ordinary mini-batch (without replacement)."""
        b = min(self.config.batch_size, self.n_rows)
        return torch.randperm(self.n_rows, generator=ctx.gen)[:b]

    def local_round(self, msg: Message, round_: int, private: bool = False) -> Message:
        """Load the global model, run ``local_steps`` steps, send the model back."""
        load_flat(self.models, msg.payload)
        ctx = self._ctx(round_)
        opt = self._optimizers()
        self._train(opt, ctx, private)
        self.rounds_trained.append(round_)
        return Message.of("model", self.party_id, self.config.server_id, flatten(self.models))

    def _train(self, opt: dict[str, torch.optim.Optimizer], ctx: Ctx, private: bool) -> None:
        raise NotImplementedError

    def access_log(self) -> dict[str, object]:
        """Which rounds this agent trained in (the experimenter's access audit)."""
        return {
            "party": self.party_id,
            "rounds": list(self.rounds_trained),
            "dp_steps": self.dp_steps,
        }


class SupportAgent(Agent):
    """S-agent: labeled rows (x, y) of its own; G-MixUp with true labels (Eq. 4)."""

    def __init__(self, party_id: int, x: np.ndarray, y: np.ndarray, config: AgentConfig) -> None:
        super().__init__(party_id, x, config)
        self.y = torch.from_numpy(np.array(y, dtype=np.int64))  # (n,) own labels only

    def dp_block(self) -> tuple[float, float, int]:
        """(σ, sample rate q = B / n, G's DP steps per round: one in G-Reg, one in G-MixUp
        per local step): what the server's ledger admits or refuses before the round."""
        o = self.config.opts
        return (o.noise_multiplier, self.sample_rate, 2 * o.local_steps)

    @property
    def sample_rate(self) -> float:
        return min(1.0, self.config.batch_size / self.n_rows)

    def _onehot(self, rows: torch.Tensor) -> torch.Tensor:
        return nnf.one_hot(self.y[rows], self.config.n_classes).float()

    def _poisson(self, ctx: Ctx) -> torch.Tensor:
        """Each row in with probability q (the sampling the RDP accountant assumes)."""
        keep = torch.rand(self.n_rows, generator=ctx.gen) < self.sample_rate
        return torch.nonzero(keep).squeeze(1)

    def _train(self, opt: dict[str, torch.optim.Optimizer], ctx: Ctx, private: bool) -> None:
        v, m = self.config.variant, self.models
        pg = self._private_g(opt, ctx) if private else None
        for _ in range(self.config.opts.local_steps):
            if v in GENERATIVE:
                for step in (greg_step, gmix_step):
                    rows = self._poisson(ctx) if pg is not None else self._batch(ctx)
                    step(m, opt, self.x[rows], self._onehot(rows), ctx, pg)
                if self.config.opts.support_ce:  # F only: Alg. 2's "normal update on F"
                    rows = self._batch(ctx)
                    supervised_step(m["F"], opt["F"], self.x[rows], self._onehot(rows))
            elif v == "fedssl_lmix":
                rows = self._batch(ctx)
                lmix_step(m["F"], opt["F"], self.x[rows], self._onehot(rows), ctx)
            else:
                rows = self._batch(ctx)
                supervised_step(m["F"], opt["F"], self.x[rows], self._onehot(rows))
        if pg is not None:
            self.dp_steps += pg.steps
            m["G"] = pg.close()

    def _private_g(self, opt: dict[str, torch.optim.Optimizer], ctx: Ctx) -> PrivateG:
        o = self.config.opts
        noise_seed = int(torch.randint(0, 2**31, (1,), generator=ctx.gen))
        noise_gen = torch.Generator().manual_seed(noise_seed)  # DP noise, reproducible
        pg = PrivateG(
            self.models["G"], opt["G"], o.noise_multiplier, o.max_grad_norm,
            round(self.sample_rate * self.n_rows), noise_gen,
        )  # fmt: skip
        opt["G"] = pg.optimizer
        return pg


class QueryAgent(Agent):
    """Q-agent: unlabeled rows only; G-MixUp with sharpened pseudo-labels (Eq. 5) guessed
    by the round's global F (a frozen copy: the local F's own drift does not feed back)."""

    def _train(self, opt: dict[str, torch.optim.Optimizer], ctx: Ctx, private: bool) -> None:
        v, m = self.config.variant, self.models
        teacher = copy.deepcopy(m["F"]).eval()  # the global F this round started from
        for _ in range(self.config.opts.local_steps):
            steps = (greg_step, gmix_step) if v in GENERATIVE else (None,)
            for step in steps:
                u = self.x[self._batch(ctx)]
                q, keep = pseudo_labels(teacher, u, ctx)
                u, q = u[keep], q[keep]  # (B', d), (B', C): the confident rows
                if len(u) == 0:
                    continue
                if step is not None:
                    step(m, opt, u, q, ctx, None)
                elif v == "fedssl_lmix":
                    lmix_step(m["F"], opt["F"], u, q, ctx)
                else:
                    supervised_step(m["F"], opt["F"], u, q)


class Server(Endpoint):
    """Holds the global model vector and the privacy ledger; no rows, no labels."""

    def __init__(self, party_id: int, initial: np.ndarray, ledger: PrivacyLedger | None) -> None:
        super().__init__()
        self.party_id = party_id
        self.global_model = np.array(initial, dtype=np.float32)  # (P,)
        self.ledger = ledger

    def global_message(self, dst: int = -1) -> Message:
        return Message.of("model", self.party_id, dst, self.global_model)

    def aggregate(self, msgs: list[Message], weights: list[float]) -> bool:
        """FedAvg: the weighted mean of the returned model vectors."""
        if float(np.sum(weights)) <= 0:  # only ramped-out agents trained: keep the model
            return False
        w = np.asarray(weights, dtype=np.float64) / float(np.sum(weights))
        stacked = np.stack([np.asarray(m.payload, dtype=np.float64) for m in msgs])  # (K, P)
        self.global_model = (w @ stacked).astype(np.float32)
        return True

    def admit(self, noise: float, rate: float, steps: int, round_: int) -> bool:
        assert self.ledger is not None, "admit is FedSSL-DP's; this trial has no budget"
        return self.ledger.admit(noise, rate, steps, round_)

    def privacy(self) -> dict[str, object]:
        if self.ledger is None:
            return {}
        return {
            "epsilon_spent": self.ledger.spent,
            "history": [list(h) for h in self.ledger.history],
            "stopped_at": self.ledger.stopped_at,
        }


@dataclass(frozen=True)
class SupportInit:
    party_id: int
    x: np.ndarray  # (n_i, d) this agent's labeled rows, scaled
    y: np.ndarray  # (n_i,) their labels
    config: AgentConfig

    def build(self) -> SupportAgent:
        return SupportAgent(self.party_id, self.x, self.y, self.config)


@dataclass(frozen=True)
class QueryInit:
    party_id: int
    x: np.ndarray  # (n_j, d) this agent's unlabeled rows, scaled
    config: AgentConfig

    def build(self) -> QueryAgent:
        return QueryAgent(self.party_id, self.x, self.config)


@dataclass(frozen=True)
class ServerInit:
    party_id: int
    initial: np.ndarray  # (P,) the seeded initial model vector
    budget: float | None  # ε (FedSSL-DP) or None
    delta: float

    def build(self) -> Server:
        ledger = None if self.budget is None else PrivacyLedger(self.budget, self.delta)
        return Server(self.party_id, self.initial, ledger)
