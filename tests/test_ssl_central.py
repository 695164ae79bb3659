"""Central SSL sanity (``benchmarks.ssl_central_parts``, ``benchmarks.ssl_central``).

Real pretraining on the built-in ``digits`` set (8x8 images, left 8x4 half: 1437 rows x
32 pixels), no mocks: the SSL loss goes down, the BN heads keep the representations
spread while the plain heads (``head_bn=False``, the old code) collapse, the evaluation
helpers are deterministic in the seed, and the benchmark's CLI prints one JSON object.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from benchmarks import ssl_central
from benchmarks import ssl_central_parts as central
from trainables.data import load_dataset
from trainables.ssl.hssl.augment import ImageLayout, TabularLayout, make_view
from trainables.ssl.hssl.base import Widths

TINY = Widths(hidden=16, emb=8, proj=32, proj_out=32, pred=8)


@pytest.fixture(scope="module")
def digits() -> central.PartyView:
    return central.party_view(load_dataset("digits"))


def test_digits_view_is_the_left_half(digits: central.PartyView) -> None:
    assert digits.layout == ImageLayout((8, 4))
    assert digits.X_train.shape[1] == 32 and digits.metric == "accuracy"
    assert digits.X_train.min() >= 0.0 and digits.X_train.max() <= 1.0  # minmax on train


def test_bn_heads_learn_without_collapse_plain_heads_collapse(
    digits: central.PartyView,
) -> None:
    """SimSiam, 3 epochs, paper widths: with the reference code's BN heads the loss falls
    and the encoder output keeps its spread; the plain heads solve the loss by collapse
    (projector output std per dimension -> ~0, encoder spread shrinking)."""
    bn = central.pretrain(digits, "simsiam", 3, 0)
    assert bn.loss[-1] < bn.loss[0] - 0.1
    assert bn.std[-1]["emb"] > 0.8 * bn.std[0]["emb"]
    plain = central.pretrain(digits, "simsiam", 3, 0, widths=Widths(head_bn=False))
    assert plain.std[-1]["z"] < 0.005 < bn.std[-1]["z"]
    assert plain.std[-1]["emb"] < 0.75 * plain.std[0]["emb"]


def test_byol_lowers_its_loss(digits: central.PartyView) -> None:
    out = central.pretrain(digits, "byol", 3, 1, widths=TINY, batch=256)
    assert len(out.loss) == 3 and len(out.std) == 4
    assert out.loss[-1] < out.loss[0]
    assert out.std[-1]["emb"] > 0.5 * out.std[0]["emb"]


def test_moco_lowers_its_loss_once_the_queue_is_real(digits: central.PartyView) -> None:
    """The queue starts as random unit vectors (easy negatives); after about 1.4 epochs
    (4096 / 2 x 1437) it holds real targets, the loss jumps, then falls."""
    out = central.pretrain(digits, "moco", 6, 1, widths=TINY, batch=256)
    assert out.loss[-1] < out.loss[1]
    assert out.std[-1]["emb"] > 0.5 * out.std[0]["emb"]


def test_encoder_init_does_not_depend_on_the_method(digits: central.PartyView) -> None:
    """The benchmark computes the random-init and supervised baselines once per seed."""
    d = central.in_width(digits)
    towers = [
        central.build_tower(d, m, central.widths_for(m, TINY), 5) for m in ssl_central.METHODS
    ]
    first = [*towers[0].bottom.parameters(), *towers[0].top.parameters()]
    for t in towers[1:]:
        same = [*t.bottom.parameters(), *t.top.parameters()]
        assert all(torch.equal(a, b) for a, b in zip(first, same, strict=True))
    assert towers[2].projector[-2].out_features == central.MOCO_DIM  # MoCo: [.., .., 128]
    other = central.build_tower(d, "simsiam", TINY, 6)
    assert not torch.equal(other.bottom[0].weight, towers[0].bottom[0].weight)


def test_bn_heads_hold_no_buffers() -> None:
    """PMA averages the heads' state: BN must add learnable weights only."""
    tower = central.build_tower(10, "simsiam", TINY, 0)
    assert not list(tower.projector.buffers()) and not list(tower.predictor.buffers())
    assert any(isinstance(m, torch.nn.BatchNorm1d) for m in tower.projector)


def test_probe_and_finetune_are_deterministic_in_the_seed(digits: central.PartyView) -> None:
    rows = central.labeled_rows(digits, 60, 0)
    assert np.array_equal(rows, central.labeled_rows(digits, 60, 0))
    assert not np.array_equal(rows, central.labeled_rows(digits, 60, 1))
    assert len(np.unique(digits.y_train[rows])) == digits.n_classes
    enc = central.encoder_of(central.build_tower(32, "simsiam", TINY, 0))
    first = central.linear_probe(enc, digits, rows)
    assert first == central.linear_probe(enc, digits, rows)
    assert 1 / digits.n_classes < first <= 1.0  # better than chance on random features
    ft = central.FineTune(lr=0.01, epochs=3, batch=16)
    a, trained = central.fine_tune(enc, digits, rows, 0, ft)
    b, _ = central.fine_tune(enc, digits, rows, 0, ft)
    assert a == b
    assert not torch.equal(trained[0][0].weight, enc[0][0].weight)  # a copy was trained


def test_strong_augmentation_is_an_option(digits: central.PartyView) -> None:
    x = torch.as_tensor(digits.X_train[:64])
    strong = dataclasses.replace(digits.layout, aug="strong")
    one = make_view(x, strong, torch.Generator().manual_seed(0))
    again = make_view(x, strong, torch.Generator().manual_seed(0))
    light = make_view(x, digits.layout, torch.Generator().manual_seed(0))
    assert one.shape == x.shape and torch.equal(one, again)
    assert (one - x).abs().mean() > (light - x).abs().mean()  # stronger than the default


def test_cli_prints_one_json_object(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    progress = tmp_path / "runs.jsonl"
    ssl_central.main(["--datasets", "digits", "--methods", "simsiam", "moco", "--seeds", "2",
                      "--epochs", "1", "--labels", "40", "--ft-epochs", "1",
                      "--widths", "16", "8", "32", "8", "--progress", str(progress)])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    row = out["table"]["digits"]["moco"]
    assert row["probe"]["pretrained"]["n"] == 2 and len(row["ssl_loss_per_epoch"]) == 1
    assert set(row["pretrained_minus_random"]) == {"probe", "finetune"}
    assert len(row["std_emb_per_epoch"]) == 2  # random init + 1 epoch
    assert out["settings"]["pretrain"]["widths"]["head_bn"] is True
    assert len(progress.read_text().splitlines()) == 4  # 2 methods x 2 seeds
    ssl_central.main(["--datasets", "digits", "--methods", "moco", "--seeds", "2",
                      "--from-progress", str(progress)])  # fmt: skip
    again = json.loads(capsys.readouterr().out)
    assert again["table"]["digits"]["moco"] == row and list(again["table"]["digits"]) == ["moco"]


def test_shared_views(shared_data: Path) -> None:
    """mnist: the left half of the halves split; adult: party 0's block, mask columns."""
    mnist = central.party_view(load_dataset("mnist", shared_data))
    assert mnist.X_train.shape == (8000, 392) and mnist.layout == ImageLayout((28, 14))
    adult = central.party_view(load_dataset("adult", shared_data))
    assert isinstance(adult.layout, TabularLayout) and adult.metric == "auc"
    assert central.in_width(adult) == adult.X_train.shape[1] + adult.layout.n_extra
