"""FedHSSL family (``splitnn``, ``local_*``, ``cssl_*``, ``gssl_*``, ``hssl_*``): SSL
pretraining over the placement's transports, then fine-tuning as plain split VFL under the
spec's protocol; every NN defense and attack composes with it (``trainables/ssl/hssl``)."""

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

    # attack_incompatibility: the base's. Fine-tuning parties are ordinary NN parties, so
    # every NN attack runs on them; only other families' attacks (trees) are refused.

    def run(
        self, spec: TrialSpec, ds: Dataset, placement: Placement, attacks: Sequence[AttackSpec]
    ) -> list[Record]:
        from trainables.ssl.hssl.trial import run_hssl

        return run_hssl(spec, ds, placement, attacks)
