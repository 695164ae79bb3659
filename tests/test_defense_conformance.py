"""Every registered defense passes the same checks (Optuna's sampler-suite idea).

- neutral strength: training is bit-identical to no defense under the same seed;
- message hooks keep shape and dtype; a defended training stays finite;
- strength moves the quantity the defense claims to move (per-defense probes below);
- bad strengths, parties and parameters are ConfigErrors that name them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch

from trainables.data import load_dataset
from trainables.defenses import DEFENSES, MODULES
from trainables.defenses.stacked import stacked_form
from trainables.errors import ConfigError
from trainables.messages import BatchRef, Message
from trainables.spec import TrialSpec
from trainables.trial import prepare_parties, train_local_parties

NAMES = DEFENSES.names()
DIGITS = load_dataset("digits")


def _train(spec: TrialSpec) -> tuple[float, list[torch.nn.Module], list[Message]]:
    """MP, trained parties' modules, and what the passive party received."""
    prepared = prepare_parties(spec, DIGITS, [("dli", {})])  # DLI makes party 0 keep a log
    result, parties = train_local_parties(prepared, int(spec.epochs))  # type: ignore[arg-type]
    log = parties[0].hooks[0]
    return result.mp, [p.bottom for p in parties] + [parties[-1].top], list(log.received)


def _spec(**fields: object) -> TrialSpec:
    base: dict[str, object] = {"dataset": "digits", "epochs": 2, "batch_size": 128, "seed": 3}
    return TrialSpec.build(**{**base, **fields})


def test_every_module_is_registered() -> None:
    """Each module of ``MODULES`` registers one defense under its own name (no count: a
    new defense is its file and its ``MODULES`` entry)."""
    assert set(NAMES) == {DEFENSES.get(n).name for n in NAMES}
    assert len(NAMES) == len(MODULES) and len(NAMES) >= 1


@pytest.mark.parametrize("name", NAMES)
def test_info_is_consistent(name: str) -> None:
    info = DEFENSES.get(name).info
    assert info.party in info.parties and info.grid and info.quantity
    assert all(info.low <= s <= info.high for s in info.grid)


@pytest.mark.parametrize("name", [n for n in NAMES if DEFENSES.get(n).info.neutral is not None])
def test_neutral_strength_trains_exactly_like_no_defense(name: str) -> None:
    neutral = DEFENSES.get(name).info.neutral
    mp0, models0, got0 = _train(_spec())
    mp1, models1, got1 = _train(_spec(defense=name, defense_param=neutral))
    assert mp0 == mp1
    for a, b in zip(models0, models1, strict=True):
        for (ka, ta), (kb, tb) in zip(a.state_dict().items(), b.state_dict().items(), strict=False):
            assert torch.equal(ta, tb), (name, ka, kb)
    assert all(np.array_equal(x.payload, y.payload) for x, y in zip(got0, got1, strict=True))


@pytest.mark.parametrize("name", NAMES)
def test_strongest_strength_keeps_messages_and_changes_training(name: str) -> None:
    strongest = max(DEFENSES.get(name).info.grid)
    _, _, clean = _train(_spec())
    mp1, _, defended = _train(_spec(defense=name, defense_param=strongest))
    assert math.isfinite(mp1) and 0.0 <= mp1 <= 1.0
    assert [(m.kind, m.payload.shape, m.payload.dtype) for m in clean] == [
        (m.kind, m.payload.shape, m.payload.dtype) for m in defended
    ]
    changed = any(
        not np.array_equal(a.payload, b.payload) for a, b in zip(clean, defended, strict=True)
    )
    assert changed, f"{name} at {strongest} left every gradient the passive party saw unchanged"


def _grad_msg(seed: int = 0, shape: tuple[int, int] = (512, 10)) -> Message:
    g = np.random.default_rng(seed).normal(0, 0.01, shape).astype(np.float32)
    return Message.of("gradient", 1, 0, g, BatchRef(0, 0))


def _sent(name: str, strength: float, msg: Message, **params: object) -> np.ndarray:
    defense = DEFENSES.create(name, strength=strength, **params)
    return np.asarray(defense.on_send(None, msg).payload)  # type: ignore[attr-defined]


def _noise_std(name: str, strength: float) -> float:
    msg = _grad_msg()  # rows of norm ~0.03 < clip 0.2: clipping leaves them unchanged
    return float((_sent(name, strength, msg) - msg.payload).std())


def _gs_kept(strength: float) -> float:
    return float((_sent("gs", strength, _grad_msg(), residual=0) != 0).mean())


def _gper_shift(strength: float) -> float:
    defense = DEFENSES.create("gper", strength=strength)
    h = torch.randn(1, 64, 10, requires_grad=True)  # a stack of one training
    logits = h * 2.0
    y = torch.randint(10, (1, 64))
    (g,) = torch.autograd.grad(
        torch.nn.functional.cross_entropy(logits[0], y[0]), h, retain_graph=True
    )
    form = stacked_form(defense)([defense], torch.device("cpu"))  # type: ignore[misc]
    (out,) = form.gradients([g], logits, [h], y)
    return float((out - g).norm())


def _loss_weight(name: str, strength: float) -> float:
    spec = _spec(defense=name, defense_param=strength, epochs=1)
    prepared = prepare_parties(spec, DIGITS)
    _, parties = train_local_parties(prepared, 1)
    active = parties[-1]
    gen = torch.Generator().manual_seed(0)  # the same probe batch for every strength
    h = [torch.randn(128, 10, generator=gen)]
    y = torch.randint(10, (128,), generator=gen)
    defense = active.defenses[0]  # its trained state, written back after training
    form = stacked_form(defense)([defense], torch.device("cpu"))  # type: ignore[misc]
    stacked = [x[None] for x in h]  # a stack of one: (1, 128, 10)
    form.transform(stacked, True)  # MID: its bottlenecks' codes and their KL
    term = form.loss_terms(stacked, y[None])
    return 0.0 if term is None else float(term.detach()[0])


def _cae_entropy(name: str, strength: float) -> float:
    from trainables.defenses.cae import entropy

    spec = _spec(defense=name, defense_param=strength, epochs=1)
    active = prepare_parties(spec, DIGITS).inits[-1].build()
    soft = active.defenses[0].soft_targets(torch.arange(10))
    return float(entropy(soft).mean())


def _iso_ratio(strength: float) -> float:
    msg = _grad_msg(1)
    d = torch.from_numpy(msg.payload)
    expected = strength * float(d.norm(dim=1).max()) / math.sqrt(d.shape[1])
    return float((_sent("iso", strength, msg) - msg.payload).std()) / expected


# name -> (probe(strength) -> quantity, how the quantity must move over the grid)
PROBES: dict[str, tuple[Callable[[float], float], str]] = {
    "gdp": (lambda s: _noise_std("gdp", s) / s, "equals 1"),
    "ldp": (lambda s: _noise_std("ldp", s) / (s * math.sqrt(2)), "equals 1"),
    "gs": (_gs_kept, "falls"),
    "gper": (_gper_shift, "rises"),
    "dcor": (lambda s: _loss_weight("dcor", s) / s, "constant"),
    "mid": (lambda s: _loss_weight("mid", s), "rises"),
    "cae": (lambda s: _cae_entropy("cae", s), "rises"),
    "dcae": (lambda s: _cae_entropy("dcae", s), "rises"),
    "iso": (_iso_ratio, "equals 1"),
}


def test_every_defense_has_a_probe() -> None:
    assert set(PROBES) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_strength_moves_the_claimed_quantity(name: str) -> None:
    probe, rule = PROBES[name]
    grid = [s for s in DEFENSES.get(name).info.grid if s > 0]
    if name == "mid":
        grid = [1e-4, 0.01, 1.0, 100.0]  # MID's KL term is lambda * KL
    values = [probe(s) for s in grid]
    if rule == "equals 1":
        assert np.allclose(values, 1.0, atol=0.06), values
    elif rule == "constant":
        assert np.allclose(values, values[0], rtol=1e-5) and values[0] != 0, values
    else:
        assert all(np.diff(values) > 0 if rule == "rises" else np.diff(values) < 0), values


def test_gdp_reports_epsilon_from_opacus_that_falls_with_noise() -> None:
    from opacus.accountants import RDPAccountant

    from trainables.trial import run_trial

    eps = []
    for s in (0.01, 0.1):
        (rec,) = run_trial(_spec(defense="gdp", defense_param=s))
        eps.append(rec.epsilon)
        accountant = RDPAccountant()  # stepped round by round, as a live accountant would
        for _ in range(rec.rounds):
            accountant.step(noise_multiplier=s / 0.2, sample_rate=128 / rec.n_labeled)
        assert rec.epsilon == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-9)
    assert eps[0] > eps[1] > 0
    (ldp,) = run_trial(_spec(defense="ldp", defense_param=0.1))
    assert ldp.epsilon is None


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"defense": "nope"}, "unknown defense 'nope'; known: cae"),
        ({"defense": "gs", "defense_param": 150.0}, "strength=150.0"),
        ({"defense": "gs", "defense_params": {"party": "passive"}}, "party='passive'"),
        ({"defense": "gdp", "defense_params": {"sigma": 1}}, r"unknown parameter\(s\) \['sigma'\]"),
        ({"defense": "gdp", "defense_params": {"clip": -1}}, "clip=-1; allowed: a number > 0"),
        ({"defense": "iso", "defense_params": {"target": "weights"}}, "target='weights'; allowed"),
        ({"defense": "iso", "defense_params": {"on": "both"}}, "'on' was renamed to 'target'"),
        ({"defense": "gs", "defense_params": {"residual": 2}}, "residual=2; allowed: 0, 1"),
        ({"defense": "gs", "defense_params": {"carry": "sample"}}, "carry='sample'; allowed"),
    ],
)
def test_bad_defense_settings_are_config_errors(fields: dict[str, object], match: str) -> None:
    from trainables.trial import check_names

    with pytest.raises(ConfigError, match=match):
        check_names(_spec(**fields))


def test_gs_residual_delivers_what_it_dropped_later() -> None:
    """Aji & Heafield's residual: sent + kept back == every gradient produced, per sample."""
    spec = _spec(defense="gs", defense_param=99.0)
    active = prepare_parties(spec, DIGITS).inits[-1].build()
    gs = active.defenses[0]
    rng = np.random.default_rng(0)
    produced = np.zeros((active.schedule.n_rows, 10))
    sent = np.zeros_like(produced)
    for epoch in range(3):
        for ref in active.schedule.refs(epoch):
            rows = active.schedule.rows(ref)
            g = rng.normal(0, 0.01, (len(rows), 10)).astype(np.float32)
            out = np.asarray(gs.on_send(active, Message.of("gradient", 1, 0, g, ref)).payload)
            assert (out != 0).mean() <= 0.011
            np.add.at(produced, rows, g)
            np.add.at(sent, rows, out)
    kept = gs._residuals(active.schedule.n_rows, 0, 10)
    assert np.allclose(sent + kept, produced, atol=1e-5)
    assert np.abs(kept).sum() > 0


def test_gs_position_carry_adds_the_previous_messages_remainder_by_position() -> None:
    """VFLAIR's carry: each message gets the last one's remainder element by element when
    both have as many rows (else none), so sent + kept back == every gradient produced."""
    spec = _spec(defense="gs", defense_param=99.0, defense_params={"carry": "position"})
    active = prepare_parties(spec, DIGITS).inits[-1].build()
    gs = active.defenses[0]
    rng = np.random.default_rng(0)
    kept = np.zeros((128, 10), np.float32)
    for i, n in enumerate([128, 128, 128, 77, 128]):  # 77: an epoch's last, shorter batch
        g = rng.normal(0, 0.01, (n, 10)).astype(np.float32)
        ref = BatchRef(epoch=0, index=i)
        out = np.asarray(gs.on_send(active, Message.of("gradient", 1, 0, g, ref)).payload)
        assert (out != 0).sum() == math.ceil(0.01 * g.size)  # the kept share of B * C
        carried = kept if kept.shape == g.shape else np.zeros_like(g)
        kept = gs.stores[0]
        assert kept.shape == g.shape
        np.testing.assert_allclose(out + kept, g + carried, atol=1e-7)
    assert np.abs(kept).sum() > 0
    assert DEFENSES.get("gs").defaults["carry"] == "row"  # the default stays per row
