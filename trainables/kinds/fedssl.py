"""FedSSL / FedSSL-DP and their baselines (``ssl_variant: fedssl*``): horizontal
semi-supervised FL over support agents, query agents and a server (``trainables/fedssl``).

Options are ``model_params`` (``trainables/fedssl/options.py``); ``epochs`` is the number
of communication rounds; ``n_parties`` is N_S + N_Q + 1 (the server is a party too).
The one kind without ``split_for``: its agents hold whole rows, dealt by label availability
(``trainables/fedssl/data.py``), so the vertical-split fields (``split_scheme``,
``aligned_ratio``, ``n_aligned``) are refused rather than ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trainables.data import Dataset, load_dataset
from trainables.errors import ConfigError
from trainables.fedssl.options import VARIANTS, option_incompatibility, options_of
from trainables.jobs import AttackSpec
from trainables.kinds.base import TrialKind
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement


class FedSSLKind(TrialKind):
    name = "fedssl"
    ssl_variants = tuple(VARIANTS)
    takes_model_params = True

    def check(self, spec: TrialSpec) -> None:
        from trainables.data import DATASETS

        DATASETS.get(spec.dataset)
        options_of(spec)

    def incompatibility(self, spec: TrialSpec, data_dir: str | Path | None) -> str | None:
        reason = option_incompatibility(spec)
        if reason is not None:
            return reason
        if spec.split_scheme != "auto" or spec.split_params:
            return (
                f"split_scheme={spec.split_scheme!r}: FedSSL is horizontal (every agent holds "
                "whole images), so no column split applies; leave split_scheme at auto"
            )
        if spec.aligned_ratio != 1.0 or spec.n_aligned is not None:
            return (
                f"aligned_ratio={spec.aligned_ratio}, n_aligned={spec.n_aligned}: FedSSL is "
                "horizontal (every agent holds whole rows of its own), so there is no overlap "
                "to size; leave aligned_ratio at 1 and n_aligned unset"
            )
        from trainables.fedssl.data import split_rows

        ds = load_dataset(spec.dataset, data_dir, **spec.dataset_params)
        if ds.image_shape is None:
            return f"dataset {spec.dataset!r} has no images; FedSSL's G and augmentation need them"
        try:
            split_rows(ds.y_train, int(spec.required("n_labeled")), options_of(spec), spec.seed)
        except ConfigError as err:
            return str(err)
        return None

    def attack_incompatibility(self, spec: TrialSpec, attack: str) -> str | None:
        return f"attack {attack!r} is not evaluated on ssl_variant={spec.ssl_variant!r}"

    def run(
        self, spec: TrialSpec, ds: Dataset, placement: Placement, attacks: Sequence[AttackSpec]
    ) -> list[Record]:
        from trainables.fedssl.trial import run_fedssl

        if attacks:
            raise ConfigError(f"ssl_variant={spec.ssl_variant!r} does not evaluate attacks")
        reason = option_incompatibility(spec)
        if reason is not None:
            raise ConfigError(reason)
        return run_fedssl(spec, ds, placement)
