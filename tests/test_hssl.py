"""FedHSSL family under the one engine: pretraining over transports (message discipline,
partial model aggregation, determinism, bytes pinned), fine-tuning as ordinary parties
under any protocol (lr picked on validation rows only), defenses and attacks composing.

Small data (breast_cancer: 455 train rows; digits 8x8 halves), tiny widths, few epochs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from trainables.data import carve_validation, load_dataset
from trainables.defenses.applied import DefenseNeverApplied
from trainables.errors import ConfigError
from trainables.messages import BatchRef
from trainables.spec import TrialSpec
from trainables.ssl.hssl.augment import ImageLayout, TabularLayout, make_view, with_mask_columns
from trainables.ssl.hssl.finetune import FT_LRS, VAL_FRACTION, finetune, prepared_for
from trainables.ssl.hssl.parties import SERVER, ServerInit, SSLParty
from trainables.ssl.hssl.pretrain import Stages, aggregate, pretrain
from trainables.ssl.hssl.variants import HSSL_VARIANTS, parse_variant, prepare
from trainables.transport.open import open_parties
from trainables.transport.placement import LOCAL, Placement
from trainables.trial import attack_incompatibility, check_names, incompatibility, run_trial

TINY = {"pretrain_epochs": 2, "pretrain_batch": 128, "hidden": 16, "emb": 8, "proj": 16,
        "pred": 8, "moco_dim": 8, "queue": 64}  # fmt: skip
RAY = Placement("ray", 0.5, reuse_actors=True)  # one actor set for the whole test


def spec_for(variant: str, seed: int = 0, **kw: object) -> TrialSpec:
    fields = dict(dataset="breast_cancer", ssl_variant=variant, aligned_ratio=0.5,
                  n_labeled=60, epochs=3, batch_size=32, seed=seed, model_params=TINY)  # fmt: skip
    return TrialSpec.build(**{**fields, **kw})


def pretrained_weights(spec: TrialSpec, placement: Placement = LOCAL) -> list[dict]:
    data = prepare(spec, load_dataset(spec.dataset))
    plan = parse_variant(spec.ssl_variant)
    with open_parties(data.inits, placement) as group:
        with open_parties([ServerInit(group.n)], placement) as server:
            pretrain(group, server, plan.stages, 2, data.n_aligned, 128, 0.5, spec.seed)  # type: ignore[arg-type]
        return group.call_all(SSLParty.weights)


def test_variant_names_and_checks() -> None:
    assert len(HSSL_VARIANTS) == 13 and "splitnn" in HSSL_VARIANTS
    for family in ("local", "cssl", "gssl", "hssl"):
        for method in ("simsiam", "byol", "moco"):
            assert f"{family}_{method}" in HSSL_VARIANTS
    with pytest.raises(ConfigError, match="known: splitnn"):
        parse_variant("hssl_simclr")
    with pytest.raises(ConfigError, match="allowed: pretrain_epochs"):
        check_names(spec_for("hssl_byol", model_params={"lr_pre": 1}))
    check_names(spec_for("hssl_byol", defense="gs", protocol="fedbcd"))  # any NN defense
    with pytest.raises(ConfigError, match="gs"):
        check_names(spec_for("hssl_byol", defense="gs", defense_params={"bogus": 1}))
    with pytest.raises(ConfigError, match="fedbcd"):
        check_names(spec_for("hssl_byol", protocol="fedbcd", protocol_params={"q": 0}))
    spec = spec_for("hssl_byol")
    assert attack_incompatibility(spec, "tbm") is None
    assert attack_incompatibility(spec, "ns") is None
    assert "per-class scores" in (attack_incompatibility(spec, "dli") or "")  # width emb x towers
    assert "tree" in (attack_incompatibility(spec, "tree_grad_li") or "")


def test_no_label_in_pretraining_and_only_active_labels_in_fine_tuning() -> None:
    spec = spec_for("hssl_simsiam")
    data = prepare(spec, load_dataset("breast_cancer"))
    for init in data.inits:  # pretraining is label-free: no party holds any label
        party = init.build()
        assert not any(hasattr(x, a) for x in (init, party) for a in ("labels", "y_train"))
    encoders = [init.build().pretrained_encoder() for init in data.inits]
    ft = prepared_for(spec, data, encoders, 0.01, data.labeled, None, ())
    passive, active = ft.inits[0].build(), ft.inits[-1].build()
    assert ft.inits[0].labels is None and not hasattr(passive, "y_train")
    assert not hasattr(passive, "y_test") and hasattr(active, "y_train")


def test_cross_party_ssl_exchanges_representations_only() -> None:
    """Every pretraining message is a plain numpy representation z~ (B, P) between the
    active party and a passive party, equal to the sender's fresh forward on its batch."""
    spec = spec_for("cssl_simsiam")
    data = prepare(spec, load_dataset("breast_cancer"), record=True)
    with open_parties(data.inits, LOCAL) as group:
        out = pretrain(group, None, Stages(True, False, False), 2, data.n_aligned, 128, 0.5, 0)
        parties = group.snapshot()
    n_batches = -(-data.n_aligned // 128)
    sent = [m for p in parties for m in p.log().sent]
    assert len(sent) == 2 * 2 * n_batches == out.rounds * 2  # epochs x batches x (A->P, P->A)
    proj_out = data.inits[0].config.widths.proj_out
    for m in sent:
        assert m.kind == "representation" and {m.src, m.dst} == {0, 1}
        assert isinstance(m.payload, np.ndarray) and m.payload.dtype == np.float32
        assert m.payload.shape[1] == proj_out
    fresh = [init.build() for init in data.inits]
    for m in [m for m in sent if m.batch == BatchRef(0, 0)]:  # before any update
        np.testing.assert_array_equal(fresh[m.src].cross_send(m.batch, m.dst).payload, m.payload)
    for party in parties:
        assert {m.kind for m in party.log().received} == {"representation"}
    assert out.comm_bytes == sum(m.nbytes for m in sent)  # each message counted once


def test_partial_model_aggregation_touches_only_top_and_predictor() -> None:
    spec = spec_for("hssl_byol")
    data = prepare(spec, load_dataset("breast_cancer"))
    with open_parties(data.inits, LOCAL) as group, open_parties([ServerInit(2)], LOCAL) as server:
        pretrain(group, None, Stages(True, True, False), 1, data.n_aligned, 128, 0.5, 0)
        before = group.call_all(SSLParty.weights)
        shares = group.call_all(SSLParty.shared_state)
        wire = group.transport([0, 1])
        aggregate(group, server, wire)
        after = group.call_all(SSLParty.weights)
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
    assert all(s.kind == "model_share" and s.dst == SERVER for s in shares)
    assert all(k.startswith(("top.", "projector.", "predictor.")) for k in shares[0].payload)
    size = shares[0].nbytes
    assert (wire.stats.rounds, wire.stats.bytes_up, wire.stats.bytes_down) == (
        1,
        2 * size,
        2 * size,
    )


def _shared_floats(h: int, e: int, p: int, po: int, q: int, predictor: bool, bn: bool) -> int:
    """Parameters of the local top + projector (+ predictor): what PMA moves per party.
    With BN heads the hidden Linears carry no bias and every BN adds a weight and a bias."""
    top = h * e + e
    if bn:  # Linear-BN-ReLU, Linear-BN-ReLU, Linear(+bias)-BN; predictor Linear-BN-ReLU, Linear
        proj = e * p + 2 * p + p * p + 2 * p + p * po + po + 2 * po
        pred = po * q + 2 * q + q * po + po
    else:
        proj = (e * p + p) + (p * p + p) + (p * po + po)
        pred = (po * q + q) + (q * po + po)
    return top + proj + (pred if predictor else 0)


@pytest.mark.parametrize(
    ("variant", "k", "bn", "pinned"),
    [
        ("hssl_simsiam", 2, 0, 93696),
        ("hssl_moco", 2, 0, 51200),
        ("cssl_byol", 3, 0, 116736),
        ("hssl_simsiam", 2, 1, 96000),
    ],
)
def test_pretrain_bytes_and_rounds_pinned(variant: str, k: int, bn: int, pinned: int) -> None:
    """Hand count from widths x batch x parties; ``pinned``: with plain heads (head_bn 0),
    what the pre-engine code recorded for the same spec (same seeds, same arithmetic);
    with BN heads (the default) the hand count as it stands."""
    spec = spec_for(variant, n_parties=k, model_params={**TINY, "head_bn": bn})
    rec = run_trial(spec)[0]
    extra = json.loads(rec.extra)
    n_aligned = prepare(spec, load_dataset("breast_cancer")).n_aligned  # 228
    epochs, po = 2, 8 if variant.endswith("moco") else 16
    cross = epochs * 2 * (k - 1) * n_aligned * po * 4  # z~ (B, P) float32, A->P and P->A
    pma = 0
    if variant.startswith("hssl"):
        moco = variant.endswith("moco")
        floats = _shared_floats(16, 8, 16, po, 8, predictor=not moco, bn=bool(bn))
        pma = epochs * 2 * k * floats * 4  # K shares up, K averages down
    assert extra["pretrain_bytes"] == cross + pma == pinned
    n_batches = -(-n_aligned // 128)
    assert extra["pretrain_rounds"] == epochs * (n_batches + variant.startswith("hssl"))
    assert rec.rounds == extra["pretrain_rounds"] + extra["ft_rounds"]
    assert rec.comm_bytes == extra["pretrain_bytes"] + extra["ft_bytes"]


@pytest.mark.parametrize("variant", ["hssl_moco"])
def test_same_seed_same_pretrained_weights(variant: str) -> None:
    first = pretrained_weights(spec_for(variant, seed=3))
    again = pretrained_weights(spec_for(variant, seed=3))
    other = pretrained_weights(spec_for(variant, seed=4))
    for a, b in zip(first, again, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    assert any(not np.array_equal(first[0][k], other[0][k]) for k in first[0])


@pytest.mark.ray
def test_ray_actors_pretrain_and_record_like_local(ray_session: None) -> None:
    """One actor per party (and one for the server) gives the same pretrained weights and
    the same records as in-process parties."""
    spec = spec_for("hssl_simsiam", seed=1)
    for a, b in zip(pretrained_weights(spec), pretrained_weights(spec, RAY), strict=True):
        for key in a:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6)
    local, remote = run_trial(spec)[0], run_trial(spec, RAY)[0]
    assert (local.mp, local.rounds, local.comm_bytes) == (
        remote.mp,
        remote.rounds,
        remote.comm_bytes,
    )
    keep = ("val_mp", "ft_lr", "pretrain_bytes", "cross_loss", "local_loss")
    el, er = json.loads(local.extra), json.loads(remote.extra)
    assert {k: el[k] for k in keep} == {k: er[k] for k in keep}


def test_finetune_picks_lr_on_validation_rows_only() -> None:
    labeled = np.arange(10, 70)
    tr, val = carve_validation(labeled, None, VAL_FRACTION, seed=0)
    assert len(val) == 12 and set(tr) | set(val) == set(labeled) and not set(tr) & set(val)
    spec = spec_for("local_simsiam")
    data = prepare(spec, load_dataset("breast_cancer"))
    tr, val = carve_validation(data.labeled, data.y_aligned, VAL_FRACTION, spec.seed)
    with open_parties(data.inits, LOCAL) as group:
        encoders = group.call_all(SSLParty.pretrained_encoder)
        ft = finetune(spec, data, encoders, group, LOCAL, ())
    assert set(ft.val_mp) == set(FT_LRS) and ft.val_mp[ft.lr] == max(ft.val_mp.values())
    aligned = data.inits[-1].X_local[: data.n_aligned]
    for cand in ft.candidates:  # evaluated on the validation rows, trained on the others
        active = cand.parties[-1]
        np.testing.assert_array_equal(active.X_test.numpy(), aligned[val])
        np.testing.assert_array_equal(active.y_test.numpy(), data.y_aligned[val])
        np.testing.assert_array_equal(active.X_train.numpy(), aligned[tr])
    final = ft.final.parties[-1]  # the test rows only here, at the end
    np.testing.assert_array_equal(final.y_test.numpy(), data.y_test)
    assert len(final.y_train) == len(data.labeled)


def test_defended_and_attacked_trial_records_applications_and_aps() -> None:
    spec = spec_for("hssl_simsiam", defense="gdp", defense_param=0.1,
                    stack=[{"name": "mid", "strength": 0.01}])  # fmt: skip
    records = run_trial(spec, attacks=[("pmc", {"preset": "fast"}), ("ns", {}), ("nsb", {})])
    assert [r.attack for r in records] == ["none", "pmc", "ns", "nsb"]
    applied = json.loads(records[0].extra)["defense_applied"]
    assert applied["gdp"]["gradient"] > 0 and applied["mid"]["bottleneck"] > 0
    assert records[0].epsilon is not None and records[0].defense_party == "active+active"
    for r in records[1:]:
        assert r.ap is not None and 0.0 <= r.ap <= 1.0, (r.attack, r.ap)
    plain = run_trial(spec_for("hssl_simsiam"))[0]
    assert plain.mp != records[0].mp and plain.rounds == records[0].rounds
    with pytest.raises(ConfigError, match="per-class scores"):  # refused by the kind, not run
        run_trial(spec_for("hssl_simsiam"), attacks=[("dli", {})])


def test_fedbcd_fine_tuning_differs_from_fedsgd() -> None:
    sgd = run_trial(spec_for("cssl_simsiam"))[0]
    bcd = run_trial(spec_for("cssl_simsiam", protocol="fedbcd", protocol_params={"q": 3}))[0]
    es, eb = json.loads(sgd.extra), json.loads(bcd.extra)
    assert es["pretrain_bytes"] == eb["pretrain_bytes"] and sgd.rounds == bcd.rounds
    assert es["val_mp"] != eb["val_mp"] or sgd.mp != bcd.mp


def _iso(variant: str, target: str, lam: float = 5.0) -> TrialSpec:
    return spec_for(variant, defense="iso", defense_param=lam, defense_params={"target": target})


def test_iso_on_representations_needs_cross_party_pretraining() -> None:
    reason = incompatibility(_iso("splitnn", "representation")) or ""
    assert "representation" in reason and "no cross-party pretraining" in reason
    assert incompatibility(_iso("hssl_simsiam", "representation")) is None
    assert incompatibility(_iso("splitnn", "both")) is None
    with pytest.raises(DefenseNeverApplied):
        run_trial(_iso("splitnn", "representation"))
    (rec,) = run_trial(_iso("cssl_simsiam", "representation"))
    assert set(json.loads(rec.extra)["defense_applied"]["iso"]) == {"representation"}


def test_iso_noises_only_the_active_partys_representations() -> None:
    """Read on the wire as delivered: each party's log keeps what reached it after every
    hook (a party logs its own sends before its defenses, ``trainables/endpoint.py``)."""
    logs = {}
    for lam in (0.0, 5.0):
        spec = _iso("cssl_simsiam", "both", lam)
        data = prepare(spec, load_dataset("breast_cancer"), record=True)
        with open_parties(data.inits, LOCAL) as group:
            pretrain(group, None, Stages(True, False, False), 1, data.n_aligned, 128, 0.5, 0)
            logs[lam] = {
                (m.src, m.batch): m.payload for p in group.snapshot() for m in p.log().received
            }
    assert logs[0.0].keys() == logs[5.0].keys()
    for (src, batch), payload in logs[0.0].items():  # the active party (1) is noised
        assert src == 0 or not np.allclose(payload, logs[5.0][(src, batch)]), batch
    first = (0, BatchRef(0, 0))  # the passive party's first z~, before any noisy update
    np.testing.assert_array_equal(logs[0.0][first], logs[5.0][first])


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
    rec = run_trial(spec)[0]
    assert json.loads(rec.extra)["metric"] == "accuracy" and 0.2 < rec.mp <= 1.0  # 10 classes


def test_iso_runs_record_mc_rows_that_give_a_cap() -> None:
    from analysis.cap import cap_table
    from analysis.load import table_to_frame
    from analysis.report import prepare as prepare_report
    from trainables.records import records_to_table

    mc = [("mc", {"epochs": 1, "steps_per_epoch": 20})]
    records = run_trial(spec_for("hssl_simsiam"), attacks=mc)
    assert [r.attack for r in records] == ["none", "mc_pretrained", "mc"]
    assert all(r.attack_type == "LI" and 0 <= r.ap <= 1 for r in records[1:])
    for lam in (0.1, 25.0):
        records += run_trial(_iso("hssl_simsiam", "both", lam), attacks=mc)
    frame = prepare_report(table_to_frame(records_to_table(records)), 0.5)
    cap = cap_table(frame)
    iso = cap[(cap["defense"] == "iso") & (cap["attack"] == "all LI")]
    assert len(iso) == 1 and np.isfinite(iso["cap"].iloc[0]) and iso["n_strengths"].iloc[0] == 2


def test_mc_preset_labels_both_stages() -> None:
    spec = spec_for("local_byol")
    records = run_trial(spec, attacks=[("mc", {"preset": "fast", "epochs": 1})])
    assert [r.attack for r in records] == ["none", "mc_pretrained", "mc"]
    labels = ["mc_pretrained@fast[epochs=1]", "mc@fast[epochs=1]"]
    for row, label, stage in zip(records[1:], labels, ("pretrained", "finetuned"), strict=True):
        extra = json.loads(row.extra)  # the preset ran, and the record says so
        assert extra["attack_preset"] == "fast" and extra["attack_label"] == label
        assert extra["attack_params"] == {"epochs": 1, "steps_per_epoch": 80}
        assert extra["mc_stage"] == stage
        assert row.attack_label == label and row.attack_preset == "fast"  # typed columns
    assert records[0].ssl_variant == "local_byol" and records[0].n_labeled == 60
    # ``mp`` on both attack rows is the trained model's MP as the judge measures it; the
    # pretrained-stage model's own score is ``mp_before_finetune`` (issue 62: it was
    # written as ``mp``, 0.04-0.14 on 10 classes)
    assert records[1].mp == records[2].mp and records[1].mp_se == records[2].mp_se
    before = json.loads(records[1].extra)["mp_before_finetune"]
    assert before is not None and before != records[2].mp


def _ft(variant: str, **ft: object) -> TrialSpec:
    return spec_for(variant, model_params={**TINY, **ft})


def test_fixed_ft_lr_is_used_and_recorded_without_a_selection() -> None:
    spec = _ft("local_simsiam", ft_lr=0.02)
    data = prepare(spec, load_dataset("breast_cancer"))
    with open_parties(data.inits, LOCAL) as group:
        ft = finetune(spec, data, group.call_all(SSLParty.pretrained_encoder), group, LOCAL, ())
    assert ft.lr == 0.02 and ft.val_mp == {} and ft.candidates == ()
    for party in ft.final.parties:  # every party's stack steps at the fixed lr
        assert party.config.lr == 0.02
    fixed, picked = run_trial(spec)[0], run_trial(spec_for("local_simsiam"))[0]
    ef, ep = json.loads(fixed.extra), json.loads(picked.extra)
    assert (ef["ft_lr"], ef["ft_lr_source"], ef["ft_mode"], ef["val_mp"]) == (
        0.02, "fixed", "full", {}
    )  # fmt: skip
    assert ep["ft_lr_source"] == "picked" and ep["ft_lr"] in FT_LRS and len(ep["val_mp"]) == 3
    assert ef["ft_rounds"] * 4 == ep["ft_rounds"]  # one training instead of 3 + 1
    assert ef["pretrain_bytes"] == ep["pretrain_bytes"]


@pytest.mark.parametrize("variant", ["hssl_simsiam", "splitnn"])
def test_probe_trains_the_head_and_leaves_every_encoder_as_pretrained(variant: str) -> None:
    spec = _ft(variant, ft_lr=0.03, ft_mode="probe")
    data = prepare(spec, load_dataset("breast_cancer"))
    with open_parties(data.inits, LOCAL) as group:
        encoders = group.call_all(SSLParty.pretrained_encoder)
        ft = finetune(spec, data, encoders, group, LOCAL, ())
        full = finetune(_ft(variant, ft_lr=0.03), data, encoders, group, LOCAL, ())
    for enc, party, moved in zip(encoders, ft.final.parties, full.final.parties, strict=True):
        before, after = enc.state_dict(), party.bottom.encoder.state_dict()
        assert before.keys() == after.keys() and len(before) > 0
        for key in before:
            torch.testing.assert_close(after[key], before[key], rtol=0, atol=0)
        assert float(party.bottom.anchor.detach()) == 0.0
        with torch.no_grad():  # standardised on the party's own fine-tuning rows
            h = party.bottom(party.X_train)  # (n_labeled, emb * towers)
        torch.testing.assert_close(h.mean(dim=0), torch.zeros(h.shape[1]), atol=1e-4, rtol=0)
        assert any(not torch.equal(moved.bottom.state_dict()[k], before[k]) for k in before)
    active = ft.final.parties[-1]  # the head did train
    assert ft.final.result.rounds > 0 and ft.final.result.mp != full.final.result.mp
    fresh = prepared_for(spec, data, encoders, 0.03, data.labeled, None, ()).inits[-1].build()
    assert any(not torch.equal(a, b) for a, b in
               zip(active.top.parameters(), fresh.top.parameters(), strict=True))  # fmt: skip


@pytest.mark.parametrize(
    ("params", "fragments"),
    [
        ({"ft_lr": -0.01}, ["ft_lr=-0.01", "positive"]),
        ({"ft_lr": "fast"}, ["ft_lr='fast'"]),
        ({"ft_lr": True}, ["ft_lr=True"]),
        ({"ft_lr": float("inf")}, ["ft_lr=inf"]),
        ({"ft_mode": "linear"}, ["ft_mode='linear'", "known: full, probe"]),
        ({"head_bn": 2}, ["head_bn=2.0", "1 (BN) or 0"]),
        ({"image_aug": "heavy"}, ["image_aug='heavy'", "known: light, strong"]),
    ],
)
def test_bad_fine_tuning_options_are_refused_naming_the_key(
    params: dict[str, object], fragments: list[str]
) -> None:
    for fragment in fragments:
        with pytest.raises(ConfigError, match=re.escape(fragment)):
            check_names(_ft("hssl_simsiam", **params))


def test_a_space_with_a_bad_ft_mode_exits_2_naming_the_key(
    tmp_path: Path, refused_sweep: Callable[..., str]
) -> None:
    space = tmp_path / "bad.yaml"
    space.write_text(
        "name: bad\nbase: {dataset: breast_cancer, ssl_variant: hssl_simsiam, epochs: 1,\n"
        "       aligned_ratio: 0.5, n_labeled: 60,\n"
        "       model_params: {pretrain_epochs: 1, ft_mode: frozen}}\ngrid: {seed: [0]}\n"
    )
    refused_sweep(space, ["ft_mode='frozen'", "known: full, probe"])


def test_benchmark_pretrains_once_and_its_paper_row_is_the_trial_record() -> None:
    from benchmarks.hssl import markdown, one, paired, spec_of, table

    s = {"n_labeled": 60, "ft_epochs": 3, "ft_batch": 32, "model_params": TINY,
         "ft": ["pick:full", "0.01:full", "0.1:probe"]}  # fmt: skip
    rows = one("breast_cancer", 2, 0.5, "hssl_simsiam", 0, s)
    assert [r["ft"] for r in rows] == s["ft"] and len({r["pretrain_seconds"] for r in rows}) == 1
    rec = run_trial(spec_of("breast_cancer", 2, 0.5, "hssl_simsiam", 0, s, "pick:full"))[0]
    assert rows[0]["mp"] == rec.mp and rows[0]["ft_lr"] == json.loads(rec.extra)["ft_lr"]
    assert [r["ft_lr"] for r in rows[1:]] == [0.01, 0.1] and rows[1]["mp"] != rows[2]["mp"]
    text = markdown(table(rows))  # one variant table per protocol, one column per setting
    assert text.count("| breast_cancer, ft ") == 3 and "k=2, 50 % aligned" in text
    assert f"| hssl_simsiam | {rows[2]['mp']:.3f} ± 0.000 (n=1) |" in text
    d = paired({0: 0.8, 1: 0.7, 2: 0.9}, {0: 0.7, 1: 0.65, 2: 0.7})  # diffs .1, .05, .2
    assert d is not None and d["n"] == 3 and d["mean"] == pytest.approx(0.1167, abs=1e-4)
    assert d["p"] == pytest.approx(0.1181, abs=1e-3)  # scipy.stats.ttest_rel, 2 dof


def test_image_aug_reaches_the_image_views_and_is_refused_on_tabular_data() -> None:
    reason = incompatibility(_ft("hssl_simsiam", image_aug="strong")) or ""
    assert "image_aug='strong'" in reason and "tabular" in reason
    digits = {"dataset": "digits", "aligned_ratio": 0.3, "n_labeled": 100}
    weights = {}
    for aug in ("light", "strong"):
        spec = spec_for("local_simsiam", **digits, model_params={**TINY, "image_aug": aug})
        assert incompatibility(spec) is None
        assert {i.layout.aug for i in prepare(spec, load_dataset("digits")).inits} == {aug}
        weights[aug] = pretrained_weights(spec)[0]
    light, strong = weights["light"], weights["strong"]
    assert any(not np.array_equal(light[k], strong[k]) for k in light)
