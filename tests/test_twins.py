"""A training-time attack's baseline on an unattacked twin (``trainables/vfl/twins.py``).

LRB's guess (its trigger on test rows) is scored on the same spec trained without LRB:
the cell's clean training where the pack holds it, else a twin trained for it alone.
Real trainings on breast_cancer (where the trigger alone sends every row to the target)
and digits (where it sends none), in-process and stacked.
"""

from __future__ import annotations

import json
import math

import pytest

from trainables.attacks.chance import gain
from trainables.attacks.harness import run_attacks
from trainables.attacks.tuning_trained import trial_specs
from trainables.data import load_dataset
from trainables.jobs import Job
from trainables.records import Record
from trainables.schedule import ONE_BY_ONE, STACKED
from trainables.spec import TrialSpec
from trainables.transport.placement import LOCAL
from trainables.trial import prepare_parties, run_trial, train_local_parties
from trainables.vfl.twins import Twins, unattacked
from trainables.vfl.vectorized import run_vectorized

EPOCHS = 5


def _spec(dataset: str, seed: int = 0, **kw: object) -> TrialSpec:
    return TrialSpec.build(dataset=dataset, seed=seed, epochs=EPOCHS, **kw)  # type: ignore[arg-type]


def _lrb(dataset: str, seed: int = 0) -> TrialSpec:
    return _spec(dataset, seed, train_attack="lrb", train_attack_params={"test_ratio": 0.2})


def _outcomes(jobs: list[Job], dataset: str, schedule: object = STACKED) -> dict[int, list[Record]]:
    out = dict(run_vectorized(jobs, load_dataset(dataset), LOCAL, schedule))  # type: ignore[arg-type]
    assert all(isinstance(o, list) for o in out.values()), out
    return out  # type: ignore[return-value]


def _guess_on_unattacked(spec: TrialSpec) -> float:
    """LRB's AP with its own parameters on the spec trained without it: the truth."""
    ds = load_dataset(spec.dataset)
    clean = unattacked(spec)
    parties = train_local_parties(prepare_parties(clean, ds), EPOCHS)[1]
    params = dict(spec.train_attack_params)
    return run_attacks(parties, [("lrb", params)], spec.seed)[0].ap


def test_the_twin_is_the_spec_without_its_attack() -> None:
    twin = unattacked(_lrb("digits", 3))
    assert twin.train_attack == "none" and twin.seed == 3
    assert twin.config_hash == _spec("digits", 3).config_hash  # the cell's clean training


def test_the_cells_clean_training_carries_the_baseline_and_keeps_its_records() -> None:
    """In a pack with its clean sibling no twin trains; the sibling's records are what
    they are without the baseline (no LRB row among them), and LRB's chance is the
    guess on that sibling."""
    clean, attacked = Job(_spec("breast_cancer"), (("nsb", {}),)), Job(_lrb("breast_cancer"))
    twins = Twins([clean, attacked])
    assert len(twins.jobs) == 2 and twins.jobs[0].baselines == (("lrb", {"test_ratio": 0.2}),)
    out = _outcomes([clean, attacked], "breast_cancer")
    alone = _outcomes([clean], "breast_cancer")
    assert [r.attack for r in out[0]] == ["none", "nsb"]
    assert [(r.mp, r.ap) for r in out[0]] == [(r.mp, r.ap) for r in alone[0]]
    (lrb,) = out[1]
    assert lrb.ap_chance == pytest.approx(_guess_on_unattacked(_lrb("breast_cancer")))
    assert lrb.ap_chance > 0.9  # the trigger alone sends nearly every row there
    assert lrb.ap_advantage == pytest.approx(gain(lrb.ap, lrb.ap_chance))
    # what the backdoor adds is the last few rows the trigger alone left: an advantage
    # its error cannot tell from 0 (the old baseline, the backdoored model's untriggered
    # rows, read ~1.0 with an error near 0)
    assert lrb.ap_advantage - 1.96 * lrb.ap_advantage_se < 0.0


@pytest.mark.parametrize("schedule", [STACKED, ONE_BY_ONE])
def test_a_lone_attacked_training_gets_a_twin_of_its_own(schedule: object) -> None:
    """Alone (as ``run_trial`` runs it) a twin trains for it and yields nothing itself;
    the baseline equals the guess on an independently trained clean model, and the
    advantage and its error follow (digits: the trigger alone moves no row)."""
    spec = _lrb("digits", 1)
    assert len(Twins([Job(spec)]).jobs) == 2
    out = _outcomes([Job(spec)], "digits", schedule)
    assert list(out) == [0]
    (lrb,) = out[0]
    assert lrb.ap_chance == pytest.approx(_guess_on_unattacked(spec))
    rows = json.loads(lrb.extra)["scored_rows"]  # triggered rows of other classes
    assert 0 < rows <= round(0.2 * len(load_dataset("digits").y_test))
    assert lrb.ap_chance == 0.0 and lrb.ap_advantage == pytest.approx(lrb.ap)
    assert lrb.ap_advantage_se > 0.0


def test_without_a_twin_the_baseline_is_unknown() -> None:
    """An attack that declares its baseline on a twin gets none from its own training:
    through the harness alone chance, advantage and error are NaN, not the backdoored
    model's own."""
    spec = _lrb("digits")
    parties = train_local_parties(prepare_parties(spec, load_dataset("digits")), EPOCHS)[1]
    (out,) = run_attacks(parties, [("lrb", {"test_ratio": 0.2})], spec.seed)
    assert not math.isnan(out.ap)
    assert all(math.isnan(v) for v in (out.score.chance, out.score.advantage))
    assert math.isnan(out.score.advantage_se)


def test_an_adapted_attackers_trials_each_score_their_setting_on_the_one_twin() -> None:
    """An adapted LRB (``train_attack_adapt``) trains one training per setting; all share
    one twin, which scores each setting's trigger (``trigger_size`` differs), and both
    the default and the ``@adapted`` record carry the baseline of their own setting."""
    spec = _spec("breast_cancer", train_attack="lrb", train_attack_params={"test_ratio": 0.2},
                 train_attack_adapt={"trials": 3, "sampler": "random"})  # fmt: skip
    twins = Twins([Job(s, tuned=True) for s in trial_specs(spec)])
    assert len(twins.jobs) == 4  # three trials, one twin
    settings = {json.dumps(p, sort_keys=True) for _, p in twins.jobs[3].baselines}
    assert len(settings) == 3, settings  # the default and two drawn settings
    out = _outcomes([Job(spec)], "breast_cancer")
    default, adapted = out[0]
    assert adapted.attack_adapted and not default.attack_adapted
    for record in (default, adapted):
        params = json.loads(record.spec_json)["train_attack_params"]
        chosen = json.loads(record.extra).get("attack_params", {})
        ran = _spec("breast_cancer", train_attack="lrb", train_attack_params={**params, **chosen})
        assert record.ap_chance == pytest.approx(_guess_on_unattacked(ran)), record.attack_label
        assert 0.0 < record.ap_chance < 1.0  # not a trivial 0 or 1: 20 % of the test rows


def test_a_fedhssl_trial_fine_tunes_its_twin_from_the_same_encoders() -> None:
    """FedHSSL's LRB is installed at fine-tuning, so its twin is a fine-tuning without
    it from the same pretrained encoders: the record gets a baseline, not NaN."""
    tiny = {"pretrain_epochs": 1, "pretrain_batch": 128, "hidden": 16, "emb": 8, "proj": 16,
            "pred": 8, "ft_lr": 0.01}  # fmt: skip
    spec = TrialSpec.build(
        dataset="breast_cancer", ssl_variant="local_simsiam", aligned_ratio=0.5, n_labeled=60,
        epochs=3, batch_size=32, model_params=tiny, train_attack="lrb",
        train_attack_params={"test_ratio": 0.2},
    )  # fmt: skip
    (lrb,) = run_trial(spec)
    assert lrb.attack == "lrb" and json.loads(lrb.extra)["scored_rows"] > 5
    assert lrb.ap_chance > 0.5  # breast_cancer's trigger alone, as on the NN path
    assert lrb.ap_advantage == pytest.approx(gain(lrb.ap, lrb.ap_chance))
