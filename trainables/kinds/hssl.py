"""FedHSSL family (``splitnn``, ``local_*``, ``cssl_*``, ``gssl_*``, ``hssl_*``): TEMPORARY
adapter over ``trainables.ssl.hssl.variants`` until the family runs under the Protocol."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trainables.data import Dataset
from trainables.kinds.base import AttackSpec, TrialKind
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.ssl.hssl import variants
from trainables.transport.placement import Placement


class HSSLKind(TrialKind):
    name = "hssl"
    ssl_variants = variants.HSSL_VARIANTS
    takes_model_params = True

    def check(self, spec: TrialSpec) -> None:
        from trainables.data import DATASETS

        DATASETS.get(spec.dataset)
        variants.check_hssl(spec)

    def incompatibility(self, spec: TrialSpec, data_dir: str | Path | None) -> str | None:
        return variants.hssl_incompatibility(spec, data_dir)

    def attack_incompatibility(self, spec: TrialSpec, attack: str) -> str | None:
        if attack not in variants.MC_ATTACKS:
            return f"attack {attack!r} is not evaluated on ssl_variant={spec.ssl_variant!r}"
        return None

    def run(
        self, spec: TrialSpec, ds: Dataset, placement: Placement, attacks: Sequence[AttackSpec]
    ) -> list[Record]:
        return variants.run_hssl_trial(
            spec, ds, transport=placement.transport, cpu_per_party=placement.cpu_per_party,
            gpu_per_party=placement.gpu_per_party, address=placement.address,
            reuse_actors=placement.reuse_actors, attacks=attacks,
        )  # fmt: skip
