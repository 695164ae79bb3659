"""Property-based checks of the message hooks (hypothesis): what each claims, for any input."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from trainables.defenses import DEFENSES
from trainables.defenses.dcae import discretize
from trainables.defenses.gs import sparsify
from trainables.messages import BatchRef, Message

floats = st.floats(-1e3, 1e3, allow_nan=False, width=32)
matrices = arrays(np.float32, st.tuples(st.integers(1, 40), st.integers(1, 12)), elements=floats)


@settings(max_examples=200, deadline=None)
@given(g=matrices, drop=st.floats(0.0, 100.0))
def test_gs_keeps_the_stated_fraction_of_largest_elements(g: np.ndarray, drop: float) -> None:
    out = sparsify(g, drop)
    keep = math.ceil((1 - drop / 100) * g.size)
    kept = np.flatnonzero(out.reshape(-1) != 0)
    assert len(kept) <= keep  # exactly ``keep`` positions survive; zeros among them stay 0
    assert np.array_equal(out.reshape(-1)[kept], g.reshape(-1)[kept])  # survivors unchanged
    if 0 < keep < g.size:
        smallest_kept = np.abs(g).reshape(-1)[np.argsort(-np.abs(g).reshape(-1))[:keep]].min()
        assert np.all(np.abs(g.reshape(-1)[out.reshape(-1) == 0]) <= smallest_kept)


@settings(max_examples=200, deadline=None)
@given(g=matrices, bins=st.integers(2, 64))
@example(g=np.array([[0.0, 1e-45]], dtype=np.float32), bins=3)  # a denormal span: was NaN
def test_discretization_uses_at_most_the_stated_bins(g: np.ndarray, bins: int) -> None:
    out = discretize(g, bins)
    assert out.shape == g.shape and out.dtype == g.dtype
    assert len(np.unique(out)) <= bins
    step = (float(g.max()) - float(g.min())) / (bins - 1)
    assert np.all(np.abs(out.astype(np.float64) - g) <= step / 2 + 1e-3 * (1 + np.abs(g)))


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(["gdp", "ldp"]),
    scale=st.floats(1e-4, 10.0),
    seed=st.integers(0, 2**16),
)
def test_dp_noise_has_the_stated_scale(name: str, scale: float, seed: int) -> None:
    # rows far below the clip norm: what is added is the noise alone
    g = np.zeros((400, 50), dtype=np.float32)
    msg = Message.of("gradient", 1, 0, g, BatchRef(0, 0))
    out = np.asarray(DEFENSES.create(name, strength=scale, seed=seed).on_send(None, msg).payload)
    std = scale * (math.sqrt(2) if name == "ldp" else 1.0)  # Laplace(b) has std sqrt(2) b
    assert out.std() == pytest.approx(std, rel=0.03)
    assert abs(out.mean()) < 4 * std / math.sqrt(out.size)


@settings(max_examples=50, deadline=None)
@given(g=matrices, clip=st.floats(1e-3, 10.0))
def test_dp_clipping_bounds_every_row(g: np.ndarray, clip: float) -> None:
    msg = Message.of("gradient", 1, 0, g, BatchRef(0, 0))
    out = np.asarray(DEFENSES.create("gdp", strength=0.0, clip=clip).on_send(None, msg).payload)
    assert np.all(np.linalg.norm(out.astype(np.float64), axis=1) <= clip * (1 + 1e-5))
