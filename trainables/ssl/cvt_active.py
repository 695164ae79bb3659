"""FedCVT's active party B: its encoders, the labels and the three classifiers f_AB, f_A, f_B.

Built by ``CvtPartyInit.build`` (``cvt_init.py``) when the init carries labels;
``CvtRounds`` runs at it.
Defenses here act on its messages only (``values`` as ``representation``, the gradients as
``gradient``); the loss- and model-level hooks of ``ActiveParty`` (MID, dCor, CAE, GPer)
have no place in FedCVT's three-head loss, and the kind refuses them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from trainables.messages import Message
from trainables.ssl.cvt_party import ACTIVE, PASSIVE, CvtParty, JointHead, _tensor
from trainables.ssl.fedcvt import (
    GRADIENT,
    VALUES,
    attention_estimate,
    balanced_pseudo_labels,
    bundle,
    label_prior,
    masked_ce,
    match_moments,
    pseudo_labels,
    std_ratio,
    unbundle,
)

if TYPE_CHECKING:
    from trainables.ssl.cvt_fields import CvtPartyData


class CvtMetrics(TypedDict, total=False):
    """The last evaluation (``evaluate``); empty before the first."""

    acc: float  # f_AB's accuracy on the test rows (the MP)
    acc_active_only: float  # f_B on B's own test representations
    acc_passive_only: float  # f_A on A's test representations
    proba: np.ndarray  # (n_test, C) f_AB's probabilities


class CvtMeasurements(CvtMetrics):
    """``measurements()``: the last evaluation and the logs, read back after training."""

    pseudo: list[tuple[int, np.ndarray, np.ndarray]]  # (step, A's batch positions, labels)
    est_ratio: list[tuple[int, float]]  # (step, std ratio of r~_A to r_A)


class CvtActive(CvtParty):
    """The label holder B (party 1)."""

    def __init__(self, init: CvtPartyData) -> None:
        super().__init__(init)
        assert init.labels is not None
        lab = init.labels
        self.y_ol = _tensor(lab.y_ol, self.device)
        self.y_train = self.y_ol  # the harness's name: labels of the overlap rows (X_train)
        self.labeled_ol = _tensor(lab.labeled_ol, self.device)
        self.y_nl = _tensor(lab.y_nl, self.device)
        self.y_test = _tensor(lab.y_test, self.device)
        self.peer_nl = init.peer_nl
        own = torch.cat([self.y_ol[self.labeled_ol.bool()], self.y_nl])  # B's labeled rows
        self.prior = label_prior(own, init.config.n_classes)  # (C,) for ``pseudo_balance``
        self.pseudo: list[tuple[int, np.ndarray, np.ndarray]] = []  # (step, A rows, labels)
        self.est_ratio: list[tuple[int, float]] = []  # (step, std ratio of r~_A to r_A)
        self._r_all: torch.Tensor | None = None  # r_B of the overlap, set by values()
        self._orth_ol = torch.zeros(())
        self.last_loss = float("nan")
        self.metrics: CvtMetrics = {}

    def _build_heads(self, init: CvtPartyData) -> None:
        """f_AB on [r_A; r_B] (4d), f_A on r_A, f_B on r_B (2d each), drawn right after the
        encoders from the party's seeded stream."""
        w, c = 2 * self.opts.rep_dim, init.config.n_classes
        self.f_ab, self.f_a, self.f_b = nn.Linear(2 * w, c), nn.Linear(w, c), nn.Linear(w, c)
        for head in (self.f_ab, self.f_a, self.f_b):
            head.to(self.device)
        self.top = JointHead(self.f_ab)  # the joint model as the attack judge calls it

    def parameters(self) -> list[nn.Parameter]:
        heads = [*self.f_ab.parameters(), *self.f_a.parameters(), *self.f_b.parameters()]
        return [*super().parameters(), *heads]

    def values(self, step: int) -> Message:
        """r_B of every overlap row (n_ol, 2d): the attention values A needs this round."""
        self._r_all, self._orth_ol = self.encode(self.X_ol)
        return self.send(VALUES, self._r_all)

    def train_step(self, step: int, up: Message) -> Message:
        """Losses of this round at B; returns dL/d(each received tensor) for A, then takes
        Q-1 more local steps (FedBCD) on the same received tensors."""
        leaves = [
            self.receive(m).requires_grad_(True) for m in unbundle(up)
        ]  # reps_ol, [reps_nl, est_nl, est_ol]
        ol = self.ol_rows(step)
        loss = self._loss(step, ol, leaves, log=True)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward(inputs=[*self.parameters(), *leaves])
        self.optimizer.step()
        grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in leaves]
        stale = [t.detach() for t in leaves]
        for _ in range(1, self.config.local_steps):
            if self.opts.semi:
                self._r_all, self._orth_ol = self.encode(self.X_ol)
            loss = self._loss(step, ol, stale, log=False)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward(inputs=self.parameters())
            self.optimizer.step()
        self.last_loss = float(loss.detach())
        return bundle([self.send(GRADIENT, g) for g in grads])

    def _loss(
        self, step: int, ol: np.ndarray, leaves: list[torch.Tensor], log: bool
    ) -> torch.Tensor:
        return (
            self._semi_loss(step, ol, leaves, log) if self.opts.semi else self._fed_loss(ol, leaves)
        )

    def _fed_loss(self, ol: np.ndarray, leaves: list[torch.Tensor]) -> torch.Tensor:
        """FedSplitNN: CE of f_AB on the labeled overlap batch only."""
        r_b, _ = self.encode(self.X_ol[ol])  # (b_ol, 2d)
        logits = self.f_ab(torch.cat([leaves[0], r_b], dim=1))  # (b_ol, C)
        return masked_ce(logits, self.y_ol[ol], self.labeled_ol[ol])

    def _semi_loss(
        self, step: int, ol: np.ndarray, leaves: list[torch.Tensor], log: bool
    ) -> torch.Tensor:
        o = self.opts
        a_all, a_nl, est_b_nl, est_b_ol = leaves  # (n_ol,2d) (b,2d) (b,2d) (b_ol,2d)
        b_all, orth_ol = self._r_all, self._orth_ol  # (n_ol, 2d) with graph, from values()
        assert b_all is not None
        a_ol, b_ol = a_all[ol], b_all[ol]  # (b_ol, 2d)
        v_a = a_all.detach()  # attention values for B's estimates of r_A
        nl = self.nl_rows(step, ACTIVE + 1, len(self.X_nl))
        b_nl, orth_nl = self.encode(self.X_nl[nl])  # (b, 2d)
        est_a_nl = attention_estimate(b_nl, b_all, v_a, o.temperature)  # (b, 2d) r~_A
        if log:
            self.est_ratio.append((step, std_ratio(est_a_nl, v_a)))
        if o.est_rescale == "moments":
            est_a_nl = match_moments(est_a_nl, v_a)  # (b, 2d)
        est_a_ol = attention_estimate(b_ol, b_all, v_a, o.temperature, torch.as_tensor(ol))
        lab = self.labeled_ol[ol]
        ce = self._three_ce(a_ol, b_ol, self.y_ol[ol], lab)  # overlap, real labels
        ce = ce + self._three_ce(
            est_a_nl, b_nl, self.y_nl[nl], torch.ones_like(self.y_nl[nl]).bool()
        )
        keep, label = self._select(step, a_nl, est_b_nl, log)
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
        self, step: int, a_nl: torch.Tensor, est_b_nl: torch.Tensor, log: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Pseudo-labels for A's non-overlapping batch (b rows), by the paper's rule or, with
        ``pseudo_balance``, class-balanced toward B's own label prior; logged (once per
        round) for measurement only."""
        o = self.opts
        p_fed = torch.softmax(self.f_ab(torch.cat([a_nl, est_b_nl], dim=1)), dim=1)
        p_act = torch.softmax(self.f_b(est_b_nl), dim=1)
        p_pas = torch.softmax(self.f_a(a_nl), dim=1)
        thresholds = (o.t_fed, o.t_active, o.t_passive)
        if o.pseudo_balance == "none":
            keep, label = pseudo_labels(p_fed, p_act, p_pas, thresholds)
        else:
            keep, label = balanced_pseudo_labels(
                p_fed, p_act, p_pas, thresholds, self.prior, o.pseudo_balance
            )
        if log:
            rows = self.nl_rows(step, PASSIVE + 1, self.peer_nl)  # A's batch positions
            k = keep.cpu().numpy()
            self.pseudo.append((step, rows[k], label.cpu().numpy()[k]))
        return keep, label

    @torch.no_grad()
    def evaluate(self, test_reps: Message) -> float:
        """Accuracy of f_AB, f_B (B alone) and f_A (on A's test representations), and
        f_AB's probabilities (for AUC) on the test rows; returns f_AB's accuracy (MP)."""
        r_a = self.receive(test_reps)  # (n_test, 2d)
        r_b, _ = self.encode(self.X_test)  # (n_test, 2d)
        p = torch.softmax(self.f_ab(torch.cat([r_a, r_b], dim=1)), dim=1)  # (n_test, C)

        def acc(logits: torch.Tensor) -> float:
            return float((logits.argmax(dim=1) == self.y_test).double().mean())

        self.metrics = {
            "acc": acc(p),
            "acc_active_only": acc(self.f_b(r_b)),
            "acc_passive_only": acc(self.f_a(r_a)),
            "proba": p.cpu().numpy(),
        }
        return float(self.metrics["acc"])

    def measurements(self) -> CvtMeasurements:
        """The last evaluation and the pseudo-label log (step, A's batch positions, labels):
        read back by the trial after training, for the experimenter's measurements."""
        return {**self.metrics, "pseudo": list(self.pseudo), "est_ratio": list(self.est_ratio)}
