"""Packed trials: one Tune trial runs several trainings of one shape on warm actors, and
records, progress, errors and retries stay per training (``sweep_engine/grid.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as pads
import pytest

from sweep_engine.packs import STACK_MIN, cost, lone_twins, make_packs, shape_key
from sweep_engine.plan import expand
from sweep_engine.space import load_space
from trainables.results.faults import FAULT_ENV
from trainables.trial import run_trial
from trainables.vfl.twins import unattacked

ROOT = Path(__file__).resolve().parents[1]


def _space(tmp_path: Path, name: str, pack: object, seeds: int, extra: str = "") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nbase: {{dataset: breast_cancer, epochs: 3}}\n"
        f"grid: {{seed: {list(range(seeds))}, partition: [agg, split]}}\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
        f"run: {{pack: {pack}, max_failures: 1{extra}}}\n"
    )
    return path


def _rows(results: Path, name: str) -> list[dict]:
    return pads.dataset(results / name / "records", format="parquet").to_table().to_pylist()


def test_packs_hold_one_shape_and_auto_spreads_them_over_the_slots(tmp_path: Path) -> None:
    space = tmp_path / "mixed.yaml"
    space.write_text(
        "name: mixed\nbase: {epochs: 2}\n"
        "grid: {dataset: [breast_cancer, digits], seed: [0, 1, 2, 3, 4, 5, 6]}\n"
    )
    plan = expand(load_space(str(space)))
    fixed = make_packs(plan.trainings, 3, slots=2, target_s=5.0)
    assert [len(p.trainings) for p in fixed] == [3, 3, 1, 3, 3, 1]
    for pack in fixed:
        assert len({shape_key(t.spec) for t in pack.trainings}) == 1
    one = make_packs(plan.trainings, "auto", slots=2, target_s=1e6)
    assert [len(p.trainings) for p in one] == [7, 7]  # a shape that fits: one pack, one start
    tiny = make_packs(plan.trainings, "auto", slots=1, target_s=1e-6, remote=False)
    assert all(len(p.trainings) == 1 for p in tiny)  # in one process: never over the target
    # on actors, plain NN packs run stacked: at least STACK_MIN per pack, since a
    # pack of K pays one round trip per round instead of K; still spread over the slots
    ray_tiny = make_packs(plan.trainings, "auto", slots=1, target_s=1e-6)
    assert [len(p.trainings) for p in ray_tiny] == [STACK_MIN, 3] * 2
    ray_spread = make_packs(plan.trainings, "auto", slots=4, target_s=1e-6)
    assert [len(p.trainings) for p in ray_spread] == [2, 2, 2, 1] * 2
    digits = [t for t in plan.trainings if t.spec.dataset == "digits"]
    per = cost(digits[0]).total
    spread = make_packs(digits, "auto", slots=2, target_s=per * 6.5)  # 6 fit, 7 do not
    assert [len(p.trainings) for p in spread] == [4, 3]  # both slots busy, not 6 + 1
    # stacked (vectorized) packs cost a third: the seven now fit the target in one pack
    stacked = make_packs(digits, "auto", slots=2, target_s=per * 6.5, vectorize=True)
    assert [len(p.trainings) for p in stacked] == [7]


def test_vectorized_packs_keep_trainings_that_stack_together(tmp_path: Path) -> None:
    """Under ``run.vectorize`` a shape's trainings are packed in stack order: in plan order
    (seed-major here) a pack of 4 would hold two defenses' trainings, which stack with
    nothing; in stack order each pack holds one defense's, at any strength and seed."""
    space = tmp_path / "stackorder.yaml"
    space.write_text(
        "name: stackorder\nbase: {dataset: digits, epochs: 2}\n"
        "grid: {seed: [0, 1, 2, 3]}\n"
        "defenses: {mid: [0.01, 1.0], cae: [0.1, 0.5]}\n"
    )
    trainings = expand(load_space(str(space))).trainings
    assert len({t.spec.defense for t in trainings[:4]}) > 1  # plan order mixes them
    for vectorize, mixed in ((True, False), (False, True)):
        packs = make_packs(trainings, 4, slots=2, target_s=5.0, vectorize=vectorize)
        kinds = [{t.spec.defense for t in p.trainings} for p in packs]
        assert any(len(k) > 1 for k in kinds) is mixed
        assert sorted(t.trial_id for p in packs for t in p.trainings) == sorted(
            t.trial_id for t in trainings
        )


@pytest.mark.parametrize("size", [2, 3, 4])
def test_a_backdoor_training_is_packed_with_its_unattacked_twin(tmp_path: Path, size: int) -> None:
    """LRB's baseline is its trigger on the cell's clean training (``vfl/twins.py``):
    each LRB training joins the pack of that training, at any pack size, so no twin
    trains for it alone, and the pack's LRB trainings stack as their clean twins do;
    AMC's trainings (no such baseline) still pack by themselves."""
    space = tmp_path / "twins.yaml"
    space.write_text(
        "name: twins\nbase: {dataset: digits, epochs: 2}\ngrid: {seed: [0, 1, 2]}\n"
        "defenses: {mid: [0.01, 1.0]}\nattacks: [dli, lrb, amc]\n"
    )
    trainings = expand(load_space(str(space))).trainings
    lrb = [t for t in trainings if t.spec.train_attack == "lrb"]
    assert len(lrb) == 9  # undefended and two strengths, three seeds
    packs = make_packs(trainings, size, slots=2, target_s=5.0, vectorize=True)
    pack_of = {t.trial_id: k for k, p in enumerate(packs) for t in p.trainings}
    twin = {t.spec.config_hash: t.trial_id for t in trainings if t.spec.train_attack == "none"}
    assert all(pack_of[t.trial_id] == pack_of[twin[unattacked(t.spec).config_hash]] for t in lrb)
    assert all(len(p.trainings) <= 2 * size for p in packs)
    assert sorted(pack_of) == sorted(t.trial_id for t in trainings)
    amc = [p for p in packs if any(t.spec.train_attack == "amc" for t in p.trainings)]
    assert sum(len(p.trainings) for p in amc) <= 9 + 2 * size  # together, not spread out
    assert not lone_twins(packs)  # the estimate counts no twin training
    alone = make_packs(lrb, size, slots=2, target_s=5.0, vectorize=True)  # siblings done
    assert lone_twins(alone) == {t.trial_id for t in lrb}


def _sweep(space: Path, results: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "sweep.py", "--space", str(space), "--results", str(results)]
    cmd += ["--no-mlflow", "--num-cpus", "2"]
    full = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **env}
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=full, timeout=300)


def test_a_packed_sweep_records_every_training_once_as_run_alone(tmp_path: Path) -> None:
    results = tmp_path / "results"
    out = _sweep(_space(tmp_path, "packed", 3, seeds=3), results, {})
    assert out.returncode == 0, out.stderr[-3000:]
    assert "6 trainings in 2 packs (run.pack=3)" in out.stdout
    assert sum(line.startswith("[") and "mp=" in line for line in out.stdout.splitlines()) == 6
    rows = _rows(results, "packed")
    assert sorted(r["trial_id"] for r in rows) == sorted({r["trial_id"] for r in rows})
    plan = expand(load_space(str(tmp_path / "packed.yaml")))
    assert {r["trial_id"] for r in rows} == {t.trial_id for t in plan.trainings}
    for training in plan.trainings[:2]:  # on actors, in a pack = alone, in this process
        (alone,) = run_trial(training.spec)
        (row,) = [r for r in rows if r["trial_id"] == training.trial_id]
        assert (row["mp"], row["rounds"], row["comm_bytes"]) == (
            alone.mp, alone.rounds, alone.comm_bytes,
        )  # fmt: skip


def test_a_fault_in_a_pack_retries_from_the_training_that_failed(tmp_path: Path) -> None:
    results = tmp_path / "results"
    space = _space(tmp_path, "faulty", 4, seeds=2, extra=", max_concurrent_trials: 1")
    out = _sweep(space, results, {FAULT_ENV: "fail_training:3"})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("[retry]") == 1, out.stdout[-3000:]
    assert "after 2 trainings; retrying from the next" in out.stdout, out.stdout[-3000:]
    assert "ran twice" not in out.stdout  # the two finished before the fault did not re-run
    rows = _rows(results, "faulty")
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)


def test_a_pack_out_of_retries_blames_one_training_and_names_the_rest(tmp_path: Path) -> None:
    results = tmp_path / "results"
    space = tmp_path / "broken.yaml"
    space.write_text(
        "name: broken\nbase: {dataset: breast_cancer, epochs: 2}\n"
        "grid: {seed: [0, 1, 2, 3]}\n"
        "resources: {cpu_per_party: 0.5, cpu_per_trial: 0}\n"
        "run: {pack: 4, max_failures: 0}\n"
    )
    out = _sweep(space, results, {FAULT_ENV: "fail_training:2"})
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    rows = _rows(results, "broken")
    assert len(rows) == 4 and [r["status"] for r in rows].count("ok") == 1
    errors = [r["error"] or "" for r in rows if r["status"] == "error"]
    blamed = [e for e in errors if not e.startswith("not run: its pack failed on training")]
    assert len(blamed) == 1 and "InjectedFault" in blamed[0], errors
    assert all("fail_training:2" in e for e in errors), errors


@pytest.mark.parametrize("bad", ["0", "-2", "many", "true"])
def test_a_bad_pack_size_is_refused_naming_the_key(
    tmp_path: Path, refused_sweep: object, bad: str
) -> None:
    space = _space(tmp_path, "badpack", bad, seeds=1)
    refused_sweep(space, ["run.pack", "allowed: a whole number >= 1, or auto"])  # type: ignore[operator]


def test_model_completion_costs_the_same_whatever_the_rows() -> None:
    """Completion runs epochs x steps_per_epoch steps of a fixed batch, so not the rows but
    the attacker's columns set its cost: breast_cancer's 15 against digits' 32 make 0.90 of
    it, as measured (PMC 3.6 s against 4.0 s, attacks.yaml); BLI, GRN and TBM read the
    training's rows, so their cost model scales with them."""
    from sweep_engine.packs import attack_cost
    from trainables.spec import TrialSpec

    digits, breast = TrialSpec.build(dataset="digits"), TrialSpec.build(dataset="breast_cancer")
    fewer = TrialSpec.build(dataset="digits", n_labeled=100)
    for name in ("pmc", "mc", "amc"):
        assert attack_cost(name, fewer) == attack_cost(name, digits) > 0
        assert attack_cost(name, breast) / attack_cost(name, digits) == pytest.approx(0.9, abs=0.02)
    assert attack_cost("bli", breast) < 0.5 * attack_cost("bli", digits)
    assert attack_cost("bli", fewer) < 0.1 * attack_cost("bli", digits)


def test_the_packs_line_is_printed_for_every_grid_and_says_why_trainings_run_alone(
    tmp_path: Path,
) -> None:
    """Issue 63: an SSL space ran one training a pack and the README's "N trainings in K
    packs" line never printed; it now always does, with the reason when each runs alone."""
    from sweep_engine.grid import packs_line

    space = tmp_path / "mixed.yaml"
    space.write_text(
        "name: mixed\nbase: {epochs: 2}\n"
        "grid: {dataset: [breast_cancer, digits], seed: [0, 1, 2]}\n"
    )
    plan = expand(load_space(str(space)))
    todo = list(plan.trainings)
    one = make_packs(todo, "auto", slots=2, target_s=1e6)
    assert packs_line(plan, todo, one) == "6 trainings in 2 packs (run.pack=auto)"
    alone = make_packs(todo, "auto", slots=1, target_s=1e-6, remote=False)
    line = packs_line(plan, todo, alone)
    assert line.startswith("6 trainings in 6 packs (run.pack=auto; one training a pack: ")
    assert "2 shapes, each training estimated at more than run.pack_seconds=" in line
    shapes = [t for t in todo if t.spec.seed == 0]  # one training of each shape
    single = make_packs(shapes, "auto", slots=1, target_s=1e6)
    assert "every training a shape of its own" in packs_line(plan, shapes, single)


def test_a_pack_that_failed_before_its_first_report_is_recorded_failed(tmp_path: Path) -> None:
    """Ray reads a result's config from its metrics: a Tune trial that failed before its
    first report has none. Its pack's trainings are still recorded as failed, with the
    error (until 2026-12-07 the sweep crashed with a TypeError here)."""
    from ray.tune import Result

    from sweep_engine.grid import failures_of, pack_config

    space = tmp_path / "fail.yaml"
    space.write_text("name: fail\nbase: {dataset: digits, epochs: 2}\ngrid: {seed: [0, 1, 2]}\n")
    trainings = expand(load_space(str(space))).trainings
    one, two, three = make_packs(trainings, 1, slots=1, target_s=5.0)
    seen = {one.trainings[0].trial_id}  # pack one recorded; two reported then failed
    results = [
        Result(
            metrics={"config": {"cell": pack_config(one)}}, checkpoint=None, error=None, path=""
        ),
        Result(
            metrics={"config": {"cell": pack_config(two)}},
            checkpoint=None,
            error=RuntimeError("boom in two"),
            path="",
        ),
        Result(metrics={}, checkpoint=None, error=RuntimeError("actor died"), path=""),
    ]
    rows = {trial_id: text for trial_id, _, text in failures_of(results, [one, two, three], seen)}
    assert set(rows) == {two.trainings[0].trial_id, three.trainings[0].trial_id}
    assert "boom in two" in rows[two.trainings[0].trial_id]
    text = rows[three.trainings[0].trial_id]
    assert "failed before its first report" in text and "actor died" in text
