"""The two FedCVT parties, Ray-free: built from a ``CvtPartyInit`` in-process or in an actor.

Why a separate party class (not ``trainables.party.Party``): a FedCVT party holds three row
sets (overlap, its own non-overlapping rows, test) and two encoders, and its round exchanges
several tensors; the generic ``PartyActor`` hosts it unchanged through ``build()``.
What each message reveals is listed in ``fedcvt.py``'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from trainables.messages import Message
from trainables.models import build_bottom
from trainables.party import as_tensor, resolve_device
from trainables.ssl.fedcvt import (
    CvtOptions,
    attention_estimate,
    masked_ce,
    orthogonality,
    pseudo_labels,
)

PASSIVE, ACTIVE = 0, 1


@dataclass(frozen=True)
class CvtLabels:
    """Only the active party's: labels of its overlap rows (with a labeled mask), of its own
    non-overlapping rows, and of the test rows."""

    y_ol: np.ndarray  # (n_ol,) int64
    labeled_ol: np.ndarray  # (n_ol,) bool: which overlap rows count as labeled
    y_nl: np.ndarray  # (n_nl_B,) int64
    y_test: np.ndarray  # (n_test,) int64


@dataclass(frozen=True)
class CvtPartyInit:
    """Everything one FedCVT party is built from; sent to its actor as is."""

    party_id: int
    X_ol: np.ndarray  # (n_ol, a_p) float32, overlap rows in the agreed order
    X_nl: np.ndarray  # (n_nl_p, a_p) float32, this party's non-overlapping rows
    X_test: np.ndarray  # (n_test, a_p) float32
    n_classes: int
    model: str
    hidden: tuple[int, ...] | None
    dataset: str
    lr: float
    batch_size: int
    seed: int
    options: CvtOptions
    peer_nl: int = 0  # the other party's non-overlapping row count (schedule only)
    labels: CvtLabels | None = None  # active party only
    device: str = "cpu"

    def build(self) -> CvtParty:
        return CvtActive(self) if self.labels is not None else CvtParty(self)


def cycle_rows(n: int, batch: int, seed: int, tag: int, step: int) -> np.ndarray:
    """(<= batch,) int64 rows of a set of ``n`` rows at global ``step``: the set is cut into
    ceil(n / batch) shuffled chunks, reshuffled each pass; both parties derive the same."""
    chunks = max(1, -(-n // batch))
    perm = np.random.default_rng([seed, tag, step // chunks]).permutation(n)
    return np.sort(np.array_split(perm, chunks)[step % chunks]).astype(np.int64)


def _tensor(arr: np.ndarray, device: torch.device) -> torch.Tensor:
    """A private, writable copy (Ray hands actors read-only buffers)."""
    return torch.from_numpy(np.array(arr)).to(device)


def steps_per_epoch(n_ol: int, n_nl_a: int, n_nl_b: int, batch: int) -> int:
    """One epoch is one pass over the largest row set (the same for FedSplitNN)."""
    return max(1, -(-max(n_ol, n_nl_a, n_nl_b) // batch))


class CvtParty:
    """The passive party A: two encoders; completes its non-overlapping rows by attention."""

    def __init__(self, init: CvtPartyInit) -> None:
        self.party_id = init.party_id
        self.opts = init.options
        self.seed = init.seed
        self.batch = init.batch_size
        self.device = resolve_device(init.device)
        torch.manual_seed(init.seed * 1009 + init.party_id)  # per-party init, any process
        d, dim = self.opts.rep_dim, init.X_ol.shape[1]
        self.unique = build_bottom(init.model, dim, d, init.hidden, init.dataset).to(self.device)
        self.shared = build_bottom(init.model, dim, d, init.hidden, init.dataset).to(self.device)
        self.X_ol = _tensor(init.X_ol, self.device)
        self.X_nl = _tensor(init.X_nl, self.device)
        self.X_test = _tensor(init.X_test, self.device)
        self.n_nl = len(init.X_nl)
        self._stash: list[torch.Tensor] = []
        self._local_loss: torch.Tensor | None = None
        self.optimizer = torch.optim.Adam(CvtParty.parameters(self), lr=init.lr)

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

    def send(self, kind: str, tensor: torch.Tensor, keep: bool = True) -> Message:
        """A message carrying ``tensor``; ``keep`` stashes it for the gradient that returns."""
        if keep:
            self._stash.append(tensor)
        return Message.of(kind, self.party_id, 1 - self.party_id, tensor.detach().cpu().numpy())

    def forward(self, step: int, values: Message | None) -> list[Message]:
        """A's round: r_A of the overlap (all rows, or the batch for FedSplitNN) and, with
        FedCVT, r_A and r~_B of its non-overlapping batch and r~_B of the overlap batch.

        values: r_B of every overlap row (n_ol, 2d), received (None for FedSplitNN).
        """
        self._stash = []
        ol = self.ol_rows(step)  # (b_ol,)
        if not self.opts.semi:
            r_ol, _ = self.encode(self.X_ol[ol])  # (b_ol, 2d)
            self._local_loss = None
            return [self.send("reps_ol", r_ol)]
        v = as_tensor(values.payload, self.device)  # type: ignore[union-attr]  # (n_ol, 2d)
        r_all, orth_ol = self.encode(self.X_ol)  # (n_ol, 2d)
        nl = self.nl_rows(step, PASSIVE + 1, self.n_nl)  # (b,)
        r_nl, orth_nl = self.encode(self.X_nl[nl])  # (b, 2d)
        T = self.opts.temperature
        est_nl = attention_estimate(r_nl, r_all, v, T)  # (b, 2d) r~_B
        est_ol = attention_estimate(r_all[ol], r_all, v, T, torch.as_tensor(ol))  # (b_ol, 2d)
        self._local_loss = self.opts.w_orth * (orth_ol + orth_nl)
        return [
            self.send("reps_ol", r_all),
            self.send("reps_nl", r_nl),
            self.send("est_nl", est_nl),
            self.send("est_ol", est_ol),
        ]

    def backward(self, grads: list[Message]) -> None:
        """Chain the returned gradients (one per stashed tensor) plus the local orthogonality
        term through this party's encoders, then step."""
        self.optimizer.zero_grad(set_to_none=True)
        total = sum(
            (t * as_tensor(g.payload, self.device)).sum()
            for t, g in zip(self._stash, grads, strict=True)
        )
        if self._local_loss is not None:
            total = total + self._local_loss
        total.backward()  # type: ignore[union-attr]
        self.optimizer.step()
        self._stash = []

    @torch.no_grad()
    def test_reps(self) -> Message:
        """r_A of the test rows (n_test, 2d), for evaluation at the active party."""
        r, _ = self.encode(self.X_test)
        return self.send("test_reps", r, keep=False)


class CvtActive(CvtParty):
    """The active party B: its encoders, the labels and the three classifiers f_AB, f_A, f_B."""

    def __init__(self, init: CvtPartyInit) -> None:
        super().__init__(init)
        assert init.labels is not None
        lab = init.labels
        self.y_ol = _tensor(lab.y_ol, self.device)
        self.labeled_ol = _tensor(lab.labeled_ol, self.device)
        self.y_nl = _tensor(lab.y_nl, self.device)
        self.y_test = _tensor(lab.y_test, self.device)
        self.peer_nl = init.peer_nl
        w, c = 2 * self.opts.rep_dim, init.n_classes
        self.f_ab, self.f_a, self.f_b = nn.Linear(2 * w, c), nn.Linear(w, c), nn.Linear(w, c)
        for head in (self.f_ab, self.f_a, self.f_b):
            head.to(self.device)
        self.pseudo: list[tuple[int, np.ndarray, np.ndarray]] = []  # (step, A rows, labels)
        self._r_all: torch.Tensor | None = None  # r_B of the overlap, set by values()
        self._orth_ol = torch.zeros(())
        self.optimizer = torch.optim.Adam(self.parameters(), lr=init.lr)  # heads included

    def parameters(self) -> list[nn.Parameter]:
        heads = [*self.f_ab.parameters(), *self.f_a.parameters(), *self.f_b.parameters()]
        return [*super().parameters(), *heads]

    def values(self, step: int) -> Message:
        """r_B of every overlap row (n_ol, 2d): the attention values A needs this round."""
        self._r_all, self._orth_ol = self.encode(self.X_ol)
        return self.send("values", self._r_all, keep=False)

    def train_step(self, step: int, received: list[Message]) -> list[Message]:
        """Losses of this round at B; returns dL/d(each received tensor) for A."""
        leaves = [
            as_tensor(m.payload, self.device).requires_grad_(True) for m in received
        ]  # reps_ol, [reps_nl, est_nl, est_ol]
        ol = self.ol_rows(step)
        loss = self._semi_loss(step, ol, leaves) if self.opts.semi else self._fed_loss(ol, leaves)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward(inputs=[*self.parameters(), *leaves])
        self.optimizer.step()
        self.last_loss = float(loss.detach())
        grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in leaves]
        return [
            Message.of("grad_" + m.kind, ACTIVE, PASSIVE, g.cpu().numpy())
            for m, g in zip(received, grads, strict=True)
        ]

    def _fed_loss(self, ol: np.ndarray, leaves: list[torch.Tensor]) -> torch.Tensor:
        """FedSplitNN: CE of f_AB on the labeled overlap batch only."""
        r_b, _ = self.encode(self.X_ol[ol])  # (b_ol, 2d)
        logits = self.f_ab(torch.cat([leaves[0], r_b], dim=1))  # (b_ol, C)
        return masked_ce(logits, self.y_ol[ol], self.labeled_ol[ol])

    def _semi_loss(self, step: int, ol: np.ndarray, leaves: list[torch.Tensor]) -> torch.Tensor:
        o = self.opts
        a_all, a_nl, est_b_nl, est_b_ol = leaves  # (n_ol,2d) (b,2d) (b,2d) (b_ol,2d)
        b_all, orth_ol = self._r_all, self._orth_ol  # (n_ol, 2d) with graph, from values()
        assert b_all is not None
        a_ol, b_ol = a_all[ol], b_all[ol]  # (b_ol, 2d)
        v_a = a_all.detach()  # attention values for B's estimates of r_A
        nl = self.nl_rows(step, ACTIVE + 1, len(self.X_nl))
        b_nl, orth_nl = self.encode(self.X_nl[nl])  # (b, 2d)
        est_a_nl = attention_estimate(b_nl, b_all, v_a, o.temperature)  # (b, 2d) r~_A
        est_a_ol = attention_estimate(b_ol, b_all, v_a, o.temperature, torch.as_tensor(ol))
        lab = self.labeled_ol[ol]
        ce = self._three_ce(a_ol, b_ol, self.y_ol[ol], lab)  # overlap, real labels
        ce = ce + self._three_ce(
            est_a_nl, b_nl, self.y_nl[nl], torch.ones_like(self.y_nl[nl]).bool()
        )
        keep, label = self._select(step, a_nl, est_b_nl)
        ce = ce + self._three_ce(a_nl, est_b_nl, label, keep)  # A's rows, pseudo-labels
        d = o.rep_dim
        shared = F.mse_loss(a_ol[:, d:], b_ol[:, d:])
        est = F.mse_loss(est_a_ol, a_ol.detach()) + F.mse_loss(est_b_ol, b_ol.detach())
        orth = orth_ol + orth_nl
        return ce + o.w_shared * shared + o.w_est * est + o.w_orth * orth

    def _three_ce(
        self, r_a: torch.Tensor, r_b: torch.Tensor, y: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """CE of f_AB([r_A; r_B]), f_A(r_A) and f_B(r_B) on the rows in ``mask``."""
        return (
            masked_ce(self.f_ab(torch.cat([r_a, r_b], dim=1)), y, mask)
            + masked_ce(self.f_a(r_a), y, mask)
            + masked_ce(self.f_b(r_b), y, mask)
        )

    @torch.no_grad()
    def _select(
        self, step: int, a_nl: torch.Tensor, est_b_nl: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Pseudo-labels for A's non-overlapping batch; logged for measurement only."""
        o = self.opts
        p_fed = torch.softmax(self.f_ab(torch.cat([a_nl, est_b_nl], dim=1)), dim=1)
        p_act = torch.softmax(self.f_b(est_b_nl), dim=1)
        p_pas = torch.softmax(self.f_a(a_nl), dim=1)
        keep, label = pseudo_labels(p_fed, p_act, p_pas, (o.t_fed, o.t_active, o.t_passive))
        rows = self.nl_rows(step, PASSIVE + 1, self.peer_nl)  # A's batch positions
        k = keep.cpu().numpy()
        self.pseudo.append((step, rows[k], label.cpu().numpy()[k]))
        return keep, label

    @torch.no_grad()
    def evaluate(self, test_reps: Message) -> dict[str, Any]:
        """Accuracy of f_AB, f_B (B alone) and f_A (on A's test representations), and
        f_AB's probabilities (for AUC) on the test rows."""
        r_a = as_tensor(test_reps.payload, self.device)  # (n_test, 2d)
        r_b, _ = self.encode(self.X_test)  # (n_test, 2d)
        p = torch.softmax(self.f_ab(torch.cat([r_a, r_b], dim=1)), dim=1)  # (n_test, C)

        def acc(logits: torch.Tensor) -> float:
            return float((logits.argmax(dim=1) == self.y_test).double().mean())

        return {
            "acc": acc(p),
            "acc_active_only": acc(self.f_b(r_b)),
            "acc_passive_only": acc(self.f_a(r_a)),
            "proba": p.cpu().numpy(),
        }

    def pseudo_log(self) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """(step, A's batch positions, pseudo-labels) per round: measurement only."""
        return self.pseudo
