"""Parties and their message hooks, in process: what crosses the boundary, and in what order."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from trainables.data import load_dataset
from trainables.hooks import MessageLog
from trainables.messages import BatchSchedule, Message
from trainables.party import Party
from trainables.spec import TrialSpec
from trainables.transport import LocalTransport
from trainables.trial import PreparedTrial, prepare_parties
from trainables.vfl.stacked_party import StackedParty, StackedPartyInit
from trainables.vfl.stacked_rounds import StackedRounds


def _prepared(**fields: object) -> tuple[TrialSpec, PreparedTrial]:
    spec = TrialSpec.build(dataset="digits", epochs=2, batch_size=500, **fields)
    return spec, prepare_parties(spec, load_dataset("digits"))


def _stacks(prepared: PreparedTrial, *hooks: list) -> list[StackedParty]:
    """Each party as a stack of one, with ``hooks`` added to its member first."""
    stacks = [StackedPartyInit((init,)).build() for init in prepared.inits]
    for stack, extra in zip(stacks, hooks, strict=False):
        stack.parties[0].hooks += extra
    for stack in stacks:
        stack.stack([0])
    return stacks


def test_passive_party_receives_only_gradients_of_its_own_embeddings() -> None:
    _, prepared = _prepared()
    log = MessageLog()
    passive, active = _stacks(prepared, [log])
    StackedRounds(prepared.protocol, targets=[None], slots=[0]).run(
        active, LocalTransport([passive]), 2
    )
    n_classes = 10
    assert log.received and all(m.kind == "gradient" for m in log.received)
    assert {m.kind for m in log.sent} == {"embedding", "test_embedding"}
    for sent, got in zip(log.sent, log.received, strict=False):
        assert got.batch == sent.batch and got.payload.shape == sent.payload.shape
        assert got.payload.shape[1] == n_classes


class _AddConstant:
    """Adds ``value`` on send and records the order it saw messages in."""

    def __init__(self, value: float, trace: list[str], name: str) -> None:
        self.value, self.trace, self.name = value, trace, name

    def on_send(self, party: Party, msg: Message) -> Message:
        self.trace.append(f"send:{self.name}")
        return replace(msg, payload=msg.payload + self.value)

    def on_receive(self, party: Party, msg: Message) -> Message:
        self.trace.append(f"recv:{self.name}")
        return msg


def test_hooks_stack_like_middleware() -> None:
    _, prepared = _prepared()
    trace: list[str] = []
    (passive, _) = _stacks(
        prepared, [_AddConstant(1.0, trace, "a"), _AddConstant(10.0, trace, "b")]
    )
    (plain, _) = _stacks(prepared)
    ref = passive.parties[0].schedule.refs(0)[0]
    (out,) = passive.forward(ref)  # one message per training of the stack
    np.testing.assert_allclose(out.payload, plain.forward(ref)[0] + 11.0, rtol=1e-6)
    grad = Message.of("gradient", 1, 0, np.zeros_like(out.payload), ref)
    passive.backward([grad])
    assert trace == ["send:a", "send:b", "recv:b", "recv:a"]


def test_batch_schedule_is_shared_and_covers_every_row_once_per_epoch() -> None:
    a, b = BatchSchedule(1000, 128, seed=4), BatchSchedule(1000, 128, seed=4)
    rows = np.concatenate([a.rows(r) for r in a.refs(0)])
    assert sorted(rows.tolist()) == list(range(1000))
    assert all(np.array_equal(a.rows(r), b.rows(r)) for r in a.refs(1))
    assert not np.array_equal(a.rows(a.refs(0)[0]), a.rows(a.refs(1)[0]))


def test_message_counts_its_payload_bytes_and_survives_pickling() -> None:
    import pickle

    msg = Message.of("embedding", 0, 1, np.ones((7, 3), dtype=np.float32))
    assert msg.nbytes == 7 * 3 * 4
    back = pickle.loads(pickle.dumps(msg))
    assert back.kind == msg.kind and back.nbytes == msg.nbytes
    np.testing.assert_array_equal(back.payload, msg.payload)
