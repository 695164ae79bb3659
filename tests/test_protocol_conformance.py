"""Every registered protocol passes the same checks (Optuna's sampler-suite idea)."""

from __future__ import annotations

import pytest

from trainables.data import load_dataset
from trainables.errors import ConfigError
from trainables.protocols import PROTOCOLS
from trainables.spec import TrialSpec
from trainables.transport.placement import Placement
from trainables.trial import run_trial

NAMES = PROTOCOLS.names()


def test_registry_lists_the_builtin_protocols() -> None:
    assert {"fedsgd", "fedbcd"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_protocol_trains_counts_and_is_deterministic(name: str) -> None:
    spec = TrialSpec.build(dataset="breast_cancer", protocol=name, epochs=4, batch_size=128)
    (a,) = run_trial(spec)
    (b,) = run_trial(spec)
    n_train = len(load_dataset("breast_cancer").y_train)
    batches = -(-n_train // 128)
    assert a.rounds == 4 * batches
    assert a.comm_bytes > 0 and a.comm_bytes % 4 == 0
    assert a.mp > 0.8  # chance is ~0.63 on breast_cancer
    assert (a.mp, a.rounds, a.comm_bytes) == (b.mp, b.rounds, b.comm_bytes)


@pytest.mark.parametrize("name", NAMES)
def test_protocol_rejects_unknown_parameters(name: str) -> None:
    with pytest.raises(ConfigError, match="unknown parameter"):
        PROTOCOLS.create(name, no_such_param=1)


@pytest.mark.ray
@pytest.mark.parametrize("name", NAMES)
def test_protocol_gives_the_same_record_on_both_transports(ray_session: None, name: str) -> None:
    spec = TrialSpec.build(dataset="breast_cancer", protocol=name, n_parties=3, epochs=2)
    (local,) = run_trial(spec)
    (remote,) = run_trial(spec, Placement("ray", 0.5))
    key = (local.mp, local.rounds, local.comm_bytes)
    assert key == (remote.mp, remote.rounds, remote.comm_bytes)


def test_fedbcd_q_must_be_a_positive_integer() -> None:
    with pytest.raises(ConfigError, match="q=0"):
        PROTOCOLS.create("fedbcd", q=0)
