"""The FedCVT party, Ray-free: built from a ``CvtPartyInit`` (``cvt_init.py``) in-process
or in an actor; the active party (``cvt_active.py``) builds on it.

Why a separate party class (not ``trainables.party.Party``): a FedCVT party holds three row
sets (overlap, its own non-overlapping rows, test) and two encoders, and its round exchanges
several tensors. It still offers what the engine asks of any party: a message hook chain
(``Endpoint``: message log, defenses, codecs through ``send_out`` / ``receive_in``),
``defense_applied``, and for the attack harness ``X_train`` (the overlap rows), ``bottom``
(X -> r = [u; c]), ``schedule``, ``config``; the active party also ``top`` (f_AB) and
``y_train`` (the overlap labels). What each message reveals: ``fedcvt.py``'s docstring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from trainables.endpoint import Endpoint
from trainables.messages import BatchRef, Message
from trainables.models import build_bottom
from trainables.party import as_tensor, resolve_device
from trainables.ssl.fedcvt import (
    REPS_SPLIT,
    TEST,
    UP_KINDS,
    attention_estimate,
    bundle,
    match_moments,
    orthogonality,
    unbundle,
)

if TYPE_CHECKING:
    from trainables.ssl.cvt_fields import CvtPartyData

PASSIVE, ACTIVE = 0, 1


def cycle_rows(n: int, batch: int, seed: int, tag: int, step: int) -> np.ndarray:
    """(<= batch,) int64 rows of a set of ``n`` rows at global ``step``: the set is cut into
    ceil(n / batch) shuffled chunks, reshuffled each pass; both parties derive the same."""
    chunks = max(1, -(-n // batch))
    perm = np.random.default_rng([seed, tag, step // chunks]).permutation(n)
    return np.sort(np.array_split(perm, chunks)[step % chunks]).astype(np.int64)


def steps_per_epoch(n_ol: int, n_nl_a: int, n_nl_b: int, batch: int) -> int:
    """One epoch is one pass over the largest row set (the same for FedSplitNN)."""
    return max(1, -(-max(n_ol, n_nl_a, n_nl_b) // batch))


class CvtSchedule:
    """The overlap batch of each round, as ``BatchSchedule`` names it: round (epoch, index)
    is global step epoch * steps + index (both parties derive it from the seed)."""

    def __init__(self, n_rows: int, batch_size: int, seed: int, steps: int) -> None:
        self.n_rows, self.batch_size, self.seed, self.steps = n_rows, batch_size, seed, steps

    def n_batches(self) -> int:
        return self.steps

    def refs(self, epoch: int) -> list[BatchRef]:
        return [BatchRef(epoch, i) for i in range(self.steps)]

    def rows(self, ref: BatchRef) -> np.ndarray:
        return cycle_rows(
            self.n_rows, self.batch_size, self.seed, 0, ref.epoch * self.steps + ref.index
        )


class Encoder(nn.Module):
    """A party's bottom for the attack harness: X (n, a) -> r = [u(X); c(X)] (n, 2d)."""

    def __init__(self, unique: nn.Module, shared: nn.Module) -> None:
        super().__init__()
        self.unique, self.shared = unique, shared

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.unique(x), self.shared(x)], dim=1)


class JointHead(nn.Module):
    """f_AB as the judge calls a top model: [r_A, r_B] -> (n, C) logits."""

    def __init__(self, f_ab: nn.Module) -> None:
        super().__init__()
        self.f_ab = f_ab

    def forward(self, hs: list[torch.Tensor]) -> torch.Tensor:
        return self.f_ab(torch.cat(list(hs), dim=1))


def _tensor(arr: np.ndarray, device: torch.device) -> torch.Tensor:
    """A private, writable copy (Ray hands actors read-only buffers)."""
    return torch.from_numpy(np.array(arr)).to(device)


class CvtParty(Endpoint):
    """The passive party A: two encoders; completes its non-overlapping rows by attention."""

    def __init__(self, init: CvtPartyData) -> None:
        super().__init__()
        cfg = init.config
        self.party_id, self.config, self.opts = init.party_id, cfg, init.options
        self.seed, self.batch, self.steps = cfg.seed, cfg.batch_size, init.steps
        self.device = resolve_device(cfg.device)
        torch.manual_seed(cfg.seed * 1009 + init.party_id)  # per-party init, any process
        d, dim = self.opts.rep_dim, init.X_ol.shape[1]
        self.unique = build_bottom(cfg.model, dim, d, cfg.hidden, cfg.dataset).to(self.device)
        self.shared = build_bottom(cfg.model, dim, d, cfg.hidden, cfg.dataset).to(self.device)
        self.bottom = Encoder(self.unique, self.shared)
        self._build_heads(init)  # the active party's, from the same seeded stream
        self.X_ol = _tensor(init.X_ol, self.device)
        self.X_train = self.X_ol  # the harness's name: the rows both parties trained on
        self.X_nl = _tensor(init.X_nl, self.device)
        self.X_test = _tensor(init.X_test, self.device)
        self.n_nl = len(init.X_nl)
        self.schedule = CvtSchedule(len(init.X_ol), cfg.batch_size, cfg.seed, init.steps)
        self._stash: list[torch.Tensor] = []
        self._local_loss: torch.Tensor | None = None
        self._inputs: tuple[int, torch.Tensor | None] | None = None  # (step, values) of forward
        self.optimizer = torch.optim.Adam(self.parameters(), lr=cfg.lr)
        self.attach(init)  # message log, training-time attacks, hooks (``Endpoint``)

    def _build_heads(self, init: CvtPartyData) -> None:
        """The passive party has none."""

    def parameters(self) -> list[nn.Parameter]:
        return [*self.unique.parameters(), *self.shared.parameters()]

    def encode(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """X (n, a) -> (r (n, 2d) = [u; c], orthogonality penalty of this batch)."""
        u, c = self.unique(X), self.shared(X)  # (n, d) each
        return torch.cat([u, c], dim=1), orthogonality(u, c)

    def ol_rows(self, step: int) -> np.ndarray:
        return cycle_rows(len(self.X_ol), self.batch, self.seed, 0, step)

    def nl_rows(self, step: int, tag: int, n: int) -> np.ndarray:
        return cycle_rows(n, self.batch, self.seed, tag, step)

    def send(self, kind: str, tensor: torch.Tensor) -> Message:
        """``tensor`` to the other party, through this party's hook chain."""
        msg = Message.of(kind, self.party_id, 1 - self.party_id, tensor.detach().cpu().numpy())
        return self.send_out(msg)

    def receive(self, msg: Message) -> torch.Tensor:
        """A received message's payload, through the hook chain (codecs decode first)."""
        return as_tensor(self.receive_in(msg).payload, self.device)

    def round(
        self, grads: Message | None, step: int | None, values: Message | None
    ) -> Message | None:
        """One call per round: apply the last round's gradients, then this round's forward
        (FedSGD order; a remote party costs one round trip)."""
        if grads is not None:
            self.backward(unbundle(grads))
        return None if step is None else self.forward(step, values)

    def _compute(self, step: int, v: torch.Tensor | None) -> list[torch.Tensor]:
        """This round's tensors for B (``UP_KINDS`` order); sets the local orthogonality term.

        v: r_B of every overlap row (n_ol, 2d), received (None for FedSplitNN)."""
        ol = self.ol_rows(step)  # (b_ol,)
        if v is None:
            r_ol, _ = self.encode(self.X_ol[ol])  # (b_ol, 2d)
            self._local_loss = None
            return [r_ol]
        r_all, orth_ol = self.encode(self.X_ol)  # (n_ol, 2d)
        nl = self.nl_rows(step, PASSIVE + 1, self.n_nl)  # (b,)
        r_nl, orth_nl = self.encode(self.X_nl[nl])  # (b, 2d)
        T = self.opts.temperature
        est_nl = attention_estimate(r_nl, r_all, v, T)  # (b, 2d) r~_B
        if self.opts.est_rescale == "moments":
            est_nl = match_moments(est_nl, v)  # (b, 2d), to r_B's overlap moments
        est_ol = attention_estimate(r_all[ol], r_all, v, T, torch.as_tensor(ol))  # (b_ol, 2d)
        self._local_loss = self.opts.w_orth * (orth_ol + orth_nl)
        return [r_all, r_nl, est_nl, est_ol]

    def forward(self, step: int, values: Message | None) -> Message:
        """A's round: r_A of the overlap (all rows, or the batch for FedSplitNN) and, with
        FedCVT, r_A and r~_B of its non-overlapping batch and r~_B of the overlap batch."""
        v = None if values is None else self.receive(values)
        self._inputs = (step, v)
        self._stash = self._compute(step, v)
        kinds = UP_KINDS if v is not None else REPS_SPLIT
        return bundle([self.send(k, t) for k, t in zip(kinds, self._stash, strict=True)])

    def backward(self, grads: list[Message]) -> None:
        """Chain the returned gradients (one per sent tensor) plus the local orthogonality
        term through this party's encoders and step; Q-1 more steps (FedBCD) recompute the
        tensors with the updated encoders and reuse the same (stale) gradients."""
        received = [self.receive(g) for g in grads]
        assert self._inputs is not None, "a gradient without a forward"
        for q in range(self.config.local_steps):
            if q > 0:
                self._stash = self._compute(*self._inputs)
            self.optimizer.zero_grad(set_to_none=True)
            terms = [(t * g).sum() for t, g in zip(self._stash, received, strict=True)]
            total = terms[0]  # then added in order: the same float sums as Python's sum()
            for term in terms[1:]:
                total = total + term
            if self._local_loss is not None:
                total = total + self._local_loss
            total.backward()
            self.optimizer.step()
        self._stash, self._inputs = [], None

    @torch.no_grad()
    def test_reps(self) -> Message:
        """r_A of the test rows (n_test, 2d), for evaluation at the active party."""
        r, _ = self.encode(self.X_test)
        return self.send(TEST, r)
