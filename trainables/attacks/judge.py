"""The judge: scores an attack's guess against ground truth the attacker never sees.

It holds every party's trained models and data, as the simulator of a trial does, and
implements VFLAIR's AP definitions: accuracy or AUC of inferred labels, 1 - MSE of
reconstructed features on [0, 1]-scaled columns, the share of triggered samples sent to
the target class, and the MP drop under a non-targeted inference-time attack.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast

import numpy as np
import torch

from trainables.attacks import chance
from trainables.attacks.base import FeatureGuess, Guess, InferenceTamper, LabelGuess
from trainables.attacks.chance import Score


class TrainedParty(Protocol):
    """A trained party as the judge reads it (a ``Party``, a stacked party's slice, a copy
    from an actor): its bottom and its rows."""

    bottom: torch.nn.Module
    X_train: torch.Tensor  # (n_train, d_k)
    X_test: torch.Tensor  # (n_test, d_k)


class TrainedActive(TrainedParty, Protocol):
    """The active party: also the top model and the labels (the judge's ground truth)."""

    top: torch.nn.Module
    y_train: torch.Tensor  # (n_train,)
    y_test: torch.Tensor  # (n_test,)


class Judge:
    """Full-model evaluation over parties [0..K-1]; party K-1 is active (has labels, top)."""

    def __init__(self, parties: Sequence[object]) -> None:
        self.parties = [cast(TrainedParty, p) for p in parties]
        self.active = cast(TrainedActive, parties[-1])
        self.active.top.eval()  # MID samples only in training
        self.y_train = self.active.y_train.cpu().numpy()
        self.y_test = self.active.y_test.cpu().numpy()
        self.clean_preds = self.predict()  # (n_test,) the untampered model's classes
        self.clean_mp = self.mp(self.clean_preds)

    @torch.no_grad()
    def embeddings(self, split: str = "test") -> list[torch.Tensor]:
        out = []
        for p in self.parties:
            p.bottom.eval()
            x = p.X_test if split == "test" else p.X_train
            out.append(p.bottom(x))
        return out

    @torch.no_grad()
    def predict(self, embeddings: list[torch.Tensor] | None = None) -> np.ndarray:
        hs = self.embeddings() if embeddings is None else embeddings
        return self.active.top(hs).argmax(dim=1).cpu().numpy()

    def mp(self, predictions: np.ndarray) -> float:
        return float((predictions == self.y_test).mean())

    def score(self, guess: Guess, attacker: int) -> Score:
        """The guess's AP beside its no-information baseline (``chance.py``), and the MP
        under attack with its sampling error over the test rows."""
        n_test = len(self.y_test)
        if isinstance(guess, LabelGuess):
            score = chance.score_labels(guess, self.y_train, self.y_test)
            return score.with_mp(self.clean_mp, n_test)
        if isinstance(guess, FeatureGuess):
            return self.feature_score(guess).with_mp(self.clean_mp, n_test)
        return self._tamper(guess, attacker)

    def feature_ap(self, guess: FeatureGuess) -> float:
        """1 - MSE after scaling each column to [0, 1] by the true split's min and max."""
        return self.feature_score(guess).ap

    def feature_score(self, guess: FeatureGuess) -> Score:
        """``feature_ap`` beside its baseline: every row guessed as the target party's
        training column means, scaled and clipped as the guess is."""
        p = self.parties[guess.party_id]
        full = (p.X_test if guess.split == "test" else p.X_train).cpu().numpy()
        lo, hi = full.min(axis=0), full.max(axis=0)  # (d,)
        span = np.where(hi > lo, hi - lo, 1.0)
        truth = (full[guess.rows] - lo) / span  # (n, d)
        est = np.clip((np.asarray(guess.X, dtype=np.float64) - lo) / span, 0.0, 1.0)  # (n, d)
        ap = float(1.0 - np.mean((est - truth) ** 2))
        train_mean = p.X_train.cpu().numpy().astype(np.float64).mean(axis=0)
        mean = np.clip((train_mean - lo) / span, 0.0, 1.0)  # (d,)
        return chance.feature_score(truth, est, mean, ap)

    def tamper_rows(self, guess: InferenceTamper) -> np.ndarray:
        """(n,) the test rows a targeted tamper's AP is over: its triggered rows, of other
        classes than the target unless it counts them all (``count_target_rows``)."""
        rows = guess.rows
        if guess.target is not None and not guess.count_target_rows:
            rows = rows[self.y_test[rows] != guess.target]
        return rows

    @torch.no_grad()
    def _tamper(self, guess: InferenceTamper, attacker: int) -> Score:
        hs = self.embeddings()
        party = self.parties[attacker]
        if guess.X_test is not None:
            x = torch.as_tensor(np.asarray(guess.X_test, dtype=np.float32), device=hs[0].device)
            hs[attacker] = party.bottom(x)
        elif guess.embeddings is not None:
            hs[attacker] = torch.as_tensor(np.asarray(guess.embeddings, dtype=np.float32))
        preds = self.predict(hs)  # (n_test,)
        n_test = len(self.y_test)
        if guess.target is not None:
            rows = self.tamper_rows(guess)
            ap = float((preds[rows] == guess.target).mean()) if len(rows) else float("nan")
            score = chance.targeted_score(self.clean_preds[rows], preds[rows], guess.target, ap)
            return score.with_mp(self.clean_mp, n_test)
        # VFLAIR's Eq. 7: AP = MP_all - MP on the attacked samples (clean MP over all rows)
        rows = guess.rows
        hit = float((preds[rows] == self.y_test[rows]).mean()) if len(rows) else 0.0
        tampered_mp = self.mp(preds)
        ap = max(0.0, (tampered_mp if guess.against_tampered_mp else self.clean_mp) - hit)
        score = chance.untargeted_score(
            self.clean_preds[rows], preds[rows], self.y_test[rows], self.clean_mp, ap
        )
        return score.with_mp(tampered_mp, n_test)


@torch.no_grad()
def service_answers(
    parties: Sequence[TrainedParty], attacker: int, rows: np.ndarray, x_attacker: np.ndarray
) -> np.ndarray:
    """(m,) the classes the deployed model answers for training ``rows`` (m,) when the
    attacker submits ``x_attacker`` (m, d_k) as its features of them and every other party
    its own: what a backdoor attacker sees of its trigger at inference, here on rows whose
    labels it already holds (``tuning_trained``). No label is read."""
    hs = []
    for k, p in enumerate(parties):
        p.bottom.eval()
        x = p.X_train[torch.as_tensor(rows, device=p.X_train.device)]
        if k == attacker:
            x = torch.as_tensor(np.asarray(x_attacker, dtype=np.float32), device=x.device)
        hs.append(p.bottom(x))
    top = cast(TrainedActive, parties[-1]).top
    top.eval()
    return top(hs).argmax(dim=1).cpu().numpy()


class QueryModel(torch.nn.Module):
    """The released trained VFL model as a differentiable function of every party's input.

    Only attacks whose threat model releases the model (``AttackInfo.query_model``) get
    one; the parties' data are not reachable through it.
    """

    def __init__(self, parties: Sequence[TrainedParty]) -> None:
        super().__init__()
        import copy

        self.bottoms = torch.nn.ModuleList([copy.deepcopy(p.bottom).cpu().eval() for p in parties])
        self.top = copy.deepcopy(cast(TrainedActive, parties[-1]).top).cpu().eval()
        for param in self.parameters():
            param.requires_grad_(False)

    def forward(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        """[(N, d_0), ..., (N, d_{K-1})] -> (N, C) logits."""
        return self.top([b(x) for b, x in zip(self.bottoms, inputs, strict=True)])
