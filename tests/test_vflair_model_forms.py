"""VFLAIR's models and partition as named options (issue 47): its MLP2 start
(``weight_init: vflair``), its trainer's learning-rate schedule (``lr_decay: vflair``), its
MID_model (MID ``form: vflair``) and its image partition (``split_scheme: vflair``). Each
does what VFLAIR's code does, is set by ``procedure: vflair``, and leaves the default
training alone."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from trainables.data import load_dataset, vertical_split
from trainables.defenses import DEFENSES
from trainables.defenses.mid import Bottleneck
from trainables.errors import ConfigError
from trainables.jobs import Job
from trainables.kinds.nn import NNKind
from trainables.models import build_bottom, vflair_init
from trainables.spec import TrialSpec
from trainables.stacked import lr_scale
from trainables.transport.placement import LOCAL
from trainables.trial import incompatibility, prepare_parties, train_prepared

TIMING = {"train_seconds": 0.0, "attack_seconds": 0.0, "created_at": None, "extra": ""}


def _spec(**fields: object) -> TrialSpec:
    base: dict[str, object] = {"dataset": "digits", "epochs": 2, "batch_size": 256}
    return TrialSpec.build(**{**base, **fields})


def test_vflair_decay_is_applied_after_each_epoch_as_vflairs_trainer_does() -> None:
    # LR_Decay(i) runs after epoch i and sets lr / sqrt(i + 1) for the next one
    assert [lr_scale("vflair", e) for e in range(4)] == [
        1.0,
        1.0,
        1 / math.sqrt(2),
        1 / math.sqrt(3),
    ]
    assert [lr_scale("inv_sqrt", e) for e in range(2)] == [1.0, 1 / math.sqrt(2)]


def test_vflair_init_is_xavier_on_mlp2s_first_layer_only() -> None:
    torch.manual_seed(0)
    bottom = build_bottom("mlp2", 392, 10, None, "mnist")
    second = bottom[2].weight.detach().clone()
    vflair_init("mlp2", bottom)
    first = bottom[0].requires_grad_(False)
    bound = math.sqrt(6 / (392 + 32))  # xavier_uniform_
    assert float(first.bias.abs().max()) == 0.0
    assert float(first.weight.abs().max()) <= bound
    assert float(first.weight.std()) == pytest.approx(bound / math.sqrt(3), rel=0.03)
    assert torch.equal(bottom[2].weight, second)  # VFLAIR leaves layer 2 at the default
    other = build_bottom("mlp3", 392, 10, None, "mnist")
    before = [p.detach().clone() for p in other.parameters()]
    vflair_init("mlp3", other)  # VFLAIR's MLP3 keeps PyTorch's default start
    assert all(torch.equal(a, b) for a, b in zip(before, other.parameters(), strict=True))


def test_weight_init_starts_the_bottoms_and_only_under_its_name() -> None:
    def first_bias(spec: TrialSpec) -> torch.Tensor:
        prepared = prepare_parties(spec, load_dataset("digits"))
        party = train_prepared(prepared, 0).parties[0]  # no epoch: the start
        return party.bottom[0].bias.detach()

    plain, vflair = _spec(model="mlp2"), _spec(model="mlp2", weight_init="vflair")
    assert float(first_bias(vflair).abs().max()) == 0.0
    assert float(first_bias(plain).abs().max()) > 0.0
    assert vflair.config_hash != plain.config_hash
    assert _spec(model="mlp2", weight_init="torch").config_hash == plain.config_hash
    tree = TrialSpec.build(dataset="breast_cancer", model="xgboost", weight_init="vflair")
    assert "weight_init" in str(incompatibility(tree))


def test_vflair_split_is_vflairs_image_partition() -> None:
    digits = load_dataset("digits")  # 8 x 8 images
    top = [c for c in range(64) if c // 8 < 4]
    assert [c.tolist() for c in vertical_split(digits, 2, "vflair")] == [
        top, sorted(set(range(64)) - set(top))
    ]  # fmt: skip
    for n in (3, 4):  # VFLAIR's 4 parties: image quarters (and auto's for others)
        got, auto = vertical_split(digits, n, "vflair"), vertical_split(digits, n, "auto")
        assert all(np.array_equal(a, b) for a, b in zip(got, auto, strict=True))
    cancer = load_dataset("breast_cancer")
    got, auto = vertical_split(cancer, 2, "vflair"), vertical_split(cancer, 2, "auto")
    assert all(np.array_equal(a, b) for a, b in zip(got, auto, strict=True))


def test_the_procedure_sets_them() -> None:
    spec = _spec(procedure="vflair", defense="mid", defense_param=0.1)
    assert (spec.lr_decay, spec.weight_init) == ("vflair", "vflair")
    assert spec.split_scheme == "vflair"
    assert _spec(procedure="vflair", split_scheme="halves").split_scheme == "halves"
    assert spec.defense_params == {"form": "vflair"}
    mnist = TrialSpec.build(dataset="mnist", procedure="vflair", defense="mid", defense_param=0.1)
    assert mnist.defense_params == {"form": "vflair", "lr": 1e-4}  # its MNIST config's
    own = TrialSpec.build(
        dataset="mnist", procedure="vflair", defense="mid", defense_params={"lr": 0.01}
    )
    assert own.defense_params == {"form": "vflair", "lr": 0.01}


def test_vflair_mid_is_vflairs_mid_model() -> None:
    gen = torch.Generator().manual_seed(0)
    block = Bottleneck(10, 64, 16, gen, vflair=True, shift=5.0)
    linears = [m for m in block.modules() if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(10, 20), (10, 50), (50, 10)]
    block.eval()
    h = torch.randn(64, 10)
    out = block(h)
    assert float(out.detach().min()) >= 0.0  # the decoder ends in a ReLU
    assert not torch.equal(out, block(h))  # it draws at evaluation too
    standard = Bottleneck(10, 64, 16, gen).eval()
    assert torch.equal(standard(h), standard(h))  # ours: z = mu at evaluation
    mid = DEFENSES.create("mid", strength=0.1, form="vflair")
    assert (mid.shift("mnist"), mid.shift("adult")) == (5.0, 0.5)
    assert DEFENSES.create("mid", strength=0.1).shift("mnist") == 0.5
    assert DEFENSES.create("mid", strength=0.1, form="vflair", std_shift=1).shift("mnist") == 1.0
    for bad in ({"form": "mine"}, {"lr": 0}, {"std_shift": "5"}):
        with pytest.raises(ConfigError, match="mid"):
            DEFENSES.create("mid", strength=0.1, **bad)


def _mid_weights(epochs: int, **params: object) -> torch.Tensor:
    spec = _spec(defense="mid", defense_param=0.1, lr=0.01, defense_params=params)
    trained = train_prepared(prepare_parties(spec, load_dataset("digits")), epochs)
    (mid,) = [d for d in trained.parties[-1].defenses if d.name == "mid"]
    return torch.cat([p.detach().flatten() for p in mid.module.parameters()])


def test_vflair_mids_own_rate_holds_for_the_first_epoch_only() -> None:
    still = _mid_weights(0, form="vflair")  # the start
    tiny = _mid_weights(1, form="vflair", lr=1e-30)
    assert torch.allclose(tiny, still, rtol=0, atol=1e-20)  # epoch 0 at its own (tiny) rate
    assert (_mid_weights(1, form="vflair") - still).abs().max() > 1e-4  # the main rate moves it
    two = _mid_weights(2, form="vflair", lr=1e-30)
    assert (two - still).abs().max() > 1e-4  # from epoch 1 on: the main rate


def test_vflair_mid_stacks_and_each_record_equals_the_training_alone() -> None:
    data = load_dataset("digits")
    jobs = [
        Job(_spec(seed=s, procedure="vflair", defense="mid", defense_param=lam), ())
        for s in (0, 1)
        for lam in (0.0, 0.1)
    ]
    got = dict(NNKind().run_many(jobs, data, LOCAL))
    for i, job in enumerate(jobs):
        stacked = got[i][0]  # type: ignore[index]
        assert '"vectorized": true' in stacked.extra  # type: ignore[union-attr]
        (alone,) = NNKind().run(job.spec, data, LOCAL, ())
        bare = [dataclasses.replace(r, **TIMING) for r in (stacked, alone)]  # type: ignore[arg-type]
        assert bare[0] == bare[1], i


def test_vflair_mids_kl_moves_the_embeddings_not_the_bottleneck() -> None:
    """VFLAIR steps its MID on dL/dpred alone (``global_backward``); its KL reaches H."""
    for form, kl_trains_it in (("vflair", False), ("standard", True)):
        spec = _spec(defense="mid", defense_param=1.0, defense_params={"form": form})
        active = prepare_parties(spec, load_dataset("digits")).inits[-1].build()
        (mid,) = [d for d in active.defenses if d.name == "mid"]
        stacked = mid.stacked([mid], torch.device("cpu"))
        h = torch.randn(1, 32, 10, requires_grad=True)  # (K, B, C)
        stacked.transform([h], training=True)
        kl = stacked.loss_terms([h], torch.zeros(1, 32, dtype=torch.long))
        params = [p for mlp in stacked.encoders for p in mlp.params]
        grads = torch.autograd.grad(kl.sum(), [h, *params], allow_unused=True)
        assert float(grads[0].abs().sum()) > 0.0  # the passive party is sent it
        moved = any(g is not None and float(g.abs().sum()) > 0 for g in grads[1:])
        assert moved is kl_trains_it, form
