"""The model completion's fast path (``completion_fast.py``) computes what the generic
autograd loop computes: the same draws (by blocks), same head gradient, same Adam and EMA, to float
rounding; it runs at the defaults and nowhere else."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from trainables.attacks import completion_fast as cf
from trainables.attacks.completion import (
    COMPLETION_DEFAULTS,
    CompletionModel,
    _soft_ce,
    _train_autograd,
    complete_model,
    complete_models,
)

B, W, C = 4, 5, 3  # batch, bottom width, classes


def _draw(seed: int) -> cf.Block:
    gen, rng = torch.Generator().manual_seed(seed), np.random.default_rng(seed)
    return cf.draw_block(gen, rng, 3, B, 7, 11, (W,), 0.05, 0.75)


def test_draw_block_draws_each_kind_in_one_call_in_its_order() -> None:
    """A block's draws are one call per kind, in a fixed order, so a completion's numbers
    depend only on its seed and the block schedule (``block_steps``), which both paths share."""
    got = _draw(3)
    gen, rng = torch.Generator().manual_seed(3), np.random.default_rng(3)
    assert torch.equal(got.il, torch.randint(7, (3, B), generator=gen))
    assert torch.equal(got.eps_l, torch.randn((3, B, W), generator=gen))
    assert torch.equal(got.iu, torch.randint(11, (3, B), generator=gen))
    assert torch.equal(got.eps_u, torch.randn((3, B, W), generator=gen))
    keys = torch.rand((3, 2 * B), generator=gen, dtype=torch.float64)
    assert torch.equal(got.perm, torch.argsort(keys, dim=1, stable=True))
    assert all(sorted(row.tolist()) == list(range(2 * B)) for row in got.perm)
    lam = rng.beta(0.75, 0.75, size=3)
    assert np.array_equal(got.lam, np.maximum(lam, 1.0 - lam)) and (got.lam >= 0.5).all()
    # supervised (no unlabeled rows): the labeled rows and their jitter only
    gen = torch.Generator().manual_seed(3)
    only = cf.draw_block(gen, np.random.default_rng(3), 3, B, 7, 0, (W,), 0.05, 0.75)
    assert torch.equal(only.il, got.il) and torch.equal(only.eps_l, got.eps_l)
    assert only.iu.numel() == 0 and only.perm.numel() == 0
    assert torch.equal(torch.randint(11, (3, B), generator=gen), got.iu)  # nothing else drawn


def test_blocks_end_at_each_epoch_and_cover_every_step() -> None:
    cases = ((25 * 1024, 1024, 16, (32,)), (120, 40, 2, (5,)), (7, 0, 1, (5,)))
    for total, epoch, bs, feat in cases:
        done, sizes = 0, []
        while done < total:
            sizes.append(cf.block_steps(done, total, epoch, bs, feat))
            done += sizes[-1]
            assert epoch == 0 or done % epoch == 0 or sizes[-1] == cf.BLOCK_STEPS
        assert done == total and max(sizes) <= cf.BLOCK_STEPS


def _generic_loss(
    head: nn.Linear, f_u: torch.Tensor, f_all: torch.Tensor, t_l: torch.Tensor, lam: float,
    perm: torch.Tensor, wu: float, inv_t: float,
) -> torch.Tensor:  # fmt: skip
    """The generic loop's MixMatch loss of one step on bottom outputs (identity bottom)."""
    with torch.no_grad():
        sharp = torch.softmax(head(f_u), dim=1) ** inv_t
        t_u = sharp / sharp.sum(dim=1, keepdim=True)
    t_all = torch.cat([t_l, t_u])
    out = head(lam * f_all + (1 - lam) * f_all[perm])
    t_mix = lam * t_all + (1 - lam) * t_all[perm]
    l_u = ((torch.softmax(out[B:], dim=1) - t_mix[B:]) ** 2).mean()
    return _soft_ce(out[:B], t_mix[:B]) + wu * l_u


def test_head_gradient_equals_autograd_of_the_generic_loss() -> None:
    torch.manual_seed(0)
    xl, xu = torch.randn(7, W), torch.randn(11, W)
    yl = F.one_hot(torch.arange(7) % C, C).float()
    block = _draw(5)
    inp = cf.block_inputs(nn.Identity(), xl, yl, xu, block, 0.05)
    head = nn.Linear(W, C)
    theta = torch.cat([head.weight, head.bias.unsqueeze(1)], 1).detach().numpy()
    for s, wu in ((0, 0.0), (1, 12.5), (2, 50.0)):
        x_l = xl[block.il[s]] + 0.05 * block.eps_l[s]
        x_u = xu[block.iu[s]] + 0.05 * block.eps_u[s]
        lam = float(block.lam[s])
        head.zero_grad()
        loss = _generic_loss(
            head, x_u, torch.cat([x_l, x_u]), yl[block.il[s]], lam, block.perm[s], wu, 1 / 0.8
        )
        loss.backward()
        want = torch.cat([head.weight.grad, head.bias.grad.unsqueeze(1)], 1).numpy()
        got = cf.head_grads(
            theta[None], inp.feats[s][None], inp.t0[s][None], inp.mix_u[s][None], wu, 1 / 0.8
        )[0]  # K = 1
        assert np.abs(want).max() > 1e-3  # a gradient that could disagree
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_adam_and_ema_equal_torch_adam_and_the_ema_updater() -> None:
    rng = np.random.default_rng(0)
    theta = rng.normal(size=(C, W + 1)).astype(np.float32)
    param = nn.Parameter(torch.tensor(theta))
    opt = torch.optim.Adam([param], lr=2e-3, foreach=True)
    ema = param.detach().clone()
    mine = cf.AdamEma(theta.copy(), 2e-3, 0.99)
    for _ in range(5):
        grad = rng.normal(size=theta.shape).astype(np.float32)
        param.grad = torch.tensor(grad)
        opt.step()
        ema.mul_(0.99).add_(param.detach(), alpha=0.01)
        mine.step(grad)
        np.testing.assert_allclose(mine.theta, param.detach().numpy(), rtol=0, atol=1e-6)
        np.testing.assert_allclose(mine.ema, ema.numpy(), rtol=0, atol=1e-6)
    assert np.abs(mine.theta - theta).max() > 5e-3  # five steps of ~lr moved it


def _data() -> tuple[nn.Module, np.ndarray, np.ndarray]:
    torch.manual_seed(0)
    bottom = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))  # (N, 6) -> (N, 3)
    rng = np.random.default_rng(0)
    y = np.arange(60) % 3
    return bottom, (rng.normal(size=(60, 6)) + y[:, None]).astype(np.float32), y


def _complete(**params: Any) -> dict[str, torch.Tensor]:
    bottom, X, y = _data()
    p = {"epochs": 3, "steps_per_epoch": 40, **params}
    return complete_model(bottom, X[:12], y[:12], X, 3, p, seed=0).state_dict()


def _generic(steps: bool = False, **params: Any) -> Any:
    """The generic loop on what ``complete_model`` would train, forced: its weights, or
    its number of steps."""
    bottom, X, y = _data()
    p: dict[str, Any] = {**COMPLETION_DEFAULTS, "epochs": 3, "steps_per_epoch": 40, **params}
    data = (torch.tensor(X[:12]), F.one_hot(torch.tensor(y[:12]), 3).float(), torch.tensor(X))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = CompletionModel(copy.deepcopy(bottom).eval(), 3, 3, str(p["head"]))
        gen, rng = torch.Generator().manual_seed(0), np.random.default_rng(0)
        ema = _train_autograd(model, data, gen, rng, p)
    return ema.steps if steps else ema.state_dict()


def test_fast_path_runs_at_the_defaults_and_agrees_with_the_generic_loop() -> None:
    assert cf.applies(COMPLETION_DEFAULTS, 100)
    fast, generic = _complete(), _generic()
    assert not all(torch.equal(fast[k], generic[k]) for k in fast)  # another computation
    for k in fast:  # 120 steps later: the same weights to float rounding
        torch.testing.assert_close(fast[k], generic[k], rtol=0, atol=1e-5)


def test_generic_loop_runs_for_other_heads_a_trained_bottom_or_supervised() -> None:
    for change in ({"head": "bn_relu"}, {"bottom_lr_scale": 0.1}, {"method": "supervised"}):
        assert not cf.applies({**COMPLETION_DEFAULTS, **change}, 100)
        got, want = _complete(**change), _generic(**change)
        assert all(torch.equal(got[k], want[k]) for k in want), change  # the same bits
    assert not cf.applies(COMPLETION_DEFAULTS, 0)  # no unlabeled rows to guess


def test_converge_stops_early_on_the_fast_path_where_the_generic_loop_stops() -> None:
    quiet = {"epochs": 6, "steps_per_epoch": 40, "stop_patience": 1, "stop_tol": 1.0}
    assert cf.applies({**COMPLETION_DEFAULTS, **quiet}, 60)
    bottom, X, y = _data()
    assert complete_model(bottom, X[:12], y[:12], X, 3, quiet, seed=0).steps == 40
    p = {"epochs": 10, "steps_per_epoch": 40, "stop_patience": 2, "stop_tol": 0.2}
    fast = complete_model(bottom, X[:12], y[:12], X, 3, p, seed=0)
    assert fast.steps == _generic(**p, steps=True) < 400  # same checks, same verdicts


def test_stacked_completions_with_a_convergence_stop_each_stop_as_alone() -> None:
    """A convergence stop in a stack: each head stops at the epoch it stops at alone (its
    own draws and checks), is frozen there while the others go on, and ends with the
    weights it has alone."""
    bottom, X, y = _data()
    p = {"epochs": 10, "steps_per_epoch": 40, "stop_patience": 2, "stop_tol": 0.2}
    jobs = [(bottom, X[:12], y[:12], X, seed) for seed in (0, 1, 2)]
    together = complete_models(jobs, 3, p)
    alone = [complete_model(b, xl, yl, xu, 3, p, seed) for b, xl, yl, xu, seed in jobs]
    for one, many in zip(alone, together, strict=True):
        assert many.steps == one.steps < 400  # type: ignore[operator]  # each stopped early
        for k, v in one.state_dict().items():
            torch.testing.assert_close(many.state_dict()[k], v, rtol=0, atol=1e-6)
    assert len({m.steps for m in together}) > 1  # they stopped at different epochs
