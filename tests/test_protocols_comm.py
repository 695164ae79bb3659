"""Communication-efficient protocols: codecs, bytes as sent, CELU-VFL, rounds to target.

The conformance suite (test_protocol_conformance.py) runs celu, quantize and topk like
every registered protocol; these tests check what is particular to them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from trainables.codecs import (
    Quantized,
    Sparse,
    kept_per_row,
    quantization_error,
    quantize,
    topk,
)
from trainables.data import load_dataset
from trainables.errors import ConfigError
from trainables.messages import Message
from trainables.protocols import CODECS, PROTOCOLS
from trainables.protocols.celu import CeluWorkset, staleness_weights
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.trial import prepare_parties, run_trial, train_local_parties

FLOATS = st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False, width=32)
MATRICES = arrays(np.float32, st.tuples(st.integers(1, 40), st.integers(1, 12)), elements=FLOATS)


# -- codecs: stated error and encoded size -------------------------------------------
@settings(max_examples=80, deadline=None)
@given(x=MATRICES, bits=st.integers(1, 32))
def test_quantize_decodes_within_half_a_step(x: np.ndarray, bits: int) -> None:
    enc = quantize(x, bits)
    out = enc.decode()
    assert out.shape == x.shape and out.dtype == x.dtype
    span = float(x.max()) - float(x.min())
    assert quantization_error(enc) <= span / (2**bits - 1) / 2 * (1 + 1e-6) + 1e-30
    rounding = np.finfo(np.float32).eps * np.abs(x).max()  # the float32 cast of the result
    err = np.abs(out.astype(np.float64) - x.astype(np.float64)).max()
    assert err <= quantization_error(enc) + rounding


@settings(max_examples=80, deadline=None)
@given(x=MATRICES, bits=st.integers(1, 32))
def test_quantize_counts_packed_codes_plus_scale_and_offset(x: np.ndarray, bits: int) -> None:
    enc = quantize(x, bits)
    assert enc.nbytes == math.ceil(x.size * bits / 8) + 8
    assert enc.nbytes == enc.packed.nbytes + np.float32(0).nbytes * 2


@settings(max_examples=80, deadline=None)
@given(x=MATRICES, ratio=st.floats(0.05, 1.0))
def test_topk_keeps_the_largest_entries_of_each_row_exactly(x: np.ndarray, ratio: float) -> None:
    enc = topk(x, ratio)
    out = enc.decode()
    rows, cols = x.shape
    k = kept_per_row(ratio, cols)
    kept = out != 0
    exact = out == x
    assert exact[kept].all()  # kept entries decode exactly
    for r in range(rows):
        # k entries survive (a kept zero decodes to zero and is indistinguishable, fine)
        assert kept[r].sum() <= k
        dropped = ~exact[r]
        if dropped.any():
            smallest_kept = np.sort(np.abs(x[r]))[::-1][k - 1]
            assert np.abs(x[r][dropped]).max() <= smallest_kept
            assert (out[r][dropped] == 0).all()


@settings(max_examples=80, deadline=None)
@given(x=MATRICES, ratio=st.floats(0.05, 1.0))
def test_topk_counts_values_plus_the_cheaper_position_code(x: np.ndarray, ratio: float) -> None:
    enc = topk(x, ratio)
    rows, cols = x.shape
    k = kept_per_row(ratio, cols)
    values = rows * k * 4
    if k == cols:
        assert enc.form == "dense" and enc.nbytes == x.nbytes
    else:
        index_bytes = 1 if cols <= 256 else 2
        positions = min(math.ceil(rows * cols / 8), rows * k * index_bytes)
        assert enc.nbytes == values + positions


def test_codec_hooks_encode_embeddings_only_and_keep_the_size_as_sent() -> None:
    codec = CODECS.create("quantize", bits=8)
    x = np.random.default_rng(0).normal(size=(16, 10)).astype(np.float32)
    sent = codec.on_send(None, Message.of("embedding", 0, 1, x))  # type: ignore[arg-type]
    assert isinstance(sent.payload, Quantized) and sent.nbytes == 16 * 10 + 8
    got = codec.on_receive(None, sent)  # type: ignore[arg-type]
    assert isinstance(got.payload, np.ndarray) and got.nbytes == sent.nbytes
    assert np.abs(got.payload - x).max() <= quantization_error(sent.payload) + 1e-6
    grad = Message.of("gradient", 1, 0, x)
    assert codec.on_send(None, grad) is grad  # type: ignore[arg-type]
    own = Message.of("embedding", 1, 1, x)  # the active party's own: crosses nothing
    assert codec.on_send(None, own) is own  # type: ignore[arg-type]
    both = CODECS.create("topk", ratio=0.5, gradients=1)
    assert isinstance(both.on_send(None, grad).payload, Sparse)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "params", "match"),
    [
        ("quantize", {"bits": 0}, "bits=0"),
        ("quantize", {"bits": 33}, "bits=33"),
        ("topk", {"ratio": 0.0}, "ratio=0.0"),
        ("topk", {"ratio": 1.5}, "ratio=1.5"),
        ("quantize", {"gradients": 2}, "gradients=2"),
        ("celu", {"xi": 2.0}, "xi=2.0"),
        ("celu", {"w": 0}, "w=0"),
        ("celu", {"q": 1.5}, "q=1.5"),
    ],
)
def test_bad_parameters_are_rejected_when_the_protocol_is_built(
    name: str, params: dict[str, object], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        PROTOCOLS.create(name, **params)


# -- bytes counted at the boundary ----------------------------------------------------
def _train(dataset: str = "digits", **fields: object):  # type: ignore[no-untyped-def]
    spec = TrialSpec.build(dataset=dataset, epochs=fields.pop("epochs", 2), **fields)
    prepared = prepare_parties(spec, load_dataset(dataset))
    result, parties = train_local_parties(prepared, int(spec.epochs))  # type: ignore[arg-type]
    return result, parties, prepared


def test_transport_counts_quantized_embeddings_at_their_encoded_size() -> None:
    bits, epochs = 6, 2
    result, parties, prepared = _train(
        n_parties=3, protocol="quantize", protocol_params={"bits": bits}, epochs=epochs
    )
    n_rows, n_classes = prepared.n_labeled, 10
    schedule = parties[-1].schedule
    sizes = [len(b) for b in np.array_split(np.arange(n_rows), schedule.n_batches())]
    per_epoch = sum(math.ceil(b * n_classes * bits / 8) + 8 for b in sizes)
    assert result.bytes_up == epochs * 2 * per_epoch  # 2 passive parties
    assert result.bytes_down == epochs * 2 * n_rows * n_classes * 4  # gradients stay dense
    assert result.comm_bytes == result.bytes_up + result.bytes_down


@pytest.mark.parametrize("bits", [8, 16])
def test_quantized_embedding_bytes_are_about_b_over_32_of_fedsgd(bits: int) -> None:
    dense, _, _ = _train(protocol="fedsgd", epochs=1)
    quant, _, _ = _train(protocol="quantize", protocol_params={"bits": bits}, epochs=1)
    both, _, _ = _train(
        protocol="quantize", protocol_params={"bits": bits, "gradients": 1}, epochs=1
    )
    ratio = quant.bytes_up / dense.bytes_up
    assert bits / 32 <= ratio <= bits / 32 * 1.02  # + 8 bytes of scale/offset per message
    assert quant.bytes_down == dense.bytes_down
    assert bits / 32 <= both.comm_bytes / dense.comm_bytes <= bits / 32 * 1.02
    assert quant.rounds == dense.rounds


def test_topk_sends_fewer_bytes_than_dense_and_full_ratio_is_fedsgd() -> None:
    dense, _, _ = _train(protocol="fedsgd", epochs=1)
    sparse, _, _ = _train(protocol="topk", protocol_params={"ratio": 0.5}, epochs=1)
    full, _, _ = _train(protocol="topk", protocol_params={"ratio": 1.0}, epochs=1)
    assert sparse.bytes_up < 0.65 * dense.bytes_up  # 5 of 10 values + a bitmap
    assert (full.mp, full.comm_bytes) == (dense.mp, dense.comm_bytes)


# -- CELU-VFL ---------------------------------------------------------------------------
def test_staleness_weights_are_the_thresholded_row_cosine() -> None:
    stale = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    fresh = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, -1.0]])
    w = staleness_weights(fresh, stale, xi=0.5)
    assert torch.allclose(w, torch.tensor([1.0, 0.0, 2**-0.5, 0.0]), atol=1e-6)
    assert staleness_weights(fresh, stale, xi=0.8)[2] == 0


def test_celu_with_one_local_step_is_fedsgd() -> None:
    sgd, _, _ = _train(protocol="fedsgd")
    celu, _, _ = _train(protocol="celu", protocol_params={"q": 1})
    assert (celu.mp, celu.comm_bytes, celu.rounds) == (sgd.mp, sgd.comm_bytes, sgd.rounds)


def test_celu_caches_w_exchanges_and_takes_weighted_cached_steps() -> None:
    sgd, _, _ = _train(protocol="fedsgd")
    celu, parties, _ = _train(protocol="celu", protocol_params={"q": 4, "w": 3, "xi": 0.5})
    assert celu.comm_bytes == sgd.comm_bytes and celu.rounds == sgd.rounds
    assert celu.mp != sgd.mp  # the cached steps changed the models
    one, _, _ = _train(protocol="celu", protocol_params={"q": 4, "w": 1, "xi": 0.5})
    assert one.final_loss != celu.final_loss  # W entries to draw from, not the last one only
    for party in parties:
        (workset,) = [h for h in party.hooks if isinstance(h, CeluWorkset)]
        assert len(workset.weights_seen) == 3 * celu.rounds  # q - 1 cached steps per round
        assert all(0.0 <= w <= 1.0 for w in workset.weights_seen)
        assert max(workset.weights_seen) > 0.5  # fresh entries look fresh


# -- rounds to target -----------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["fedsgd", "celu", "quantize"])
def test_rounds_to_target_is_the_first_epoch_end_reaching_the_target(protocol: str) -> None:
    free, _, _ = _train(protocol=protocol, epochs=3)
    easy, parties, _ = _train(protocol=protocol, epochs=3, target_mp=0.2)
    never, _, _ = _train(protocol=protocol, epochs=3, target_mp=1.0)
    per_epoch = parties[-1].schedule.n_batches()
    assert easy.rounds_to_target == per_epoch  # reached after the first epoch
    assert never.rounds_to_target is None
    assert len(never.mp_by_epoch) == 3 and never.mp_by_epoch[-1] == never.mp
    mid = float(np.median(never.mp_by_epoch))
    middle, _, _ = _train(protocol=protocol, epochs=3, target_mp=mid)
    first = next(i for i, mp in enumerate(middle.mp_by_epoch) if mp >= mid)
    assert middle.rounds_to_target == (first + 1) * per_epoch
    # evaluating during training changes neither the training nor its counted traffic
    for run in (easy, never, middle):
        assert (run.mp, run.comm_bytes, run.rounds) == (free.mp, free.comm_bytes, free.rounds)
        assert run.eval_bytes == 3 * free.eval_bytes


def test_rounds_to_target_reaches_the_record() -> None:
    spec = TrialSpec.build(dataset="digits", protocol="fedbcd", epochs=2, target_mp=0.3)
    (record,) = run_trial(spec)
    assert record.rounds_to_target is not None and 0 < record.rounds_to_target <= record.rounds
    (plain,) = run_trial(spec.model_copy(update={"target_mp": None}))
    assert plain.rounds_to_target is None


@pytest.mark.ray
@pytest.mark.parametrize("protocol", ["celu", "topk"])
def test_rounds_to_target_is_the_same_on_ray(ray_session: None, protocol: str) -> None:
    spec = TrialSpec.build(
        dataset="digits", protocol=protocol, n_parties=3, epochs=3, target_mp=0.5
    )
    (local,) = run_trial(spec)
    (remote,) = run_trial(spec, Placement("ray", 0.5))
    assert local.rounds_to_target is not None
    key = ("mp", "rounds", "comm_bytes", "rounds_to_target")
    assert [getattr(local, k) for k in key] == [getattr(remote, k) for k in key]
