"""FedHSSL family (``splitnn``, ``local_*``, ``cssl_*``, ``gssl_*``, ``hssl_*``): SSL
pretraining over the placement's transports, then fine-tuning as plain split VFL under the
spec's protocol; every NN defense and attack composes with it (``trainables/ssl/hssl``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trainables.data import Dataset
from trainables.jobs import AttackSpec
from trainables.kinds.base import TrialKind
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
        """Fine-tuning parties are ordinary NN parties, so NN attacks run on them; refused:
        other families' attacks (trees), and attacks that read the exchanged messages as
        per-class scores (DLI, BLI): here they are representations of width emb x towers."""
        from trainables.attacks import ATTACKS

        if ATTACKS.get(attack).info.logit_embeddings:
            return (
                f"attack {attack!r} reads the exchanged embeddings and gradients as per-class "
                f"scores (aggVFL bottoms with n_classes outputs); ssl_variant="
                f"{spec.ssl_variant!r} exchanges representations of width emb x towers, so its "
                "guesses would mean nothing"
            )
        return super().attack_incompatibility(spec, attack)

    def evaluations(self, spec: TrialSpec, names: Sequence[str]) -> list[str]:
        """MC also runs on the pretrained parties (``mc_pretrained``), without a
        training-time attack (``run_hssl``)."""
        from trainables.ssl.hssl.trial import MC, MC_PRETRAINED

        extra = [MC_PRETRAINED] if MC in names and spec.train_attack == "none" else []
        return [*names, *extra]

    def run(
        self, spec: TrialSpec, ds: Dataset, placement: Placement, attacks: Sequence[AttackSpec]
    ) -> list[Record]:
        from trainables.ssl.hssl.trial import run_hssl

        return run_hssl(spec, ds, placement, attacks)
