"""FedCVT / FedMVT and FedSplitNN on FedCVT's models: TEMPORARY adapter over
``trainables.ssl.runner`` until FedCVT runs as a Protocol."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trainables.data import Dataset
from trainables.errors import ConfigError
from trainables.kinds.base import AttackSpec, TrialKind
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.ssl import runner
from trainables.transport.placement import Placement


class FedCVTKind(TrialKind):
    name = "fedcvt"
    ssl_variants = ("fedcvt", "fedmvt", "fedsplitnn")
    takes_model_params = True

    def check(self, spec: TrialSpec) -> None:
        runner.check_cvt(spec)

    def incompatibility(self, spec: TrialSpec, data_dir: str | Path | None) -> str | None:
        return runner.cvt_incompatibility(spec, data_dir)

    def attack_incompatibility(self, spec: TrialSpec, attack: str) -> str | None:
        return f"attack {attack!r} is not evaluated on ssl_variant={spec.ssl_variant!r}"

    def run(
        self, spec: TrialSpec, ds: Dataset, placement: Placement, attacks: Sequence[AttackSpec]
    ) -> list[Record]:
        if attacks:
            raise ConfigError(f"ssl_variant={spec.ssl_variant!r} does not evaluate attacks here")
        return runner.run_cvt_trial(
            spec, ds, spec.ssl_variant != "fedsplitnn", transport=placement.transport,
            cpu_per_party=placement.cpu_per_party, gpu_per_party=placement.gpu_per_party,
            address=placement.address, reuse_actors=placement.reuse_actors,
        )  # fmt: skip
