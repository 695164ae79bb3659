"""BLI's inversion (``invert_dummies``: VFLAIR's dummy logits trained with Adam to match
the observed batch gradient) and its matches in closed form: the whitened one, and the
plain one for Linear-ReLU bottoms (``PlainMLP``); ``bli.py`` holds the attack and the
autograd match every other bottom uses (``autograd_match``).

Why: at the defaults BLI was the costliest attack per digits cell (issue 17): a double SVD
of the (B*C, P) Jacobian J (~60% of its CPU time) and ~1k steps of autograd, softmax and
torch.optim.Adam on two (B, C) arrays (~40%). The same computation needs less:
- the whitening needs an orthonormal basis U of J's range and U^T G from dL/dθ = J^T G
  only. The eigendecomposition of the smaller Gram matrix gives both: with J^T J = V L V^T
  (P <= B*C), U = J V L^(-1/2) and U^T G = L^(-1/2) V^T dL/dθ; with J J^T = U L U^T,
  U^T G = L^(-1) U^T J dL/dθ. Rank: the SVD keeps s > 1e-7 s_max, i.e. L > 1e-14 L_max;
  the Gram's eigenvalues carry absolute rounding ~1e-16 L_max, so an eigenvalue within
  [1e-15, 1e-13] L_max cannot be told apart: then ``gram_basis`` returns None and the SVD
  decides. The basis spans the same range, so the whitened distance is the same function
  (digits seeds 0-2: orthonormal to 4e-8, projector within 7e-9 of the SVD's).
- the loss |U^T G' - t|^2 / |t|^2 of G' = (softmax(H + Z) - softmax(V)) / B has the
  gradient 2 U (U^T G' - t) / |t|^2 w.r.t. G', and through each softmax p the map
  D -> p * (D - sum(D * p)); Adam (torch's defaults and formulas) runs in numpy float32.
Float operations differ from autograd's (order of sums, another basis of the same
range), so the gradients agree to float rounding, not bit for bit.
Where J does not fit in memory the match is the plain one (VFLAIR's): ``PlainMLP`` applies
J^T and J as a backward and a forward-mode pass in closed form, the same Adam loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

BETAS, EPS = (0.9, 0.999), 1e-8  # torch.optim.Adam's defaults, as the generic path uses
KEEP = 1e-14  # the SVD's rank rule s > 1e-7 s_max, squared
AMBIGUOUS = (1e-15, 1e-13)  # Gram eigenvalues (relative) too close to KEEP to decide


def gram_basis(jac: torch.Tensor, observed: torch.Tensor) -> tuple[np.ndarray, np.ndarray] | None:
    """(basis (BC, r), target (r,)) float32 from the Gram matrix of ``jac`` (BC, P) float64
    and ``observed`` = J^T G (P,); None when the rank is not clear-cut (use the SVD)."""
    import scipy.linalg  # lazy: worker start-up imports every attack

    j, obs = jac.numpy(), observed.numpy()
    rows, cols = j.shape
    wide = cols > rows  # decompose the smaller of J^T J (P, P) and J J^T (BC, BC)
    gram = j @ j.T if wide else j.T @ j  # numpy: a symmetric product (syrk)
    lam, vec = scipy.linalg.eigh(gram, driver="evd", overwrite_a=True, check_finite=False)
    lam, vec = lam[::-1], vec[:, ::-1]  # descending, as the SVD's order
    top = float(lam[0])
    if top <= 0.0:
        return None
    rel = lam / top
    if bool(((rel > AMBIGUOUS[0]) & (rel < AMBIGUOUS[1])).any()):
        return None
    keep = rel > KEEP
    lam, vec = lam[keep], np.ascontiguousarray(vec[:, keep])  # (r,), (BC or P, r)
    if wide:
        basis = vec  # (BC, r)
        target = (vec.T @ (j @ obs)) / lam  # (r,) = U^T G
    else:
        root = np.sqrt(lam)
        basis = (j @ vec) / root  # (BC, r)
        target = (vec.T @ obs) / root  # (r,)
    return basis.astype(np.float32), target.astype(np.float32)


SIGN = np.array([1.0, -1.0], dtype=np.float32).reshape(2, 1, 1)  # G' = (p - q) / B

# G' (B, C) -> (d loss / d G' (B, C), loss): the match loss and its gradient in closed form
Match = Callable[[np.ndarray], tuple[np.ndarray, float]]


def whitened(basis: np.ndarray, target: np.ndarray) -> Match:
    """|U^T G' - t|^2 / |t|^2 (basis U: (BC, r), target t: (r,)): the whitened match."""
    scale = float((target**2).sum()) or 1.0  # as the generic path: a float32 sum

    def match(g: np.ndarray) -> tuple[np.ndarray, float]:
        res = g.reshape(-1) @ basis - target  # (r,)
        return ((2.0 / scale) * (basis @ res)).reshape(g.shape), float(res @ res) / scale

    return match


class PlainMLP:
    """VFLAIR's own, unwhitened match |J^T G' - J^T G|^2 / |J^T G|^2 for a Linear-ReLU
    stack (``stacked.stackable_module``), without a Jacobian: J^T is the backward pass and
    J the forward-mode one, both in closed form on the batch's stored activations. Its
    gradient w.r.t. G' is 2 J (J^T G' - J^T G) / |J^T G|^2. Why: at B*C*P beyond what a
    Jacobian may hold (MNIST at batch 2048: 20,480 x 12,906) this is a few matrix products
    per step instead of autograd's double backward. Input columns that are zero on every
    row (MNIST's borders) drop out: their weight gradients are zero in both terms."""

    def __init__(self, model: nn.Module, x: np.ndarray, grad: np.ndarray) -> None:
        layers = [model] if isinstance(model, nn.Linear) else list(model.children())
        a = x.astype(np.float32)
        self.keep = np.flatnonzero(np.abs(a).sum(axis=0) > 0)  # input columns not all zero
        a = np.ascontiguousarray(a[:, self.keep])
        self.steps: list[tuple[str, Any]] = []  # ("linear", (W (out, in), a_in (B, in)))
        for i, layer in enumerate(layers):  # or ("relu", mask (B, width))
            if isinstance(layer, nn.Linear):
                w = layer.weight.detach().numpy().astype(np.float32)
                w = np.ascontiguousarray(w[:, self.keep]) if i == 0 else w
                self.steps.append(("linear", (w, a)))
                a = a @ w.T + layer.bias.detach().numpy()
            else:
                mask = (a > 0).astype(np.float32)
                self.steps.append(("relu", mask))
                a = a * mask
        self.observed = self.backward(grad.astype(np.float32))
        self.scale = sum(float((o**2).sum()) for o in self.observed) or 1.0

    def backward(self, g: np.ndarray) -> list[np.ndarray]:
        """J^T g: per Linear, in order, dL/dW (out, in) then dL/db (out,); g: (B, C)."""
        out: list[np.ndarray] = []
        first = next(i for i, (kind, _) in enumerate(self.steps) if kind == "linear")
        for i in range(len(self.steps) - 1, -1, -1):
            kind, held = self.steps[i]
            if kind == "relu":
                g = g * held
                continue
            w, a_in = held
            out[:0] = [g.T @ a_in, g.sum(axis=0)]
            if i > first:
                g = g @ w  # (B, in)
        return out

    def forward(self, tangent: list[np.ndarray]) -> np.ndarray:
        """J t (B, C): the output's change along parameter change ``tangent``."""
        d: np.ndarray | float = 0.0
        k = 0
        for kind, held in self.steps:
            if kind == "relu":
                d = d * held
                continue
            w, a_in = held
            dw, db = tangent[k], tangent[k + 1]
            k += 2
            step = a_in @ dw.T + db
            d = step if isinstance(d, float) else d @ w.T + step
        assert isinstance(d, np.ndarray)
        return d

    def __call__(self, g: np.ndarray) -> tuple[np.ndarray, float]:
        res = [a - b for a, b in zip(self.backward(g), self.observed, strict=True)]
        loss = sum(float((r**2).sum()) for r in res) / self.scale
        return (2.0 / self.scale) * self.forward(res), loss


def gradient(shift: np.ndarray, both: np.ndarray, match: Match) -> tuple[np.ndarray, float]:
    """(d loss / d[Z, V] (2, B, C), loss) of ``match`` at G' = (softmax(h0 + Z) -
    softmax(V)) / B; both = [Z, V], shift = [h0, 0] (2, B, C)."""
    _, n, _ = both.shape
    a = both + shift  # (2, B, C) the two softmaxes' inputs
    e = np.exp(a - a.max(axis=2, keepdims=True))
    pq = e / e.sum(axis=2, keepdims=True)  # (2, B, C): softmax(h0 + Z), softmax(V)
    d, loss = match((pq[0] - pq[1]) / n)  # (B, C) dloss/dG'
    dd = SIGN * (d / n)  # (2, B, C) dloss/d(softmax): +d/B for p, -d/B for q
    return pq * (dd - (dd * pq).sum(axis=2, keepdims=True)), loss  # through each softmax


def invert_dummies(h0: np.ndarray, match: Match, params: dict[str, Any], seed: int) -> np.ndarray:
    """(B,) labels: VFLAIR's inversion. Dummy active logits Z and label logits V (B, C),
    from N(0, init_scale^2), trained with Adam (torch's defaults and formulas, in numpy)
    on ``match`` at G' = (softmax(h0 + Z) - softmax(V)) / B; labels = argmax V, once no
    label moved for ``patience`` steps, the match loss is at most ``match_tol``, or after
    ``steps`` (h0: (B, C) own logits)."""
    n, c = h0.shape
    gen = torch.Generator().manual_seed(seed)
    scale_init = float(params["init_scale"])
    z = (scale_init * torch.randn(n, c, generator=gen)).numpy()  # dummy active logits
    v = (scale_init * torch.randn(n, c, generator=gen)).numpy()  # dummy label logits
    both = np.stack([z, v])  # (2, B, C): Adam's parameters
    shift = np.stack([h0, np.zeros_like(h0)])  # (2, B, C)
    m1, m2 = np.zeros_like(both), np.zeros_like(both)
    lr, (b1, b2) = float(params["lr"]), BETAS
    match_tol, patience = float(params["match_tol"]), int(params["patience"])
    labels, stable = both[1].argmax(axis=1), 0
    for t in range(1, int(params["steps"]) + 1):
        grad, loss = gradient(shift, both, match)  # (2, B, C), loss before this step
        m1 += (1.0 - b1) * (grad - m1)
        m2 *= b2
        m2 += (1.0 - b2) * grad * grad
        denom = np.sqrt(m2) / np.sqrt(1.0 - b2**t) + EPS
        both -= (lr / (1.0 - b1**t)) * m1 / denom
        now = both[1].argmax(axis=1)
        stable = stable + 1 if np.array_equal(now, labels) else 0
        labels = now
        if stable >= patience:  # converged: no label moved for a while
            break
        if match_tol and loss <= match_tol:  # the gradients match
            break
    return labels.astype(np.int64)
