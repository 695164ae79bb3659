"""Extension as docs/contributing.md says it (issue 66 item 5): a defense and an attack,
one file each, registered by entry points and nothing else, run on every trial kind
that declares what they need, and are refused with a reason by every other.

The two plugins declare only what the built-ins declare: the defense acts on the
``gradient`` messages its party sends (``targets``), the attack reads its own trained
bottom and a few labelled rows (``AttackInfo``: no messages, no released model, no
per-row tampering). So the kinds place them by those declarations, as they place the
built-ins (``tests/test_kind_conformance.py``), and no list names them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_kind_conformance as kinds
from test_plugins import dist_site, on_path

from trainables.attacks import ATTACKS
from trainables.defenses import DEFENSES
from trainables.kinds import kind_of
from trainables.trial import run_trial

DEFENSE_FILE = '''
"""round_grad: the active party rounds every gradient it sends to a grid of step s."""
import numpy as np
from trainables.defenses.base import Defense, DefenseInfo, is_training_gradient, with_payload


class RoundGrad(Defense):
    name = "round_grad"
    info = DefenseInfo(party="active", parties=("active",), grid=(1e-3, 1e-2), neutral=0.0,
                       quantity="grid step of the gradients sent", low=0.0, high=1.0)

    def targets(self):
        return ("gradient",)

    def on_send(self, party, msg):
        if not is_training_gradient(msg) or self.strength == 0.0:
            return msg
        self.count(msg.kind)
        g = np.asarray(msg.payload)
        return with_payload(msg, (np.round(g / self.strength) * self.strength).astype(g.dtype))
'''
ATTACK_FILE = '''
"""centroid: the passive attacker labels each test row by the nearest class centroid of its
own bottom's outputs on the rows whose labels it knows."""
import numpy as np
import torch
from trainables.attacks.base import Attack, AttackInfo, LabelGuess


class Centroid(Attack):
    name = "centroid"
    info = AttackInfo(type="LI", role="passive", training_time=False, aux_labels_per_class=5)

    def run(self, view):
        with torch.no_grad():
            known = view.bottom(torch.as_tensor(view.X_train[view.aux.label_rows])).numpy()
            test = view.bottom(torch.as_tensor(view.X_test)).numpy()
        classes = np.unique(view.aux.labels)
        centres = np.stack([known[view.aux.labels == c].mean(axis=0) for c in classes])
        nearest = ((test[:, None, :] - centres[None]) ** 2).sum(axis=2).argmin(axis=1)
        return LabelGuess(split="test", rows=np.arange(len(test)), labels=classes[nearest])
'''
ENTRY_POINTS = """
[vflsweep.defenses]
round_grad = vflsweep_ext_defense:RoundGrad

[vflsweep.attacks]
centroid = vflsweep_ext_attack:Centroid
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One file per plugin, and the dist-info that declares them: nothing else."""
    modules = {"vflsweep_ext_defense": DEFENSE_FILE, "vflsweep_ext_attack": ATTACK_FILE}
    return dist_site(tmp_path_factory.mktemp("ext"), "vflsweep-ext", modules, ENTRY_POINTS)


@pytest.fixture
def plugged(site: Path) -> Iterator[None]:
    with on_path(site), DEFENSES.isolated(), ATTACKS.isolated():
        DEFENSES.load_plugins()
        ATTACKS.load_plugins()
        assert "round_grad" in DEFENSES.names() and "centroid" in ATTACKS.names()
        yield
    for module in ("vflsweep_ext_defense", "vflsweep_ext_attack"):
        sys.modules.pop(module, None)


HOSTS = ("nn", "hssl", "fedcvt")  # the kinds with NN parties exchanging gradients


@pytest.mark.usefixtures("plugged")
def test_each_kind_places_the_plugins_by_their_declarations() -> None:
    for kind in kinds.KIND_SPECS:
        defense = kinds._defense_refusal(kind, "round_grad")
        attack = kinds._attack_refusal(kind, "centroid")
        if kind in HOSTS:
            assert defense is None and attack is None, (kind, defense, attack)
        else:  # trees, Paillier LR and FedSSL: no NN gradient messages, no NN attacks
            assert defense and attack, kind
            assert len(defense) > 20 and len(attack) > 20  # each says why


@pytest.mark.usefixtures("plugged")
@pytest.mark.parametrize("kind", HOSTS)
def test_the_plugins_run_on_every_kind_that_hosts_them(kind: str) -> None:
    spec = kinds._with_defense(kinds.KIND_SPECS[kind], "round_grad", 1e-2)
    assert kind_of(spec).name == kind
    records = run_trial(spec, attacks=[("centroid", {})])
    clean, attacked = records[0], records[-1]
    applied = json.loads(clean.extra)["defense_applied"]["round_grad"]
    assert clean.defense == "round_grad" and sum(applied.values()) > 0
    assert attacked.attack == "centroid" and attacked.attack_type == "LI"
    assert attacked.ap is not None and 0.0 <= attacked.ap <= 1.0
    assert attacked.ap_chance is not None  # scored by the judge, beside its baseline


PROTOCOL_FILE = '''
"""frozen_passive: the passive parties send their embeddings; no gradient goes back down
(a protocol whose round differs from FedSGD's in one line)."""
from trainables.protocols.base import Protocol


class FrozenPassive(Protocol):
    name = "frozen_passive"

    def exchange(self, active, passives, ref, nxt):
        passives.request(ref)
        active.forward(ref)
        active.passive_gradients(ref, passives.embeddings())  # the active loss, kept here
        passives.send([None] * passives.n, nxt)  # nothing down: the passive bottoms stay
        active.update(self.local_steps)
'''


def test_a_protocol_with_its_own_exchange_is_one_file(tmp_path: Path) -> None:
    """A new exchange order is one file and a registry entry: its round runs on the
    stacked parties as FedSGD's does, and its records show the exchange it wrote."""
    from trainables.protocols import PROTOCOLS
    from trainables.spec import TrialSpec

    (tmp_path / "vflsweep_ext_protocol.py").write_text(PROTOCOL_FILE)
    with on_path(tmp_path), PROTOCOLS.isolated():
        from vflsweep_ext_protocol import FrozenPassive  # type: ignore[import-not-found]

        PROTOCOLS.register("frozen_passive", FrozenPassive)
        base = {"dataset": "breast_cancer", "epochs": 2, "n_parties": 3}
        frozen = run_trial(TrialSpec.build(protocol="frozen_passive", **base))[0]
        fedsgd = run_trial(TrialSpec.build(protocol="fedsgd", **base))[0]
    sys.modules.pop("vflsweep_ext_protocol", None)
    assert frozen.rounds == fedsgd.rounds > 0  # one round per batch, counted the same
    # embeddings up only: FedSGD's bytes less every gradient (each as large as its H)
    assert 0 < frozen.comm_bytes and 2 * frozen.comm_bytes == fedsgd.comm_bytes
    assert frozen.mp != fedsgd.mp  # the passive bottoms never trained
