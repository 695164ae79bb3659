"""FedHSSL family: message discipline, partial model aggregation, determinism, fine-tuning
without the test set, augmentation, ISO + MC records that the CAP analysis can read.

Small data (breast_cancer: 455 train rows; digits 8x8 halves), tiny widths, few epochs.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from trainables.data import load_dataset
from trainables.errors import ConfigError
from trainables.spec import TrialSpec
from trainables.ssl.hssl.augment import ImageLayout, TabularLayout, make_view, with_mask_columns
from trainables.ssl.hssl.finetune import FT_LRS, carve_validation, finetune
from trainables.ssl.hssl.parties import SERVER
from trainables.ssl.hssl.pretrain import Server, Stages, Wire, pretrain
from trainables.ssl.hssl.variants import (
    HSSL_VARIANTS,
    open_wire,
    parse_variant,
    prepare,
    run_hssl_trial,
)

TINY = {"pretrain_epochs": 2, "pretrain_batch": 128, "hidden": 16, "emb": 8, "proj": 16,
        "pred": 8, "moco_dim": 8, "queue": 64}  # fmt: skip


def spec_for(variant: str, seed: int = 0, **kw: object) -> TrialSpec:
    fields = dict(dataset="breast_cancer", ssl_variant=variant, aligned_ratio=0.5,
                  n_labeled=60, epochs=3, batch_size=32, seed=seed, model_params=TINY)  # fmt: skip
    return TrialSpec.build(**{**fields, **kw})


def pretrained_weights(spec: TrialSpec, transport: str = "local") -> list[dict[str, np.ndarray]]:
    ds = load_dataset(spec.dataset)
    inits = prepare(spec, ds)
    plan = parse_variant(spec.ssl_variant)
    with open_wire(inits, transport, 1.0, 0.0, None, False) as wire:
        pretrain(wire, plan.stages, 2, inits[0].n_aligned, 128, 0.5, spec.seed)  # type: ignore[arg-type]
        return wire.call_all("weights")


def test_variant_names_and_bad_options() -> None:
    assert len(HSSL_VARIANTS) == 13 and "splitnn" in HSSL_VARIANTS
    for family in ("local", "cssl", "gssl", "hssl"):
        for method in ("simsiam", "byol", "moco"):
            assert f"{family}_{method}" in HSSL_VARIANTS
    with pytest.raises(ConfigError, match="known: splitnn"):
        parse_variant("hssl_simclr")
    with pytest.raises(ConfigError, match="allowed: pretrain_epochs"):
        run_hssl_trial(spec_for("hssl_byol", model_params={"lr_pre": 1}))
    with pytest.raises(ConfigError, match="allowed: none, iso"):
        run_hssl_trial(spec_for("hssl_byol", defense="gs"))


def test_passive_party_holds_no_labels() -> None:
    inits = prepare(spec_for("hssl_simsiam"), load_dataset("breast_cancer"))
    passive, active = inits[0].build(), inits[-1].build()
    assert inits[0].labels is None and not hasattr(passive, "y_labeled")
    assert not hasattr(passive, "y_test") and hasattr(active, "y_labeled")


def test_cross_party_ssl_exchanges_representations_only() -> None:
    """Every pretraining message is a plain numpy representation z~ (B, P) between the
    active party and a passive party; nothing called or shaped like a gradient crosses."""
    spec = spec_for("cssl_simsiam")
    inits = prepare(spec, load_dataset("breast_cancer"), record=True)
    wire = Wire([i.build() for i in inits], remote=False)
    pretrain(wire, Stages(True, False, False), 2, inits[0].n_aligned, 128, 0.5, spec.seed)
    msgs = [m for phase, m in wire.log if phase == "pretrain"]
    n_batches = -(-inits[0].n_aligned // 128)
    assert len(msgs) == 2 * 2 * n_batches  # 2 epochs x batches x (A->P, P->A)
    proj_out = inits[0].config.widths.proj_out
    for m in msgs:
        assert m.kind == "representation" and {m.src, m.dst} == {0, 1}
        assert isinstance(m.payload, np.ndarray) and m.payload.dtype == np.float32
        assert m.payload.shape[1] == proj_out and not isinstance(m.payload, torch.Tensor)
    # the payload is the sender's forward output on its own batch, not a derivative:
    fresh = [i.build() for i in inits]
    for m in msgs[:2]:
        again = fresh[m.src].cross_send(m.batch)[0].payload
        np.testing.assert_array_equal(again, m.payload)
    # each party's own log agrees: it received only representations
    for party in wire.parties:
        assert {m.kind for m in party.log().received} == {"representation"}


def test_partial_model_aggregation_touches_only_top_and_predictor() -> None:
    spec = spec_for("hssl_byol")
    inits = prepare(spec, load_dataset("breast_cancer"))
    wire = Wire([i.build() for i in inits], remote=False)
    pretrain(wire, Stages(True, True, False), 1, inits[0].n_aligned, 128, 0.5, spec.seed)
    before = wire.call_all("weights")
    Server().aggregate(wire)
    after = wire.call_all("weights")
    shared = ("local.top.", "local.projector.", "local.predictor.")
    n_shared = 0
    for key in before[0]:
        if key.startswith(shared):
            n_shared += 1
            mean = (before[0][key] + before[1][key]) / 2
            assert not np.array_equal(before[0][key], before[1][key])  # there was a difference
            for k in range(2):
                np.testing.assert_allclose(after[k][key], mean, rtol=1e-6, atol=1e-7)
        else:  # bottoms, cross-party towers, EMA targets: untouched, bit for bit
            for k in range(2):
                np.testing.assert_array_equal(after[k][key], before[k][key])
    assert n_shared > 0
    shares = [m for phase, m in wire.log if phase == "pma"]
    assert {m.kind for m in shares} == {"model_share", "model_avg"}
    assert all(SERVER in (m.src, m.dst) for m in shares)  # only to/from the server
    assert all(k.startswith(("top.", "projector.", "predictor.")) for k in shares[0].payload)


def test_same_seed_same_pretrained_weights() -> None:
    first = pretrained_weights(spec_for("hssl_moco", seed=3))
    again = pretrained_weights(spec_for("hssl_moco", seed=3))
    other = pretrained_weights(spec_for("hssl_moco", seed=4))
    for a, b in zip(first, again, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    assert any(not np.array_equal(first[0][k], other[0][k]) for k in first[0])


@pytest.mark.ray
def test_ray_actors_pretrain_like_local(ray_session: None) -> None:
    """One actor per party gives the same pretrained weights as in-process parties."""
    spec = spec_for("gssl_simsiam", seed=1)
    local = pretrained_weights(spec, "local")
    remote = pretrained_weights(spec, "ray")
    for a, b in zip(local, remote, strict=True):
        for key in a:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6)


def test_finetune_picks_lr_on_validation_rows_only() -> None:
    labeled = np.arange(10, 70)
    tr, val = carve_validation(labeled, seed=0)
    assert len(val) == 12 and set(tr) | set(val) == set(labeled) and not set(tr) & set(val)
    spec = spec_for("local_simsiam")
    inits = prepare(spec, load_dataset("breast_cancer"))
    wire = Wire([i.build() for i in inits], remote=False)
    result = finetune(wire, inits[0].labeled, 3, 32, spec.seed)
    assert set(result.val_mp) == set(FT_LRS)
    assert result.val_mp[result.lr] == max(result.val_mp.values())
    evals = [m for phase, m in wire.log if phase == "eval"]
    assert [m.kind for m in evals] == ["val_embedding"] * 3 + ["test_embedding"]
    n_val = len(carve_validation(inits[0].labeled, spec.seed)[1])
    assert all(m.payload.shape[0] == n_val for m in evals[:3])


def test_tabular_corruption_and_mask_token() -> None:
    x = torch.zeros(400, 5)
    low, high = np.array([-1.0, -2.0, 0, 0, 0]), np.array([1.0, 2.0, 1, 1, 1])
    layout = TabularLayout(((0,), (1,), (2, 3, 4)), low, high, np.full(5, -0.5))
    gen = torch.Generator().manual_seed(0)
    v = make_view(x, layout, gen)
    assert v.shape == (400, 6)
    changed = v[:, :2] != 0
    assert 0.22 < changed.float().mean() < 0.38  # ~30% of numeric fields
    assert (v[:, 0] >= -1).all() and (v[:, 0] <= 1).all() and (v[:, 1].abs() <= 2).all()
    masked = v[:, 5] == 1
    assert 0.22 < masked.float().mean() < 0.38
    assert (v[masked][:, 2:5] == -0.5).all() and (v[~masked][:, 2:5] == 0).all()
    again = make_view(x, layout, torch.Generator().manual_seed(0))
    assert torch.equal(v, again)
    assert with_mask_columns(x, layout).shape == (400, 6)


def test_image_augmentation_keeps_shape_and_moves_pixels() -> None:
    x = torch.rand(8, 8 * 4)
    v = make_view(x, ImageLayout((8, 4)), torch.Generator().manual_seed(0))
    assert v.shape == x.shape and not torch.allclose(v, x)


def test_digits_halves_trial_accuracy() -> None:
    spec = TrialSpec.build(dataset="digits", ssl_variant="hssl_simsiam", aligned_ratio=0.3,
                           n_labeled=100, epochs=5, seed=0, model_params=TINY)  # fmt: skip
    rec = run_hssl_trial(spec)[0]
    assert json.loads(rec.extra)["metric"] == "accuracy" and 0.2 < rec.mp <= 1.0  # 10 classes


def test_iso_runs_record_mc_rows_that_give_a_cap() -> None:
    from analysis.cap import cap_table
    from analysis.load import table_to_frame
    from analysis.report import prepare as prepare_report
    from trainables.records import records_to_table

    mc = [("mc", {"epochs": 1, "steps_per_epoch": 20})]
    records = run_hssl_trial(spec_for("hssl_simsiam"), attacks=mc)
    assert [r.attack for r in records] == ["none", "mc_pretrained", "mc"]
    assert all(r.attack_type == "LI" and 0 <= r.ap <= 1 for r in records[1:])
    plain_msgs = None
    for lam in (0.1, 25.0):
        spec = spec_for("hssl_simsiam", defense="iso", defense_param=lam,
                        defense_params={"target": "both"})  # fmt: skip
        records += run_hssl_trial(spec, attacks=mc)
        inits = prepare(spec, load_dataset("breast_cancer"))
        wire = Wire([i.build() for i in inits], remote=False)
        pretrain(wire, Stages(True, False, False), 1, inits[0].n_aligned, 128, 0.5, 0)
        msgs = {(m.src, m.batch): m.payload for _, m in wire.log}
        if plain_msgs is None:
            bare = prepare(spec_for("hssl_simsiam"), load_dataset("breast_cancer"))
            w0 = Wire([i.build() for i in bare], remote=False)
            pretrain(w0, Stages(True, False, False), 1, bare[0].n_aligned, 128, 0.5, 0)
            plain_msgs = {(m.src, m.batch): m.payload for _, m in w0.log}
        first = min(k for k in msgs if k[0] == 1)
        assert not np.allclose(msgs[first], plain_msgs[first])  # the active party's z noised
        np.testing.assert_array_equal(msgs[(0, first[1])], plain_msgs[(0, first[1])])
    frame = prepare_report(table_to_frame(records_to_table(records)), 0.5)
    cap = cap_table(frame)
    iso = cap[(cap["defense"] == "iso") & (cap["attack"] == "all LI")]
    assert len(iso) == 1 and np.isfinite(iso["cap"].iloc[0]) and iso["n_strengths"].iloc[0] == 2


def test_run_trial_routes_hssl_variants_through_the_ssl_registry() -> None:
    from trainables.ssl import SSL_VARIANTS
    from trainables.trial import check_names, run_trial

    assert set(HSSL_VARIANTS) <= set(SSL_VARIANTS.names())
    spec = spec_for("local_byol")
    check_names(spec)
    records = run_trial(spec, attacks=[("mc", {"preset": "fast", "epochs": 1})])
    assert [r.attack for r in records] == ["none", "mc_pretrained", "mc"]
    labels = ["mc_pretrained@fast[epochs=1]", "mc@fast[epochs=1]"]
    for row, label in zip(records[1:], labels, strict=True):
        extra = json.loads(row.extra)  # the preset ran, and the record says so
        assert extra["attack_preset"] == "fast" and extra["attack_label"] == label
        assert extra["attack_params"] == {"epochs": 1, "steps_per_epoch": 80}
    assert records[0].ssl_variant == "local_byol" and records[0].n_labeled == 60
    with pytest.raises(ConfigError, match="allowed: mc"):
        run_trial(spec, attacks=[("dli", {})])
