"""Issue 64, item 5: ISO as in FedHSSL. ``lambda_p`` (λp) noises what the active party
exposes in pretraining — its cross-party representations and the parameters of the local
top encoder it shares for aggregation — while the strength λ keeps noising ``target``
(fine-tuning's gradients, the paper's λf). Cells where λp cannot act are refused at plan
time; the record says what was noised."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.test_hssl import pretrained_weights, spec_for
from trainables.defenses.iso import IsotropicNoise, iso_sigma
from trainables.errors import ConfigError
from trainables.messages import Message
from trainables.spec import TrialSpec
from trainables.trial import incompatibility, run_trial


def iso(strength: float, **params: object) -> IsotropicNoise:
    return IsotropicNoise(strength, **params)  # type: ignore[arg-type]


def hssl(variant: str, lam: float, lam_p: float, **params: object) -> TrialSpec:
    return spec_for(variant, defense="iso", defense_param=lam,
                    defense_params={"lambda_p": lam_p, **params})  # fmt: skip


def test_lambda_p_noises_shared_weights_at_its_own_strength_and_spares_buffers() -> None:
    rng = np.random.default_rng(0)
    weight = rng.normal(0, 1, (400, 300)).astype(np.float32)  # (out, in)
    state = {
        "top.0.weight": weight,
        "top.0.bias": np.ones(400, np.float32),
        "top.1.running_var": np.ones(400, np.float32),
        "top.1.num_batches_tracked": np.array(7),
    }
    msg = Message("model_share", 1, -1, state, 0)
    hook = iso(5.0, lambda_p=0.4)
    assert hook.strength_for("model_share") == 0.4 and hook.strength_for("gradient") == 5.0
    assert hook.strength_for("representation") == 0.4
    out = hook.on_send(None, msg).payload  # type: ignore[arg-type]
    noise = out["top.0.weight"] - weight
    expected = iso_sigma(torch.from_numpy(weight), 0.4)
    assert noise.std() == pytest.approx(expected, rel=0.02)  # σ = λp·max row norm/√m
    assert not np.array_equal(out["top.0.bias"], state["top.0.bias"])
    assert out["top.1.running_var"] is state["top.1.running_var"]  # a buffer, not a weight
    assert out["top.1.num_batches_tracked"] is state["top.1.num_batches_tracked"]
    assert hook.applied == {"model_share": 1}
    plain = iso(5.0)  # without lambda_p nothing of pretraining is noised
    assert plain.targets() == ("gradient",)
    assert plain.on_send(None, msg) is msg  # type: ignore[arg-type]


def test_lambda_p_values_are_checked() -> None:
    for bad in (-0.1, "0.4", True):
        with pytest.raises(ConfigError, match=r"lambda_p=.*allowed: a number >= 0"):
            iso(1.0, lambda_p=bad)
    with pytest.raises(ConfigError, match="two strengths"):
        iso(1.0, lambda_p=0.4, target="both")


def test_lambda_p_is_refused_where_nothing_is_pretrained_together() -> None:
    for variant in ("splitnn", "local_simsiam"):
        reason = incompatibility(hssl(variant, 1.0, 0.4)) or ""
        assert "lambda_p=0.4 noises FedHSSL pretraining" in reason, variant
    plain = TrialSpec.build(dataset="breast_cancer", defense="iso", defense_param=1.0,
                            defense_params={"lambda_p": 0.4}, epochs=1)  # fmt: skip
    assert "no cross-party pretraining" in (incompatibility(plain) or "")
    assert incompatibility(hssl("hssl_simsiam", 1.0, 0.4)) is None
    assert incompatibility(hssl("cssl_simsiam", 1.0, 0.4)) is None


def test_hssl_training_records_what_lambda_p_noised_and_the_shares_change() -> None:
    (rec,) = run_trial(hssl("hssl_simsiam", 1.0, 0.4))
    applied = json.loads(rec.extra)["defense_applied"]["iso"]
    assert {"representation", "model_share", "gradient"} <= set(applied)
    assert json.loads(rec.spec_json)["defense_params"]["lambda_p"] == 0.4
    # the passive party loads the average of the shares: the active party's noise reaches it
    off = pretrained_weights(hssl("hssl_simsiam", 1.0, 0.0))
    on = pretrained_weights(hssl("hssl_simsiam", 1.0, 0.4))
    shared = [k for k in off[0] if k.startswith("local.") and "running" not in k]
    assert any(not np.allclose(off[0][k], on[0][k]) for k in shared)


def test_lambda_p_alone_must_act_and_is_refused_where_it_cannot() -> None:
    """λ = 0 with λp > 0 is Table VI's setting (pretraining protection only): it is not
    the neutral strength, so a variant with nothing to noise is dropped, not run as none."""
    assert iso(0.0, lambda_p=0.4).must_apply() and not iso(0.0).must_apply()
    assert "noises FedHSSL pretraining" in (incompatibility(hssl("splitnn", 0.0, 0.4)) or "")
    (rec,) = run_trial(hssl("cssl_simsiam", 0.0, 0.4))
    assert set(json.loads(rec.extra)["defense_applied"]["iso"]) == {"representation"}
