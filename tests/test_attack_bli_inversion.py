"""BLI's one inversion (``bli_inversion.invert_dummies``) and its matches: the closed-form
gradient against autograd, the Gram-eigen basis against the SVD's (and the labels each
inverts to), the default path using them; the plain match of a Linear-ReLU bottom
(``PlainMLP``) against autograd's J^T, J and double backward (``bli.autograd_match``),
and the labels each inverts to."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from trainables.attacks import bli
from trainables.attacks.bli_inversion import (
    PlainMLP,
    gradient,
    gram_basis,
    invert_dummies,
    whitened,
)
from trainables.errors import ConfigError
from trainables.models import mlp

PARAMS: dict[str, Any] = {**bli.BatchLabelInference.defaults, "steps": 400, "patience": 100}


def _case(rows: int, classes: int, seed: int = 0) -> tuple[torch.nn.Module, torch.Tensor, Any]:
    """A small MLP bottom, a batch and the gradient mean CE sends back for true labels."""
    torch.manual_seed(seed)
    model = mlp(6, (5,), classes).eval()
    x = torch.randn(rows, 6)  # (B, d)
    labels = torch.randint(0, classes, (rows,))
    with torch.no_grad():
        h = model(x) + torch.randn(rows, classes)  # (B, C) the top's logits
    grad = (F.softmax(h, dim=1) - F.one_hot(labels, classes).float()) / rows  # (B, C)
    return model, x, grad


def _projection(basis: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Basis-free forms: the projector onto the span, and the projection of G (basis @ t)."""
    b = basis.astype(np.float64)
    return b @ b.T, b @ target.astype(np.float64)


@pytest.mark.parametrize("rows", [40, 3])  # P = 65 <= B*C = 160; P > B*C = 12 (the J J^T side)
def test_gram_basis_spans_the_svd_range_with_the_same_target(rows: int) -> None:
    model, x, grad = _case(rows, 4)
    jac = bli.jacobian(model, x)
    assert jac is not None
    observed = jac.T @ grad.reshape(-1).double()  # (P,)
    fast = gram_basis(jac, observed)
    assert fast is not None
    slow = bli.svd_basis(jac, observed)
    assert fast[0].shape == slow[0].shape  # the same rank
    assert np.allclose(fast[0].T @ fast[0], np.eye(fast[0].shape[1]), atol=1e-5)  # orthonormal
    for a, b in zip(_projection(*fast), _projection(*slow), strict=True):
        assert np.allclose(a, b, atol=1e-5)
    # and that projection is G's own: basis^T G from dL/dθ alone
    assert np.allclose(fast[0] @ (fast[0].T @ grad.reshape(-1).numpy()), _projection(*slow)[1])


def test_gram_basis_defers_to_the_svd_when_the_rank_is_not_clear_cut() -> None:
    q, _ = torch.linalg.qr(torch.randn(30, 30, dtype=torch.float64))
    s = torch.tensor([1.0, 0.5, 0.1, 1e-7] + [0.0] * 6, dtype=torch.float64)  # s_4 at the rule
    jac = q[:, :10] * s  # (30, 10)
    assert gram_basis(jac, torch.ones(10, dtype=torch.float64)) is None
    s[3] = 1e-3  # a clear rank of 4
    got = gram_basis(q[:, :10] * s, torch.ones(10, dtype=torch.float64))
    assert got is not None and got[0].shape == (30, 4)


def test_closed_form_gradient_equals_autograd() -> None:
    rng = np.random.default_rng(1)
    n, c, r = 7, 5, 12
    basis = np.linalg.qr(rng.standard_normal((n * c, r)))[0].astype(np.float32)  # (BC, r)
    target = rng.standard_normal(r).astype(np.float32)
    h0 = rng.standard_normal((n, c)).astype(np.float32)
    both = rng.standard_normal((2, n, c)).astype(np.float32)
    scale = float((target**2).sum())
    grad, got_loss = gradient(np.stack([h0, 0 * h0]), both, whitened(basis, target))
    zv = torch.tensor(both, dtype=torch.float64, requires_grad=True)
    dummy = (F.softmax(torch.tensor(h0).double() + zv[0], 1) - F.softmax(zv[1], 1)) / n
    resid = dummy.reshape(-1) @ torch.tensor(basis).double() - torch.tensor(target).double()
    loss = (resid**2).sum() / scale
    (auto,) = torch.autograd.grad(loss, [zv])
    assert np.isclose(got_loss, float(loss.detach()), rtol=1e-5)
    assert np.allclose(grad, auto.numpy(), rtol=1e-4, atol=1e-7)
    assert np.abs(auto.numpy()).max() > 1e-3  # not a trivially zero gradient


@pytest.mark.parametrize("extra", [{}, {"init_scale": 0.1}, {"match_tol": 1e-6}])
def test_the_gram_basis_inverts_to_the_labels_of_the_svd_basis(extra: dict[str, Any]) -> None:
    model, x, grad = _case(24, 4)
    params = {**PARAMS, **extra}
    jac = bli.jacobian(model, x)
    assert jac is not None
    observed = jac.T @ grad.reshape(-1).double()
    with torch.no_grad():
        h0 = model(x).numpy()
    slow = invert_dummies(h0, whitened(*bli.svd_basis(jac, observed)), params, 3)
    fast, ran = bli.invert(model, x, grad, params, 3)
    assert ran == "whitened"
    assert fast.shape == (24,) and np.array_equal(fast, slow)


def test_default_path_uses_the_fast_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real_basis, real_invert = bli.gram_basis, bli.invert_dummies

    def basis_spy(*args: Any) -> Any:
        calls.append("gram_basis")
        return real_basis(*args)

    def invert_spy(*args: Any) -> Any:
        calls.append("invert_dummies")
        return real_invert(*args)

    monkeypatch.setattr(bli, "gram_basis", basis_spy)
    monkeypatch.setattr(bli, "invert_dummies", invert_spy)
    model, x, grad = _case(24, 4)
    bli.invert(model, x, grad, PARAMS, 0)
    assert calls == ["gram_basis", "invert_dummies"]


def test_a_jacobian_too_large_takes_the_plain_match_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bli, "MAX_JACOBIAN", 10)
    model, x, grad = _case(24, 4)
    assert bli.jacobian(model, x) is None
    labels, ran = bli.invert(model, x, grad, {**PARAMS, "steps": 20}, 0)
    assert ran == "plain"
    assert labels.shape == (24,) and labels.min() >= 0 and labels.max() < 4


def _autograd_jacobian(model: torch.nn.Module, x: torch.Tensor) -> np.ndarray:
    jac = bli.jacobian(model, x)
    assert jac is not None
    return jac.numpy()  # (BC, P) in named_parameters order


def test_plain_mlp_applies_the_jacobian_and_its_transpose_of_autograd() -> None:
    torch.manual_seed(2)
    model = torch.nn.Sequential(  # two hidden layers; input column 1 zero on every row
        torch.nn.Linear(5, 6), torch.nn.ReLU(), torch.nn.Linear(6, 4), torch.nn.ReLU(),
        torch.nn.Linear(4, 3),
    ).eval()  # fmt: skip
    x = torch.randn(9, 5)
    x[:, 1] = 0.0
    grad = torch.randn(9, 3)
    jac = _autograd_jacobian(model, x)  # (27, P)
    plain = PlainMLP(model, x.numpy(), grad.numpy())
    assert plain.keep.tolist() == [0, 2, 3, 4]
    # J^T g: the batch gradient, with the zero column's weight gradients left out
    flat = np.concatenate([o.reshape(-1) for o in plain.observed])
    want = jac.T @ grad.reshape(-1).double().numpy()  # (P,)
    w0 = want[:30].reshape(6, 5)
    assert np.allclose(w0[:, 1], 0.0)
    assert np.allclose(flat, np.concatenate([w0[:, [0, 2, 3, 4]].ravel(), want[30:]]), atol=1e-5)
    # J t for a tangent t, and the loss's gradient 2 J (J^T G' - J^T G) / |J^T G|^2
    g2 = torch.randn(9, 3)
    d, loss = plain(g2.numpy())
    res = jac.T @ (g2 - grad).reshape(-1).double().numpy()
    scale = float((want**2).sum())
    assert np.isclose(loss, float(res @ res) / scale, rtol=1e-4)
    assert np.allclose(d.reshape(-1), 2 * jac @ res / scale, rtol=1e-4, atol=1e-6)
    assert np.abs(d).max() > 1e-3


@pytest.mark.parametrize("extra", [{}, {"init_scale": 0.1}])
def test_plain_mlp_inverts_to_the_labels_of_the_autograd_match(
    extra: dict[str, Any],
) -> None:
    model, x, grad = _case(24, 4)
    params = {**PARAMS, "match": "plain", **extra}
    with torch.no_grad():
        h0 = model(x).numpy()
    slow = invert_dummies(h0, bli.autograd_match(model, x, grad), params, 3)
    fast, ran = bli.invert(model, x, grad, params, 3)
    assert ran == "plain" and np.array_equal(fast, slow)


def test_the_record_says_which_match_ran_and_a_bad_match_is_refused() -> None:
    attack = bli.BatchLabelInference(match="plain")
    assert "bli_match" not in attack.record_extra()  # not run yet
    attack.ran = "plain"
    assert attack.record_extra()["bli_match"] == "plain"
    assert attack.record_extra()["attack_label"] == "bli[match=plain]"
    with pytest.raises(ConfigError, match=r"match='whiten'.*allowed: 'auto'"):
        bli.BatchLabelInference(match="whiten")


def test_the_autograd_match_is_the_plain_mlps_closed_form() -> None:
    """Any bottom's plain match (autograd's double backward) and the Linear-ReLU closed
    form: the same loss and gradient w.r.t. G', so one inversion serves both."""
    model, x, grad = _case(12, 4)
    g = (0.1 * torch.randn(12, 4)).numpy()  # a dummy G'
    d_auto, loss_auto = bli.autograd_match(model, x, grad)(g)
    d_mlp, loss_mlp = PlainMLP(model, x.numpy(), grad.numpy())(g)
    assert np.isclose(loss_auto, loss_mlp, rtol=1e-4) and loss_auto > 1e-3
    assert np.allclose(d_auto, d_mlp, rtol=1e-3, atol=1e-6) and np.abs(d_auto).max() > 1e-3


def test_the_first_inversion_of_a_process_runs_scipys_blas_on_one_thread() -> None:
    """scipy's LAPACK is its own OpenBLAS: imported lazily inside ``threadpool_limits(1)``,
    it was not limited, and a process's first eigh ran on every core (~4 s instead of
    ~0.3 s on a loaded 2-core machine). A fresh interpreter, its first ``invert``: right
    after the eigh, still inside the limit, every OpenBLAS loaded runs one thread."""
    import os
    import subprocess
    import sys

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: OpenBLAS's default is one thread, nothing to tell apart")
    code = """
import sys, torch, threadpoolctl
from trainables.attacks import bli
from trainables.models import mlp
assert "scipy.linalg" not in sys.modules  # the attack's own import is the first
seen, real = [], bli.gram_basis
def spy(*a, **k):
    out = real(*a, **k)
    seen.extend(i["num_threads"] for i in threadpoolctl.threadpool_info()
                if i["internal_api"] == "openblas")
    return out
bli.gram_basis = spy
torch.manual_seed(0)
model = mlp(6, (5,), 3).eval()
x, grad = torch.randn(8, 6), torch.randn(8, 3) / 8
params = {**bli.BatchLabelInference.defaults, "steps": 50, "patience": 10}
bli.invert(model, x, grad, params, seed=0)
print(seen)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = eval(out.stdout.strip().splitlines()[-1])  # each OpenBLAS's threads after the eigh
    assert len(seen) >= 2 and set(seen) == {1}, seen  # numpy's and scipy's: one each
