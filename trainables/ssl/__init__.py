"""Self- and semi-supervised VFL variants (``TrialSpec.ssl_variant``).

``SSL_VARIANTS`` maps a name to a runner ``(spec, ds, **placement) -> list[Record]``, the
placement keywords being ``run_trial``'s (transport, cpu_per_party, ..., trial_id):

- ``fedcvt`` (alias ``fedmvt``): FedCVT/FedMVT, ``fedcvt.py``.
- ``fedsplitnn``: FedSplitNN with FedCVT's models on the same labeled overlap rows (the
  baseline FedCVT is compared against; same encoders, heads, steps and seed).

FedCVT's options (temperature, thresholds, loss weights, ``n_local``, ``rep_dim``) are set
with ``model_params``; ``n_aligned`` / ``n_labeled`` choose the overlap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from trainables.errors import ConfigError
from trainables.records import Record
from trainables.registry import Registry
from trainables.spec import TrialSpec
from trainables.ssl.runner import check_cvt, cvt_incompatibility, run_cvt_trial

SSL_VARIANTS: Registry[Callable[..., list[Record]]] = Registry("ssl_variant")
SSL_VARIANTS.register("fedcvt", partial(run_cvt_trial, semi=True))
SSL_VARIANTS.register("fedmvt", partial(run_cvt_trial, semi=True))
SSL_VARIANTS.register("fedsplitnn", partial(run_cvt_trial, semi=False))

_CHECKS: dict[str, Callable[[TrialSpec], None]] = {
    "fedcvt": check_cvt, "fedmvt": check_cvt, "fedsplitnn": check_cvt,
}  # fmt: skip
_INCOMPATIBLE: dict[str, Callable[[TrialSpec, Any], str | None]] = {
    "fedcvt": cvt_incompatibility, "fedmvt": cvt_incompatibility,
    "fedsplitnn": cvt_incompatibility,
}  # fmt: skip
_TAKES_ATTACKS: set[str] = set()  # variants whose runner evaluates ``attacks`` (MC)


def _register_hssl() -> None:
    """FedSplitNN / FedLocal / FedCSSL / FedGSSL / FedHSSL x SimSiam/BYOL/MoCo (hssl/)."""
    from trainables.ssl.hssl import variants as hssl

    for name in hssl.HSSL_VARIANTS:
        SSL_VARIANTS.register(name, hssl.run_hssl_trial)
        _CHECKS[name] = hssl.check_hssl
        _INCOMPATIBLE[name] = hssl.hssl_incompatibility
        _TAKES_ATTACKS.add(name)


_register_hssl()


def is_ssl(spec: TrialSpec) -> bool:
    return spec.ssl_variant in SSL_VARIANTS


def ssl_check(spec: TrialSpec) -> None:
    """ConfigError for a bad SSL spec (unknown variant lists the known ones)."""
    SSL_VARIANTS.get(spec.ssl_variant)
    _CHECKS[spec.ssl_variant](spec)


def ssl_incompatibility(spec: TrialSpec, data_dir: str | Path | None = None) -> str | None:
    return _INCOMPATIBLE[spec.ssl_variant](spec, data_dir)


def run_ssl_trial(
    spec: TrialSpec,
    *,
    transport: str = "local",
    data_dir: str | Path | None = None,
    cpu_per_party: float = 1.0,
    gpu_per_party: float = 0.0,
    address: str | None = None,
    sweep: str = "",
    trial_id: str = "",
    reuse_actors: bool = False,
    attacks: Sequence[Any] = (),
) -> list[Record]:
    """``run_trial`` for SSL variants: load the data, run the variant, return its records."""
    from trainables.data import load_dataset

    if attacks and spec.ssl_variant not in _TAKES_ATTACKS:
        raise ConfigError(f"ssl_variant={spec.ssl_variant!r} does not evaluate attacks here")
    ssl_check(spec)
    ds = load_dataset(spec.dataset, data_dir, **spec.dataset_params)
    runner = SSL_VARIANTS.get(spec.ssl_variant)
    return runner(
        spec, ds, transport=transport, cpu_per_party=cpu_per_party, gpu_per_party=gpu_per_party,
        address=address, reuse_actors=reuse_actors, sweep=sweep, trial_id=trial_id,
        **({"attacks": attacks} if attacks else {}),
    )  # fmt: skip


__all__ = ["SSL_VARIANTS", "is_ssl", "run_ssl_trial", "ssl_check", "ssl_incompatibility"]
