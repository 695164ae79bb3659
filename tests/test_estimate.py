"""The one wall-time estimate: measured parts, what is already recorded, missing data.

Real trainings in this process (breast_cancer, a few epochs), a real cost cache file in
``tmp_path``, real records written by the sink.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sweep_engine import packs
from sweep_engine.cli import main as sweep_main
from sweep_engine.costs import Costs, attack_key, learn, load, train_key
from sweep_engine.estimate import estimate
from sweep_engine.packs import attack_cost, cost
from sweep_engine.plan import expand
from sweep_engine.probe import parts
from sweep_engine.sink import RecordSink
from sweep_engine.space import load_space
from trainables.trial import run_trial

SPACE = """\
name: est
base: {dataset: breast_cancer, n_parties: 2, epochs: 4}
grid:
  seed: [0, 1, 2]
attacks: [ns]
"""


def _plan(tmp_path: Path, text: str = SPACE, **kw: object):
    path = tmp_path / "est.yaml"
    path.write_text(text)
    return expand(load_space(str(path)), **kw)


def test_probe_measures_each_part_once_and_caches_it(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    costs = Costs(path=tmp_path / "costs.json")
    first = estimate(plan, cpus=2, probe=True, budget_s=60, costs=costs)
    assert first.todo == 3 and first.measured == 3 and first.unknown == 0
    spec = plan.trainings[0].spec
    assert costs.training(train_key(spec)) is not None  # one class: all seeds share it
    assert costs.evaluation(attack_key("ns", spec)) is not None
    assert first.seconds > 0 and "3 of 3 from parts measured here" in first.text()
    again = estimate(plan, cpus=2, probe=True, budget_s=60, costs=load(tmp_path / "costs.json"))
    assert again.seconds == pytest.approx(first.seconds)  # read back, not measured again
    assert again.probed_s < first.probed_s and first.unprobed == again.unprobed == 0


def test_a_probe_past_its_budget_is_stopped_and_the_estimate_says_what_it_left(
    tmp_path: Path,
) -> None:
    """The budget holds mid-probe: the probe runs in a child process that is stopped at the
    deadline (a spawned child takes longer than 0.3 s to import torch, so nothing is
    measured), and the answer names the classes it could not measure."""
    import time

    plan = _plan(tmp_path, SPACE.replace("seed: [0, 1, 2]", "seed: [0, 1]\n  epochs: [4, 6]"))
    costs = Costs(path=tmp_path / "costs.json")
    start = time.perf_counter()
    cut = estimate(plan, cpus=2, probe=True, budget_s=0.3, costs=costs)
    assert time.perf_counter() - start < 8.0  # the budget, the kill and the join
    assert cut.measured == 0 and cut.unprobed == 1  # epochs share one class
    assert "1 class of training not measured within the probe budget" in cut.text()
    assert costs.training(train_key(plan.trainings[0].spec)) is None


def test_without_measurements_the_cost_model_answers(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    guess = estimate(plan, cpus=2, probe=False, costs=Costs(path=tmp_path / "c.json"))
    assert guess.measured == 0 and guess.seconds > 0
    assert "the rest by the cost model" in guess.text()


def test_recorded_trainings_are_not_counted(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    costs = Costs(path=tmp_path / "costs.json")
    full = estimate(plan, cpus=2, probe=True, budget_s=60, costs=costs)
    sweep_dir = tmp_path / "results" / "est"
    first = plan.trainings[0]
    RecordSink(sweep_dir).write(
        first.trial_id, run_trial(first.spec, attacks=first.attacks, trial_id=first.trial_id)
    )
    left = estimate(plan, cpus=2, probe=True, budget_s=60, costs=costs, sweep_dir=sweep_dir)
    assert (left.recorded, left.todo) == (1, 2)
    assert left.seconds < full.seconds
    assert "1 already recorded" in left.text()


def test_learn_takes_the_sweep_numbers_over_the_probe(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    costs = Costs(path=tmp_path / "costs.json")
    spec = plan.trainings[0].spec
    costs.add_training(train_key(spec), 100.0, 100.0, "probe")  # a wildly wrong probe
    sweep_dir = tmp_path / "results" / "est"
    for t in plan.trainings:
        records = run_trial(t.spec, attacks=t.attacks, trial_id=t.trial_id)
        RecordSink(sweep_dir).write(t.trial_id, records)
    assert learn(sweep_dir, costs) == 3
    fixed, per_epoch = costs.training(train_key(spec))  # type: ignore[misc]
    assert fixed == 0.0 and per_epoch < 10.0
    assert costs.source[f"train:{train_key(spec)}"] == "sweep"
    costs.add_training(train_key(spec), 100.0, 100.0, "probe")  # a later probe: ignored
    assert costs.training(train_key(spec))[1] < 10.0  # type: ignore[index]
    assert load(tmp_path / "costs.json").training(train_key(spec)) is not None  # saved


def test_missing_data_is_unknown_not_free(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    text = SPACE.replace("breast_cancer", "adult")
    plan = _plan(tmp_path, text, data_dir=tmp_path, missing_ok=True)
    guess = estimate(plan, cpus=2, probe=True, budget_s=60, data_dir=str(tmp_path))
    assert guess.unknown == 3 and guess.text().startswith("unknown: no data for adult")
    (tmp_path / "est.yaml").write_text(text)
    argv = ["--space", str(tmp_path / "est.yaml"), "--dry-run", "--json"]
    assert sweep_main([*argv, "--data-dir", str(tmp_path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["estimate_s"] is None and summary["estimate_unknown"] == 3


def test_a_plan_this_machine_would_refuse_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "big.yaml").write_text(SPACE + "resources: {cpu_per_party: 64}\n")
    assert sweep_main(["--space", str(tmp_path / "big.yaml"), "--dry-run", "--json"]) == 0
    captured = capsys.readouterr()
    assert "warning: a real run here would stop" in captured.err
    assert "cpu_per_party=64" in captured.err
    assert json.loads(captured.out)["trainings"] == 3


SSL = """\
name: est_ssl
base: {dataset: breast_cancer, n_parties: 2, epochs: 3, batch_size: 64, aligned_ratio: 0.5,
       n_labeled: 60, model_params: {pretrain_epochs: 4}}
grid:
  ssl_variant: [splitnn, local_simsiam]
  seed: [0, 1]
"""


def test_fedhssl_mc_counts_its_pretrained_stage_and_the_probe_order_reaches_each_variant(
    tmp_path: Path,
) -> None:
    from sweep_engine.packs import evaluations
    from sweep_engine.probe import levels, to_probe

    plan = _plan(tmp_path, SSL + "attacks: [mc]\n")
    assert evaluations(plan.trainings[0]) == [("mc", 1), ("mc_pretrained", 1)]
    picked = to_probe(list(plan.trainings), Costs(path=tmp_path / "c.json"), remote=False)
    assert [t.spec.ssl_variant for t in picked] == ["splitnn", "local_simsiam"]  # a class each
    assert levels(picked[1])[2] == ("hssl", "local_simsiam")


def test_a_pretraining_class_is_probed_at_one_pretraining_epoch_and_scaled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe of a FedHSSL-family class pretrains one epoch (a record's
    ``pretrain_seconds``) and counts it ``pretrain_epochs`` times in the class's fixed
    seconds; every probe run is at one pretraining epoch."""
    from sweep_engine import probe as est

    runs: list[tuple[int, float, bool]] = []
    real = est.run_trial

    def timed(spec, **kw):  # the real trial; what it ran, its pretraining seconds, attacks
        records = real(spec, **kw)
        extra = json.loads(records[0].extra or "{}")
        pre = extra.get("pretrain_seconds", 0)
        runs.append((spec.model_params.get("pretrain_epochs"), pre, "attacks" in kw))
        return records

    monkeypatch.setattr(est, "run_trial", timed)
    plan = _plan(tmp_path, SSL)
    costs = Costs(path=tmp_path / "costs.json")
    ssl = next(t for t in plan.trainings if t.spec.ssl_variant == "local_simsiam")
    est._probe(ssl, costs, None)
    assert runs and all(pre == 1 for pre, _, _ in runs)
    key = train_key(ssl.spec)
    fixed, _ = costs.training(key)
    pretraining = costs.pretraining(key)  # kept apart from the fine-tuning's fixed seconds
    # four epochs of the one run that timed it: the run with the attacks (the warm-up and
    # the longer fine-tuning run after it pretrain too; under load their seconds differ)
    (probed,) = [seconds for _, seconds, with_attacks in runs if with_attacks]
    assert pretraining == pytest.approx(4 * probed) and probed > 0
    assert fixed < pretraining
    got = estimate(plan, cpus=2, probe=False, costs=costs)
    assert got.measured == 2  # the two seeds of the probed class
    # on actors with a CPU each, the parties pretrain side by side: half the one process's
    alone, _ = parts(ssl, costs, remote=False)
    side_by_side, _ = parts(ssl, costs, remote=False, parallel=2.0)
    assert alone - side_by_side == pytest.approx(pretraining / 2)


def test_the_cost_model_pretrains_per_stage_and_completion_costs_more_with_columns(
    tmp_path: Path,
) -> None:
    """Pretraining: none for splitnn, the local step for local_*, the cross-party step on
    the aligned rows on top for hssl_* (more aligned rows, more cost); it counts
    ``parallel`` times faster where parties pretrain side by side. Model completion's
    fixed steps cost more on more attacker columns; other attacks scale by rows."""
    text = SSL.replace("[splitnn, local_simsiam]", "[splitnn, local_simsiam, hssl_simsiam]")
    by = {t.spec.ssl_variant: cost(t, remote=False) for t in _plan(tmp_path, text).trainings}
    assert by["splitnn"].pretrain == 0 < by["local_simsiam"].pretrain < by["hssl_simsiam"].pretrain
    more = text.replace("aligned_ratio: 0.5", "aligned_ratio: 1.0")
    hssl = next(t for t in _plan(tmp_path, more).trainings if t.spec.ssl_variant == "hssl_simsiam")
    assert cost(hssl, remote=False).pretrain > by["hssl_simsiam"].pretrain
    local = by["local_simsiam"]
    assert local.training(2.0) == pytest.approx(local.training() - local.pretrain / 2)
    cancer = _plan(tmp_path, SPACE).trainings[0].spec
    digits = cancer.model_copy(update={"dataset": "digits"})
    assert attack_cost("pmc", digits) == pytest.approx(packs.ATTACK_S["pmc"])  # the profile's
    assert attack_cost("pmc", cancer) < attack_cost("pmc", digits)  # 15 columns against 32
    assert attack_cost("bli", digits) == pytest.approx(packs.ATTACK_S["bli"])
    assert attack_cost("bli", cancer) < packs.ATTACK_S["bli"] / 2  # 455 rows against 1,437


class _Sent:
    """The probe child's pipe end: what it sent, in order."""

    def __init__(self) -> None:
        self.messages: list[tuple] = []

    def send(self, message: tuple) -> None:
        self.messages.append(message)

    def close(self) -> None:
        pass


def _parts_sent(messages: list[tuple]) -> list[list[str]]:
    """Per message: ``train`` for a training's seconds, the attacks' names, or ``class``."""
    out = []
    for m in messages:
        if m[0] == "class":
            out.append(["class"])
            continue
        _, train, attack = m
        names = ["train"] * len(train) + sorted(k.split("|")[0] for k in attack)
        if names:
            out.append(names)
    return out


def test_the_probe_sends_each_part_as_it_is_measured_costliest_attack_first(
    tmp_path: Path,
) -> None:
    """A probe stopped at its budget keeps what it finished: the child sends the training's
    seconds, then each attack's on its own, the cost model's costliest first (tbm before
    ns and ds), then the end of the class; parts measured already are not timed again."""
    from sweep_engine.packs import attack_cost
    from sweep_engine.probe import _probe_child

    plan = _plan(tmp_path, SPACE.replace("attacks: [ns]", "attacks: [ns, ds, tbm]"))
    t = plan.trainings[0]
    assert attack_cost("tbm", t.spec) > attack_cost("ns", t.spec)  # the order's premise
    sent = _Sent()
    _probe_child([t], None, frozenset(), sent)
    assert _parts_sent(sent.messages) == [["train"], ["tbm"], ["ns"], ["ds"], ["class"]]
    train = sent.messages[0][1][train_key(t.spec)]
    assert train["epoch"][0] > 0  # a real timing
    known = frozenset({train_key(t.spec), attack_key("tbm", t.spec)})
    again = _Sent()
    _probe_child([t], None, known, again)
    assert _parts_sent(again.messages) == [["ns"], ["ds"], ["class"]]


def test_each_study_of_a_search_pays_its_processes_start(tmp_path: Path) -> None:
    """A search runs a Tuner per cell, whose trial processes and party actors start anew:
    a second cell adds its trials and one more set of process starts."""
    from sweep_engine.estimate import IMPORT_S, SEARCH_TRIAL_S, TRAINING_S

    search = (
        "search:\n  params:\n    lr: {low: 0.01, high: 0.1, log: true}\n"
        "  objectives: [{metric: mp, mode: max}]\n  n_trials: 3\n"
    )
    one = _plan(tmp_path, SPACE.replace("  seed: [0, 1, 2]", "  seed: [0]") + search)
    two = _plan(tmp_path, SPACE.replace("  seed: [0, 1, 2]", "  seed: [0, 1]") + search)
    costs = Costs(path=tmp_path / "costs.json")
    costs.add_training(train_key(one.trainings[0].spec), 0.5, 0.25, "sweep")
    costs.add_evaluation(attack_key("ns", one.trainings[0].spec), 0.2, "sweep")
    a = estimate(one, cpus=2, probe=False, costs=costs)
    b = estimate(two, cpus=2, probe=False, costs=costs)
    trial = 0.5 + 0.25 * 4 + 0.2 + TRAINING_S + SEARCH_TRIAL_S  # CPU-s of one trial
    assert a.slots == b.slots == 1  # a CPU per party by default: one trial on 2 CPUs
    study = (1 + 2) * IMPORT_S  # its trial's process and 2 party actors
    assert b.seconds - a.seconds == pytest.approx(3 * trial + study)


def test_a_version_1_cache_drops_only_its_probed_pretraining_classes(tmp_path: Path) -> None:
    """Version 1 held a probe's pretraining inside ``fixed`` (one process): those classes
    are probed again; a plain class and the actors' own numbers of an SSL class stay."""

    def key(variant: str | None, seed_free: str) -> str:
        return json.dumps({"dataset": seed_free, "ssl_variant": variant}, sort_keys=True)

    probed_ssl, plain, learned = (
        key("local_simsiam", "adult"),
        key(None, "digits"),
        key("hssl_simsiam", "mnist"),
    )
    slot = {"fixed": [50.0], "epoch": [0.01]}
    old = {
        "version": 1,
        "train": {probed_ssl: slot, plain: slot, learned: slot},
        "attack": {"mc|adult|{}|2|agg": [3.8]},
        "source": {f"train:{probed_ssl}": "probe", f"train:{plain}": "probe",
                   f"train:{learned}": "sweep", "attack:mc|adult|{}|2|agg": "probe"},
    }  # fmt: skip
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(old))
    costs = load(path)
    assert costs.training(probed_ssl) is None
    assert costs.training(plain) == (50.0, 0.01) and costs.training(learned) == (50.0, 0.01)
    assert costs.evaluation("mc|adult|{}|2|agg") == 3.8
    costs.save()
    assert json.loads(path.read_text())["version"] == 2


def test_estimate_probes_every_class_without_a_deadline(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--estimate`` probes with an infinite budget: it waited on the probe child with
    ``Connection.poll(inf)``, which raised OverflowError (issue 63), on every space with a
    class to probe. Now every class is measured, the estimate printed, no traceback; a
    mistyped ``$VFLSWEEP_PROBE_S`` is a ConfigError (exit 2), not a ValueError."""
    monkeypatch.setenv("VFLSWEEP_CACHE", str(tmp_path / "cache"))  # a fresh, empty cache
    (tmp_path / "est.yaml").write_text(SPACE)
    argv = ["--space", str(tmp_path / "est.yaml"), "--dry-run", "--json"]
    argv += ["--results", str(tmp_path / "results")]
    assert sweep_main([*argv, "--estimate"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err, captured.err
    summary = json.loads(captured.out)
    assert summary["estimate_s"] > 0
    assert "3 of 3 from parts measured here" in summary["estimate"], summary["estimate"]
    monkeypatch.setenv("VFLSWEEP_PROBE_S", "20s")
    assert sweep_main(argv) == 2
    err = capsys.readouterr().err
    assert "VFLSWEEP_PROBE_S='20s': not a number" in err and "Traceback" not in err


def test_a_probe_that_fails_unexpectedly_warns_in_one_line_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error the probe does not expect (here a KeyError) no longer ends the child with a
    traceback and loses every class after it: one warning line, then the next class."""
    from sweep_engine import probe

    def broken(*_: object, **__: object) -> None:
        raise KeyError("pretrain_seconds")

    monkeypatch.setattr(probe, "_probe", broken)
    plan = _plan(tmp_path)
    sent = _Sent()
    probe._probe_child(list(plan.trainings[:2]), None, frozenset(), sent)
    assert _parts_sent(sent.messages) == [["class"], ["class"]]
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 2, err
    assert "the probe of a breast_cancer nn mlp2 training failed (KeyError" in err, err


def test_a_stacked_pack_counts_its_trainings_cost_and_runs_in_one_slot(tmp_path: Path) -> None:
    """40 tiny trainings that stack (``run.vectorize``, plain NN) are one pack: each costs
    its trial ``STACKED_TRAINING_S`` beyond its measured seconds, not ``TRAINING_S``, and
    the one pack runs in one trial, so the second slot does not halve it."""
    from sweep_engine.estimate import PROCESS_S, STARTUP_S, TRAINING_S

    text = (
        "name: est\nbase: {dataset: breast_cancer, n_parties: 2, epochs: 4}\n"
        "grid:\n  seed: [" + ", ".join(map(str, range(40))) + "]\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
    )
    costs = Costs(path=tmp_path / "costs.json")
    stacked = _plan(tmp_path, text)
    costs.add_training(train_key(stacked.trainings[0].spec), 0.01, 0.001, "sweep")
    got = estimate(stacked, cpus=2, probe=False, costs=costs)
    assert got.slots == 2
    assert len(packs.packs_for(stacked.trainings, stacked.space.run, 2, None)) == 1
    one = 0.01 + 0.001 * 4  # a training's measured seconds (the ray transport's share: 0)
    pack = PROCESS_S * 3 + 40 * (one + packs.STACKED_TRAINING_S)
    assert got.seconds == pytest.approx(STARTUP_S + pack)
    apart = _plan(tmp_path, text + "run: {vectorize: false}\n")
    alone = estimate(apart, cpus=2, probe=False, costs=costs)
    assert alone.seconds - STARTUP_S >= 40 * (one + TRAINING_S) / 2  # the unstacked fixed cost
