"""The roofline benchmark's FLOP counts (issue 67): each formula against torch's own count
(``FlopCounterMode``: 2·m·n·k per matmul, from the shapes) on the same layers, and the
project's shapes. Why: a wrong count makes every GFLOP/s in docs/benchmarks.md wrong,
and the benchmark itself takes minutes, too long for the suite."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from benchmarks import roofline


def counted(fn: object) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()  # type: ignore[operator]
    return int(counter.get_total_flops())


def test_linear_forward_and_backward_match_torch_counts() -> None:
    layer = nn.Linear(7, 5)
    x = torch.randn(11, 7)
    assert counted(lambda: layer(x)) == roofline.linear_flops(11, 7, 5) == 2 * 11 * 7 * 5
    assert counted(lambda: layer(x).sum().backward()) == roofline.linear_flops(11, 7, 5, "weights")
    xg = torch.randn(11, 7, requires_grad=True)
    assert counted(lambda: layer(xg).sum().backward()) == roofline.linear_flops(11, 7, 5, "both")
    layer.requires_grad_(False)
    assert counted(lambda: layer(xg).sum().backward()) == roofline.linear_flops(11, 7, 5, "input")


def test_mlp_counts_match_torch_for_training_and_frozen_stacks() -> None:
    widths = (6, 9, 4)
    net = nn.Sequential(nn.Linear(6, 9), nn.ReLU(), nn.Linear(9, 4))
    x = torch.randn(13, 6)
    assert counted(lambda: net(x).sum().backward()) == roofline.mlp_flops(13, widths, "weights")
    net.requires_grad_(False)
    xg = torch.randn(13, 6, requires_grad=True)
    got = counted(lambda: net(xg).sum().backward())
    assert got == roofline.mlp_flops(13, widths, "input", input_grad=True)


def test_project_shapes() -> None:
    """digits' undefended epoch (2 bottoms 32-32-10 over 1437 rows: the count the
    benchmark's counter gave) and one completion step at B = 16."""
    assert roofline.nn_epoch_flops(1437) == 17_289_984
    bs, c, w = 16, 10, 10
    bottom = 2 * 3 * bs * (32 * 32 + 32 * 10)
    head = 2 * 3 * bs * (w + 1) * c + 2 * 2 * bs * bs * c + 2 * c * 2 * bs * (w + 1)
    assert roofline.completion_step_flops(bs) == bottom + 2 * 2 * bs * bs * c + head
    assert roofline.bli_step_flops(2400, 1000) == 4 * 2400 * 1000
    assert roofline.tbm_row_flops(10, 128, 32) == 3 * 2 * (10 * 128 + 128 * 32) - 2 * 10 * 128
