"""One FedHSSL-family trial under the one engine: pretrain, fine-tune, attack, record.

The parties are opened once (``open_parties``: in-process or one actor each); pretraining
(``pretrain.py``) runs on them, the aggregation server in a group of its own; then the
same group is rebuilt as ordinary fine-tuning parties for every training of the lr
selection and the final one (``finetune.py``). Records come from the NN kind's
``records_of``: the clean record and one per attack through the common harness on the
final fine-tuned parties, plus ``mc_pretrained`` (MC on the parties as they stand before
fine-tuning, judged the same way). Rounds and bytes are pretraining's plus every
fine-tuning training's; the defense application counts are pretraining's plus the final
fine-tuning's (``DefenseNeverApplied`` if a non-neutral defense acted in neither).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from trainables.attacks.harness import run_attacks
from trainables.data import Dataset
from trainables.endpoint import Endpoint
from trainables.jobs import AttackSpec, Job
from trainables.records import Record
from trainables.rounds import TrainResult
from trainables.spec import TrialSpec
from trainables.ssl.hssl.finetune import FineTuned, finetune
from trainables.ssl.hssl.parties import ServerInit, SSLParty
from trainables.ssl.hssl.pretrain import pretrain
from trainables.ssl.hssl.variants import (
    HSSLData,
    Plan,
    image_aug,
    iso_target,
    options,
    parse_variant,
    prepare,
)
from trainables.transport.group import PartyGroup
from trainables.transport.open import open_parties
from trainables.transport.placement import Placement
from trainables.vfl.training import Trained, attacks_of, records_of
from trainables.vfl.twins import baseline_attack, unattacked, with_baseline

MC = "mc"
MC_PRETRAINED = "mc_pretrained"


def run_hssl(
    spec: TrialSpec, ds: Dataset, placement: Placement, attacks: Sequence[AttackSpec]
) -> list[Record]:
    """Pretrain, fine-tune, attack: the clean record (unless a training-time attack runs),
    ``mc_pretrained`` records where MC is asked for, then one record per attack."""
    evaluated = attacks_of(spec, attacks)
    mc = [(n, p) for n, p in evaluated if n == MC] if spec.train_attack == "none" else []
    plan = parse_variant(spec.ssl_variant)
    data = prepare(spec, ds)
    with open_parties(data.inits, placement) as group:
        pre = pretrained(group, plan, options(spec), data, placement, spec.seed)
        pre_reports = group.call_all(Endpoint.defense_applied)
        encoders = group.call_all(SSLParty.pretrained_encoder)
        ft = finetune(spec, data, encoders, group, placement, evaluated, keep_before=bool(mc))
        twin = None  # LRB's baseline: its trigger, fine-tuned without it (``vfl/twins.py``)
        if (guess := baseline_attack(Job(spec))) is not None:
            bare = unattacked(spec)
            twin = finetune(bare, data, encoders, group, placement, [], keep=True).final.parties
    trained = combined(pre, ft, pre_reports)
    extra = measured(spec, data, pre, ft)
    n = len(data.labeled)
    metric = str(extra["metric"])  # what the clean MP is, on data.y_test (its mp_se)
    records = records_of(spec, trained, n, evaluated, extra, y_test=data.y_test, metric=metric)
    if twin is not None and guess is not None:
        chance = run_attacks(twin, [guess], spec.seed)[0].ap
        records = [with_baseline(r, chance) if r.attack == guess[0] else r for r in records]
    if not mc:
        return records
    before = dataclasses.replace(trained, parties=ft.before)
    rows = records_of(spec, before, n, mc, extra, y_test=data.y_test, metric=metric)
    late = [stage(r, MC) if r.attack == MC else r for r in records[1:]]
    # a pretrained-encoder row's ``mp`` is the trained model's, as the judge measured it on
    # the fine-tuned row (one meaning on every attack row); the model it attacked (before
    # fine-tuning) scored ``mp_before_finetune`` (in ``extra``)
    main = next((r for r in late if r.attack == MC), records[0])
    early = [stage(r, MC_PRETRAINED, main=main) for r in rows[-len(mc) :]]
    return [records[0], *early, *late]


def pretrained(
    group: PartyGroup, plan: Plan, opt: dict[str, float], data: HSSLData, placement: Placement,
    seed: int,
) -> TrainResult:  # fmt: skip
    """The variant's pretraining on ``group``; the server (its own group) only for PMA."""
    if plan.stages is None:
        return TrainResult(outputs={"cross_loss": [], "local_loss": []})  # no pretraining
    args = (plan.stages, int(opt["pretrain_epochs"]), data.n_aligned,
            int(opt["pretrain_batch"]), opt["gamma"], seed)  # fmt: skip
    if not plan.pma:
        return pretrain(group, None, *args)
    # the server only averages: it reserves no CPU (under Tune it shares the trial's bundle)
    with open_parties([ServerInit(group.n)], placement.coordinator()) as server:
        return pretrain(group, server, *args)


def combined(pre: TrainResult, ft: FineTuned, pre_reports: list[object]) -> Trained:
    """The final training with the whole trial's cost (pretraining + every fine-tuning
    training) and the defense reports of pretraining and of every fine-tuning training
    (the lr-selection candidates release DP-noised gradients too: their releases count
    towards the record's epsilon, their applications towards ``defense_applied``)."""
    trainings = [*ft.candidates, ft.final]
    ft_rounds = sum(t.result.rounds for t in trainings)
    result = dataclasses.replace(
        ft.final.result,
        rounds=pre.rounds + ft_rounds,
        comm_bytes=pre.comm_bytes + sum(t.result.comm_bytes for t in trainings),
        train_seconds=pre.train_seconds + sum(t.result.train_seconds for t in trainings),
    )
    reports = [*pre_reports, *(party for t in trainings for party in t.reports)]
    return dataclasses.replace(ft.final, result=result, reports=reports)


def measured(spec: TrialSpec, data: HSSLData, pre: TrainResult, ft: FineTuned) -> dict[str, object]:
    """The family's own measurements for the record's ``extra``."""
    trainings = [*ft.candidates, ft.final]
    return {
        "ft_lr": ft.lr, "val_mp": {str(k): v for k, v in ft.val_mp.items()},
        "ft_lr_source": ft.options.lr_source, "ft_mode": ft.options.mode,
        "pretrain_seconds": round(pre.train_seconds, 3), "pretrain_rounds": pre.rounds,
        "pretrain_bytes": pre.comm_bytes,
        "ft_rounds": sum(t.result.rounds for t in trainings),
        "ft_bytes": sum(t.result.comm_bytes for t in trainings),
        "eval_bytes": sum(t.result.eval_bytes for t in trainings),
        "cross_loss": [round(v, 4) for v in pre.outputs["cross_loss"]],
        "local_loss": [round(v, 4) for v in pre.outputs["local_loss"]],
        "metric": "auc" if data.n_classes == 2 else "accuracy", "options": options(spec),
        "image_aug": image_aug(spec) if data.image else None,
        "iso_target": iso_target(spec),
    }  # fmt: skip


def stage(record: Record, name: str, main: Record | None = None) -> Record:
    """An MC record as attack ``name`` with its stage; the label keeps the preset suffix
    (``mc_pretrained@fast``): the analysis groups by label, and the two stages are two
    attacks there. ``main``: the record whose MP (and its SE) the row takes, the row's own
    (the model before fine-tuning) moving to ``extra``."""
    extra = json.loads(record.extra or "{}")
    suffix = str(extra.get("attack_label", MC))[len(MC) :]
    extra.update(attack_label=name + suffix, mc_stage="pretrained" if name != MC else "finetuned")
    mp, mp_se = record.mp, record.mp_se
    if main is not None:
        extra["mp_before_finetune"] = record.mp
        mp, mp_se = main.mp, main.mp_se
    return dataclasses.replace(
        record, attack=name, attack_label=name + suffix, mp=mp, mp_se=mp_se,
        extra=json.dumps(extra, sort_keys=True),
    )  # fmt: skip
