"""The parts of ``benchmarks.ssl_central`` (not a benchmark itself): the central (no
federation) SSL sanity check, which pretrains one party's encoder and then probes it.

Why here and not in ``trainables``: no training of a sweep runs it; it is a check of the
SSL methods, with its own probe and fine-tuning loop.

What it checks: if SimSiam / BYOL / MoCo pretraining on one party's own view does not beat the same
encoder at random init, no federated variant built on it can (issue 19). Everything here
is the federated code's own pieces: the ``Tower`` and widths of ``base.py``, the methods'
losses, ``make_view``'s augmentations, Adam at 1e-3, the ``BatchSchedule`` shuffling, and
the step of ``SSLParty.local_epoch`` with gamma 0 (FedLocal's local SSL). Evaluation:
a linear probe on the frozen ``represent()`` output and a full fine-tune (encoder + a
linear head) on a seeded choice of labeled rows.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from torch import nn
from torch.nn import functional as F

from trainables.data import Dataset, Scaler, default_scaler_kind, split_samples, vertical_split
from trainables.messages import BatchSchedule
from trainables.ssl.hssl import byol as _byol  # noqa: F401  (registers the methods)
from trainables.ssl.hssl import moco as _moco  # noqa: F401
from trainables.ssl.hssl import simsiam as _simsiam  # noqa: F401
from trainables.ssl.hssl.augment import (
    ImageLayout,
    TabularLayout,
    make_view,
    party_fields,
    with_mask_columns,
)
from trainables.ssl.hssl.base import SSL_METHODS, SSLMethod, Tower, Widths

Layout = TabularLayout | ImageLayout
ViewFn = Callable[[torch.Tensor, Layout, torch.Generator], torch.Tensor]
MOCO_DIM = 128  # FedHSSL: MoCo's projector output [512, 512, 128]


@dataclass(frozen=True)
class PartyView:
    """One party's columns of a dataset, scaled on all of its training rows."""

    X_train: np.ndarray  # (n_train, d) float32
    X_test: np.ndarray  # (n_test, d)
    y_train: np.ndarray  # (n_train,)
    y_test: np.ndarray  # (n_test,)
    layout: Layout
    n_classes: int

    @property
    def metric(self) -> str:
        return "auc" if self.n_classes == 2 else "accuracy"


def party_view(ds: Dataset, n_parties: int = 2, party: int = 0) -> PartyView:
    """Party ``party`` of the default split (mnist halves: 0 = left; tabular: blocks),
    scaled and laid out exactly as ``variants.prepare`` does for a pretraining party."""
    cols = vertical_split(ds, n_parties, "auto")[party]
    raw = ds.X_train[:, cols]
    scaler = Scaler.fit(raw, default_scaler_kind(ds))
    X = scaler.transform(raw)
    layout: Layout
    if ds.image_shape is not None:
        h = ds.image_shape[0]
        layout = ImageLayout((h, len(cols) // h))
    else:
        off = scaler.transform(np.zeros((1, len(cols))))[0]
        fields = party_fields(ds.feature_groups, cols)
        layout = TabularLayout(fields, X.min(axis=0), X.max(axis=0), off)
    X_test = scaler.transform(ds.X_test[:, cols])
    return PartyView(X, X_test, ds.y_train, ds.y_test, layout, ds.n_classes)


def labeled_rows(view: PartyView, n_labeled: int, seed: int) -> np.ndarray:
    """A seeded choice of ``n_labeled`` training rows, every class represented."""
    s = split_samples(len(view.y_train), 1.0, n_labeled, seed=seed, y=view.y_train)
    return s.labeled


# -- pretraining -----------------------------------------------------------------------------
def method_of(name: str, widths: Widths, seed: int) -> SSLMethod:
    if name == "moco":
        return SSL_METHODS.create("moco", widths.proj_out, 4096, 0.5, seed)
    return SSL_METHODS.create(name)


def widths_for(method: str, widths: Widths | None = None) -> Widths:
    """The default widths, with MoCo's smaller projector output (Table II)."""
    w = widths or Widths()
    return dataclasses.replace(w, proj_out=MOCO_DIM) if method == "moco" else w


def build_tower(in_dim: int, method: str, widths: Widths, seed: int) -> Tower:
    """A tower whose initial weights depend on ``seed`` only (not on global RNG state)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed * 1009 + 17)
        return Tower(in_dim, widths, method_of(method, widths, seed * 131 + 1))


def in_width(view: PartyView) -> int:
    extra = view.layout.n_extra if isinstance(view.layout, TabularLayout) else 0
    return view.X_train.shape[1] + extra


@torch.no_grad()
def rep_std(tower: Tower, X: torch.Tensor, layout: Layout) -> dict[str, float]:
    """Collapse check: per-dimension std over rows of the L2-normalised representation
    (``emb``: ``represent()``; ``z``: projector output, BN on these rows' statistics),
    mean over dimensions. A collapsed encoder gives ~0; isotropic unit vectors give
    1/sqrt(dim). ReLU outputs (all >= 0) stay below that even when healthy: compare
    ``emb`` with the same tower at random init. With BN heads ``z`` stays near 1/sqrt(P)
    unless the last BN's learnable scale shrinks dimensions (dimensional collapse)."""
    h = tower.represent(with_mask_columns(X, layout))  # (N, emb)
    z = tower.projector(h)  # (N, P)
    return {
        "emb": float(F.normalize(h, dim=1).std(dim=0).mean()),
        "z": float(F.normalize(z, dim=1).std(dim=0).mean()),
    }


@dataclass
class Pretrained:
    tower: Tower
    initial: Tower  # the same tower before pretraining (random init, same seed)
    loss: list[float]  # SSL loss per epoch (mean over batches)
    std: list[dict[str, float]]  # rep_std before training and after each epoch


def ssl_epoch(
    tower: Tower,
    opt: torch.optim.Optimizer,
    X: torch.Tensor,
    layout: Layout,
    sched: BatchSchedule,
    epoch: int,
    gen: torch.Generator,
    view_fn: ViewFn,
) -> float:
    """One epoch of plain local SSL: the step of ``SSLParty.local_epoch`` with gamma 0."""
    losses = []
    for ref in sched.refs(epoch):
        x = X[torch.as_tensor(sched.rows(ref))]  # (B, d)
        v1, v2 = view_fn(x, layout, gen), view_fn(x, layout, gen)  # (B, d') each
        loss, _, (t1, t2) = tower.two_view_loss(v1, v2)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        tower.update_target()
        tower.method.observe(torch.cat([t1, t2]))
        losses.append(float(loss.detach()))
    return float(np.mean(losses))


def pretrain(
    view: PartyView,
    method: str,
    epochs: int,
    seed: int,
    *,
    widths: Widths | None = None,
    batch: int = 512,
    lr: float = 1e-3,
    view_fn: ViewFn = make_view,
    std_rows: int = 1000,
) -> Pretrained:
    """Pretrain a fresh tower on all of ``view``'s training rows for ``epochs`` epochs."""
    w = widths_for(method, widths)
    tower = build_tower(in_width(view), method, w, seed)
    initial = copy.deepcopy(tower)
    X = torch.as_tensor(view.X_train)
    X_std = torch.as_tensor(view.X_test[:std_rows])
    opt = torch.optim.Adam([p for p in tower.parameters() if p.requires_grad], lr=lr)
    sched = BatchSchedule(len(X), batch, seed)
    gen = torch.Generator().manual_seed(seed * 7 + 1000)
    out = Pretrained(tower, initial, [], [rep_std(tower, X_std, view.layout)])
    for epoch in range(epochs):
        out.loss.append(ssl_epoch(tower, opt, X, view.layout, sched, epoch, gen, view_fn))
        out.std.append(rep_std(tower, X_std, view.layout))
    return out


# -- evaluation --------------------------------------------------------------------------------
def encoder_of(tower: Tower) -> nn.Module:
    """A copy of the tower's encoder (bottom + top): (N, d') -> (N, emb)."""
    return copy.deepcopy(nn.Sequential(tower.bottom, tower.top))


@torch.no_grad()
def features(encoder: nn.Module, X: np.ndarray, layout: Layout) -> np.ndarray:
    """Clean rows (N, d) -> (N, emb) frozen representations."""
    return encoder(with_mask_columns(torch.as_tensor(X), layout)).numpy()


def score(view: PartyView, proba: np.ndarray) -> float:
    """Test metric from (n_test, C) class probabilities: AUC (binary) or accuracy."""
    if view.metric == "auc":
        return float(roc_auc_score(view.y_test, proba[:, 1]))
    return float(np.mean(proba.argmax(axis=1) == view.y_test))


def linear_probe(encoder: nn.Module, view: PartyView, rows: np.ndarray) -> float:
    """Logistic regression (sklearn lbfgs, C=1, deterministic) on the frozen features of
    the labeled ``rows``, standardised with their own mean/std; test metric."""
    H = features(encoder, view.X_train[rows], view.layout)  # (n_lab, emb)
    H_test = features(encoder, view.X_test, view.layout)  # (n_test, emb)
    mu, sd = H.mean(axis=0), H.std(axis=0)
    sd = np.where(sd > 1e-8, sd, 1.0)
    clf = LogisticRegression(C=1.0, max_iter=2000)
    clf.fit((H - mu) / sd, view.y_train[rows])
    proba = np.zeros((len(H_test), view.n_classes))
    proba[:, clf.classes_] = clf.predict_proba((H_test - mu) / sd)
    return score(view, proba)


@dataclass(frozen=True)
class FineTune:
    """Full fine-tuning: encoder + one linear head, Adam, cross-entropy, fixed lr."""

    lr: float = 0.005
    epochs: int = 30
    batch: int = 32


def fine_tune(
    encoder: nn.Module, view: PartyView, rows: np.ndarray, seed: int, ft: FineTune
) -> tuple[float, nn.Module]:
    """Train a copy of ``encoder`` and a seeded linear head on the labeled ``rows``;
    (test metric, the trained encoder)."""
    enc = copy.deepcopy(encoder)
    X = with_mask_columns(torch.as_tensor(view.X_train[rows]), view.layout)  # (n_lab, d')
    y = torch.as_tensor(view.y_train[rows], dtype=torch.int64)
    emb = features(enc, view.X_train[rows[:1]], view.layout).shape[1]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed * 7919 + 5)
        head = nn.Linear(emb, view.n_classes)
    model = nn.Sequential(enc, head)
    opt = torch.optim.Adam(model.parameters(), lr=ft.lr)
    for epoch in range(ft.epochs):
        perm = np.random.default_rng([seed, 77, epoch]).permutation(len(rows))
        for idx in np.array_split(perm, max(1, -(-len(rows) // ft.batch))):
            loss = F.cross_entropy(model(X[torch.as_tensor(idx)]), y[torch.as_tensor(idx)])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    with torch.no_grad():
        logits = model(with_mask_columns(torch.as_tensor(view.X_test), view.layout))
    return score(view, torch.softmax(logits, dim=1).numpy()), enc
