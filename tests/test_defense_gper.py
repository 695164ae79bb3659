"""GPer's two forms: ours (the paper's text: std of the other classes' weights) and VFLAIR's
code (``form: vflair``: an epsilon, Laplace(0, 2 / epsilon) weights on every class).

VFLAIR's numbers for GPer come from its code, where a smaller value is the stronger
defense; ours reads the value the other way. The check here recomputes VFLAIR's
perturbation as its code does (``calculate_gradient_each_class`` + ``perturb``: one
gradient per class, summed with the weights) and compares it with the stacked form's.
"""

from __future__ import annotations

import pytest
import torch

from trainables.defenses import DEFENSES
from trainables.defenses.stacked import stacked_form
from trainables.errors import ConfigError
from trainables.spec import TrialSpec


def _case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    h = torch.randn(1, 32, 10, generator=gen).requires_grad_(True)  # a stack of one (1, B, C)
    logits = h * 1.5
    y = torch.randint(10, (1, 32), generator=gen)
    (g,) = torch.autograd.grad(
        torch.nn.functional.cross_entropy(logits[0], y[0]), h, retain_graph=True
    )
    return h, logits, y, g


def _perturbed(strength: float, form: str, seed: int = 0) -> torch.Tensor:
    h, logits, y, g = _case()
    defense = DEFENSES.create("gper", strength=strength, seed=seed, form=form)
    stacked = stacked_form(defense)([defense], torch.device("cpu"))  # type: ignore[misc]
    (out,) = stacked.gradients([g], logits, [h], y)
    return out - g  # (1, B, C) the perturbation


def test_vflair_form_is_vflairs_sum_over_every_class() -> None:
    h, logits, _, g = _case()
    eps = 0.5
    # the same weights the defense draws: its own stream, unit Laplace, times 2 / epsilon
    twin = DEFENSES.create("gper", strength=eps, seed=4, form="vflair")
    u = (2.0 / eps) * twin.noise((32, 10), "laplace")  # (B, C)
    expected = torch.zeros_like(g[0])
    for c in range(10):  # VFLAIR: the gradient as if every row were class c
        loss_c = torch.nn.functional.cross_entropy(logits[0], torch.full((32,), c))
        (g_c,) = torch.autograd.grad(loss_c, h, retain_graph=True)
        expected += u[:, c : c + 1] * g_c[0]
    got = _perturbed(eps, "vflair", seed=4)[0]
    assert torch.allclose(got, expected, atol=1e-6, rtol=1e-4)
    # the standard form leaves the true class's weight at zero: not the same sum
    assert not torch.allclose(_perturbed(eps, "standard", seed=4)[0], expected, atol=1e-3)


def test_the_forms_read_the_strength_the_opposite_way() -> None:
    sizes = {
        form: [float(_perturbed(s, form).norm()) for s in (0.01, 0.1, 1.0, 10.0)]
        for form in ("standard", "vflair")
    }
    assert sizes["standard"] == sorted(sizes["standard"])  # a larger std: more noise
    assert sizes["vflair"] == sorted(sizes["vflair"], reverse=True)  # a larger epsilon: less
    assert float(_perturbed(0.0, "vflair").norm()) == 0.0  # 0 is off in both (VFLAIR too)


def test_form_is_checked_and_set_by_the_vflair_procedure() -> None:
    with pytest.raises(ConfigError, match=r"form='epsilon'.*allowed: 'standard', 'vflair'"):
        DEFENSES.create("gper", strength=0.1, form="epsilon")
    spec = TrialSpec.build(dataset="digits", defense="gper", defense_param=0.01,
                           procedure="vflair")  # fmt: skip
    assert spec.defense_params == {"form": "vflair"}
    standard = TrialSpec.build(dataset="digits", defense="gper", defense_param=0.01)
    assert standard.defense_params == {}
