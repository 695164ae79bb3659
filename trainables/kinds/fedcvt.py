"""FedCVT / FedMVT and FedSplitNN on FedCVT's models (``ssl_variant`` fedcvt, fedmvt,
fedsplitnn): two parties, ``CvtRounds`` at the active party, records as the NN kind's.

Composition (what runs with what, and why the rest is refused with a reason):

- defenses: those that act on messages (G-DP, L-DP, ISO, GS with ``residual: 0``) act on
  FedCVT's messages where their kinds match (``fedcvt.py``: B's gradients are
  ``gradient``, B's values ``representation``, every A->B tensor an ``*embedding``);
  the loss- and model-level ones (MID, dCor, CAE, DCAE, GPer) need ``ActiveParty``'s top
  model and loss hooks, which FedCVT's three-head loss does not have;
- protocols: ``fedsgd`` is FedCVT's own schedule, ``fedbcd`` takes Q local steps on each
  exchange at both parties, ``quantize`` / ``topk`` put their codecs on the messages;
  ``celu`` (a workset of cached NN exchanges replayed through the top model) is refused;
- attacks: those that need only the passive party's encoder and features (PMC, MC, AMC:
  model completion on bottom = X -> r_A; NSB, MF: test-time tampering scored through
  f_AB) run through the common harness and judge; gradient- and message-reading attacks
  are refused: B's gradients here are per representation tensor over the whole overlap or
  unlabeled rows, not per-row gradients of a scheduled batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from trainables.data import Dataset, load_dataset
from trainables.defenses.spec_defenses import SpecDefenses
from trainables.endpoint import Endpoint
from trainables.jobs import AttackSpec
from trainables.kinds.base import TrialKind
from trainables.records import Record
from trainables.spec import TrialSpec
from trainables.ssl import runner
from trainables.ssl.cvt_active import CvtActive
from trainables.ssl.cvt_rounds import CvtRounds
from trainables.ssl.fedcvt import GRADIENT, REPS_SPLIT, TEST, UP_KINDS, VALUES
from trainables.transport.open import open_parties
from trainables.transport.placement import Placement
from trainables.vfl.training import Trained, attacks_of, records_of

if TYPE_CHECKING:
    from trainables.protocols.base import HookEntry


def attack_refusal(name: str) -> str | None:
    """Why attack ``name`` cannot run on FedCVT, by what it declares (``AttackInfo``), or
    None: FedCVT's exchange has no per-row messages of a scheduled batch to read or tamper
    with, and no NN top model to release (see the module docstring)."""
    from trainables.attacks import ATTACKS

    info = ATTACKS.get(name).info
    if info.needs_messages:
        why = "it reads per-row gradients or embeddings of a scheduled batch"
    elif info.query_model:
        why = "it queries the released NN model, which FedCVT's three heads are not"
    elif info.tampers_batches:
        why = "it tampers with per-row messages of a scheduled batch while training"
    else:
        return None
    return f"attack {name!r} is not evaluated on FedCVT: {why}; FedCVT's exchange has none"


def protocols_hosted() -> list[str]:
    """The registered protocols FedCVT runs: those that declare they need no replay of
    cached NN exchanges (``Protocol.replays``: CELU-VFL's workset)."""
    from trainables.protocols import PROTOCOLS

    return [n for n in PROTOCOLS.names() if not PROTOCOLS.get(n).replays]


def semi(spec: TrialSpec) -> bool:
    return spec.ssl_variant != "fedsplitnn"


def sends(spec: TrialSpec) -> dict[str, tuple[str, ...]]:
    """The message kinds each FedCVT party sends (``SpecDefenses.incompatibility``)."""
    if semi(spec):
        return {"active": (VALUES, GRADIENT), "passive": (*UP_KINDS, TEST)}
    return {"active": (GRADIENT,), "passive": (*REPS_SPLIT, TEST)}


def defense_refusal(spec: TrialSpec) -> str | None:
    """Why a defense of ``spec`` has no place in FedCVT, or None."""
    stack = SpecDefenses.compile(spec)
    for d in stack.defenses:
        if d.targets() is None:
            return (
                f"defense {d.name} acts on the active party's loss or top model, which "
                f"ssl_variant={spec.ssl_variant!r} does not have (its active party trains "
                "three heads on FedCVT's own loss); only message-level defenses apply"
            )
        if d.keeps_row_state() and d.must_apply():
            return (
                f"defense {d.name} ({d.params}) keeps state per training row of a scheduled "
                "batch; FedCVT's gradients are per representation tensor over the whole "
                "overlap or unlabeled rows"
                + ("; use residual: 0" if "residual" in d.params else "")
            )
    return stack.incompatibility(sends(spec))


def protocol_refusal(spec: TrialSpec) -> str | None:
    hosted = protocols_hosted()
    if spec.protocol not in hosted:
        return (
            f"protocol {spec.protocol!r} is not defined on FedCVT's exchange (it replays cached "
            f"NN exchanges through ActiveParty's top model); use one of: {', '.join(hosted)}"
        )
    return None


def cvt_rounds(spec: TrialSpec) -> tuple[CvtRounds, tuple[HookEntry, ...]]:
    """FedCVT's protocol for the spec's NN protocol (its Q) and that protocol's codecs."""
    from trainables.protocols import PROTOCOLS

    nn_protocol = PROTOCOLS.create(spec.protocol, **spec.protocol_params)
    protocol = CvtRounds(semi=semi(spec), local_steps=nn_protocol.local_steps)
    return protocol, nn_protocol.codec_hooks()


class FedCVTKind(TrialKind):
    name = "fedcvt"
    ssl_variants = ("fedcvt", "fedmvt", "fedsplitnn")
    takes_model_params = True

    def check(self, spec: TrialSpec) -> None:
        runner.check_cvt(spec)

    def incompatibility(self, spec: TrialSpec, data_dir: str | Path | None) -> str | None:
        reason = protocol_refusal(spec) or defense_refusal(spec)
        if reason is None and spec.train_attack != "none":
            reason = self.attack_incompatibility(spec, spec.train_attack)
        if reason is not None:
            return reason
        ds = load_dataset(spec.dataset, data_dir, **spec.dataset_params)
        return runner.rows_incompatibility(spec, ds)

    def attack_incompatibility(self, spec: TrialSpec, attack: str) -> str | None:
        return super().attack_incompatibility(spec, attack) or attack_refusal(attack)

    def run(
        self, spec: TrialSpec, ds: Dataset, placement: Placement, attacks: Sequence[AttackSpec]
    ) -> list[Record]:
        evaluated = attacks_of(spec, attacks)
        opts = runner.cvt_options(spec, semi(spec))
        protocol, codecs = cvt_rounds(spec)
        defenses = SpecDefenses.compile(spec)
        inits = runner.party_inits(spec, ds, opts, defenses, local_steps=protocol.local_steps,
                                   codecs=codecs, attacks=evaluated)  # fmt: skip
        keep = bool(evaluated)
        with open_parties(inits, placement) as group:
            result = group.train(protocol, int(spec.required("epochs")), spec.target_mp)
            measured = group.call(1, CvtActive.measurements)
            parties = group.snapshot() if keep or not placement.remote else []
            trained = Trained(result, parties, group.call_all(Endpoint.defense_applied), defenses)
        rows = runner.choose_rows(spec, ds, opts.n_local)
        extra = runner.measurements(measured, result.rounds, ds, rows, inits[0].steps, semi(spec))
        if semi(spec):  # which pseudo-label rule and estimate scaling ran (``CvtOptions``)
            extra.update(pseudo_balance=opts.pseudo_balance, est_rescale=opts.est_rescale)
        # FedCVT's MP is an accuracy over every test row (``runner.measurements``)
        return records_of(
            spec, trained, int(rows.labeled.sum()), evaluated, extra, y_test=ds.y_test
        )
