"""FedSSL's options (``model_params``) and variants, checked before anything runs.

Why a frozen dataclass built from the spec: the kind's ``check`` (no data read), the
planner's ``incompatibility`` and the trial itself must agree on one reading of the
options; every bad value is a ConfigError naming ``model_params.<key>`` and what is
allowed. Defaults are the paper's where it states them (δ = 1e-5, ε budget 8, FedAvg
weights n_k / n, g(λ) realism weighting, sharpening Z > 1, the two agent settings).
``threshold``, ``warmup``, ``mix_input: real`` and ``support_ce`` go beyond the paper and
are off by default: at the paper's settings pseudo-labels from an untrained, under-confident
F collapse every pseudo-labelling arm to chance (README "Private semi-supervised FL").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields

from trainables.errors import ConfigError
from trainables.spec import TrialSpec

# ssl_variant -> what it trains (README: "Private semi-supervised FL")
VARIANTS: dict[str, str] = {
    "fedssl": "Alg. 1: G-Reg + G-MixUp on every agent, FedAvg of F, D, G",
    "fedssl_dp": "Alg. 2: DP-SGD on G's labeled updates, S-agents in sequence until ε",
    "fedssl_supervised": "'Supervise': FedAvg of F on the support agents only",
    "fedssl_pseudo": "'Pseudo': Supervise + sharpened pseudo-labels on the query agents",
    "fedssl_lmix": "ablation: G-MixUp replaced by local MixUp (L-MixUp, no G or D)",
}
GENERATIVE = ("fedssl", "fedssl_dp")  # variants that train D and G
SPLITS = ("iid", "noniid")
FEDAVG = ("rows", "uniform")
MIX_INPUTS = ("generator", "real")


@dataclass(frozen=True)
class FedSSLOptions:
    """One trial's options; see ``ALLOWED`` for each key's rule."""

    n_support: int = 2  # N_S: agents holding only labeled rows
    n_query: int = 6  # N_Q: agents holding only unlabeled rows
    epsilon: float = 8.0  # fedssl_dp's budget at delta (paper: 4, 8, 16)
    delta: float = 1e-5
    noise_multiplier: float = 2.0  # sigma of DP-SGD on G (noise std / clip)
    max_grad_norm: float = 1.0  # per-sample clipping norm C
    split: str = "iid"  # iid, or the paper's round-robin class split (Sec. 5.5)
    local_steps: int = 10  # mini-batches per agent per communication round
    alpha: float = 0.75  # MixUp: lambda ~ Beta(alpha, alpha)
    sharpen: float = 2.0  # Z > 1: p_c^Z / sum_c p_c^Z
    augment_k: int = 2  # K augmented views averaged for a pseudo-label
    z_dim: int = 16  # G's noise vector
    fedavg: str = "rows"  # FedAvg weights: n_k / n (paper) or 1 / K
    max_unlabeled: int = 0  # 0: every unlabeled training row; else at most this many
    rampup: int = 0  # rounds over which the query agents' FedAvg weight grows 0 -> 1
    # beyond the paper (default off): see README "Private semi-supervised FL"
    threshold: float = 0.0  # keep a pseudo-label only if the global F's max prob >= this
    warmup: int = 0  # first rounds with the support agents only (no pseudo-labels yet)
    support_ce: int = 0  # 1: S-agents also step F on CE of their own rows (as Supervise)
    mix_input: str = "generator"  # x̂ = G(x1, p1, p2, z, λ); "real": λ x1 + (1 - λ) G(λ = 0)

    @property
    def n_agents(self) -> int:
        return self.n_support + self.n_query


Check = Callable[[object], bool]  # whether a given option value is allowed


def _int_at_least(low: int) -> tuple[str, Check]:
    return f"an integer >= {low}", lambda v: isinstance(v, int) and v >= low


def _positive() -> tuple[str, Check]:
    return "a number > 0", lambda v: isinstance(v, int | float) and v > 0 and math.isfinite(v)


ALLOWED: dict[str, tuple[str, Check]] = {
    "n_support": _int_at_least(1),
    "n_query": _int_at_least(1),
    "epsilon": _positive(),
    "delta": ("a number in (0, 1)", lambda v: isinstance(v, int | float) and 0 < v < 1),
    "noise_multiplier": _positive(),
    "max_grad_norm": _positive(),
    "split": (" or ".join(SPLITS), lambda v: v in SPLITS),
    "local_steps": _int_at_least(1),
    "alpha": _positive(),
    "sharpen": ("a number >= 1", lambda v: isinstance(v, int | float) and v >= 1),
    "augment_k": _int_at_least(1),
    "z_dim": _int_at_least(1),
    "fedavg": (" or ".join(FEDAVG), lambda v: v in FEDAVG),
    "max_unlabeled": _int_at_least(0),
    "rampup": _int_at_least(0),
    "threshold": ("a number in [0, 1)", lambda v: isinstance(v, int | float) and 0 <= v < 1),
    "warmup": _int_at_least(0),
    "support_ce": ("0 or 1", lambda v: v in (0, 1)),
    "mix_input": (" or ".join(MIX_INPUTS), lambda v: v in MIX_INPUTS),
}
assert set(ALLOWED) == {f.name for f in fields(FedSSLOptions)}


def options_of(spec: TrialSpec) -> FedSSLOptions:
    """The spec's options; ConfigError naming ``model_params.<key>`` (or the field) if bad."""
    if spec.ssl_variant not in VARIANTS:
        raise ConfigError(
            f"ssl_variant={spec.ssl_variant!r} is not a FedSSL variant; allowed: "
            + ", ".join(VARIANTS)
        )
    params = dict(spec.model_params)
    for key, value in params.items():
        if key not in ALLOWED:
            raise ConfigError(
                f"model_params.{key}: unknown FedSSL option; allowed: {', '.join(ALLOWED)}"
            )
        rule, ok = ALLOWED[key]
        if isinstance(value, bool) or not ok(value):
            raise ConfigError(f"model_params.{key}={value!r}: allowed: {rule}")
    opts = FedSSLOptions(**params)  # type: ignore[arg-type]  # values checked against ALLOWED above
    _check_spec_fields(spec, opts)
    return opts


def _check_spec_fields(spec: TrialSpec, opts: FedSSLOptions) -> None:
    """The TrialSpec fields FedSSL reads: n_parties (agents + server), n_labeled, model."""
    want = opts.n_agents + 1
    if spec.n_parties != want:
        raise ConfigError(
            f"n_parties={spec.n_parties}: FedSSL runs n_support + n_query agents and one "
            f"server ({opts.n_support} + {opts.n_query} + 1); allowed: n_parties: {want}"
        )
    if spec.n_labeled is None:
        raise ConfigError("n_labeled: missing; FedSSL needs the total label count (e.g. 300)")
    if spec.n_labeled < opts.n_support:
        raise ConfigError(
            f"n_labeled={spec.n_labeled}: fewer labels than support agents "
            f"(model_params.n_support={opts.n_support}); allowed: n_labeled >= n_support"
        )
    if spec.defense != "none" or spec.stack:
        raise ConfigError(
            f"defense={spec.defense!r}: FedSSL's privacy is its own DP (ssl_variant: "
            "fedssl_dp, model_params.epsilon); allowed: defense: none"
        )
    if spec.train_attack != "none":
        raise ConfigError(f"train_attack={spec.train_attack!r}: allowed for FedSSL: none")


def option_incompatibility(spec: TrialSpec) -> str | None:
    """Options that are valid but mean nothing for this variant (the planner drops them)."""
    dp_only = {"epsilon", "delta", "noise_multiplier", "max_grad_norm"} & set(spec.model_params)
    if spec.ssl_variant != "fedssl_dp" and dp_only:
        return (
            f"model_params.{sorted(dp_only)[0]} is a DP budget option; ssl_variant="
            f"{spec.ssl_variant!r} trains without DP (ε = ∞)"
        )
    gen_only = {"z_dim"} & set(spec.model_params)
    if spec.ssl_variant not in GENERATIVE and gen_only:
        return f"model_params.z_dim sizes G; ssl_variant={spec.ssl_variant!r} has no G"
    return None
